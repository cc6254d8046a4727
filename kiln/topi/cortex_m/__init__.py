"""int8 kernels for Cortex-M cores: the multiply-accumulates are tensor intrinsics declared in TE
(kiln/topi/cortex_m/intrin.py) and printed as ACLE (DSP ``__smlad``) or MVE (``vmladavaq_s8``)
calls by the C printer; schedules and AutoTVM knobs in dense_int8.py. The tier comes from the
target's ``-mcpu`` (``isa_tier``)."""

from .intrin import dot_intrin, isa_tier  # noqa: F401
from .dense_int8 import dense_int8, schedule_dense_int8  # noqa: F401
