"""Per-compiler support tables for bring-your-own-codegen: ``dnnl`` (oneDNN), ``clml``,
``cublas``, ``cudnn``.

Each module registers ``"target.<compiler>"`` predicates on the ops it can run and offers
``partition_for_<compiler>(mod, params)``. Import the one you use
(``from kiln.relay.op.contrib.dnnl import partition_for_dnnl``); AnnotateTarget imports it for you.
"""

import importlib as _importlib

COMPILERS = ("dnnl", "clml", "cublas", "cudnn")


def __getattr__(name: str):
    if name in COMPILERS:  # relay.op.contrib.dnnl.partition_for_dnnl(...) without an import
        module = _importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; compilers: {', '.join(COMPILERS)}")
