"""microTVM for kiln: C for bare-metal boards, the AOT executor's Model Library Format, the C
runtime's host-driven sessions, and the emulated Cortex-M boards (qemu mps2-an385/an386/an500,
mps3-an547) as project templates. TVM 0.13's names: ``generate_project``, ``Session``,
``create_local_aot_executor``, ``get_standalone_crt_dir``, ``autotvm_build_func``,
``AutoTvmModuleLoader``, ``testing``. See docs/microtvm.md."""

from .model_library_format import export_model_library_format  # noqa: F401
from .project import generate_project, generate_project_from_mlf  # noqa: F401
from .project import get_microtvm_template_projects, get_standalone_crt_dir  # noqa: F401
from . import project  # noqa: F401,E402
from .graph_executor import create_local_aot_executor, create_local_graph_executor  # noqa: F401,E402
from .graph_executor import create_local_graph_executor as create_local_debug_executor  # noqa: F401,E402
from .session import MicroSessionError, Session  # noqa: F401,E402
from .autotvm_api import AutoTvmModuleLoader, autotvm_build_func  # noqa: F401,E402


def __getattr__(name):
    if name == "testing":  # helpers for tutorials and tests; loaded on first use
        import importlib
        return importlib.import_module(".testing", __name__)
    raise AttributeError(f"module 'kiln.micro' has no attribute {name!r}")
