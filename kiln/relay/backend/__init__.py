"""The graph compiler's back half: relay primitive functions -> kernels, graph JSON, parameters.

- ``op_impl.py``: which topi compute and schedule each relay op uses (one table).
- ``dispatch.py``: the hook that hands tuned configs (autotvm) to tunable ops.
- ``te_compiler.py``: lowers each fused function to one kernel (cached by structure).
- ``build_cache.py``: the compiled kernels of a model on disk (kiln/cache.py), keyed before lowering.
- ``graph_codegen.py`` + ``memory_plan.py``: graph JSON with a storage-reusing memory plan.
- ``graph_object.py``: the ELF object that carries graph + params inside an exported library.
- ``factory.py``: the module ``relay.build`` returns.
"""

from .executor import Executor, Runtime  # noqa: E402,F401
