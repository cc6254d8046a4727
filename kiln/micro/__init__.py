"""microTVM for kiln: C for bare-metal boards, the AOT executor's Model Library Format, and the
emulated Cortex-M3 board (qemu mps2-an385) projects. See docs/microtvm.md."""

from .model_library_format import export_model_library_format  # noqa: F401
from .project import get_microtvm_template_projects  # noqa: F401
from . import project  # noqa: F401,E402
from .graph_executor import create_local_aot_executor, create_local_graph_executor  # noqa: F401,E402
from .session import MicroSessionError, Session  # noqa: F401,E402
