"""``tvm.te``: tensor expressions and schedules."""

from kiln.ir.expr import IterVar, const  # noqa: F401
from kiln.tir.op import (  # noqa: F401
    abs, acos, all, any, asin, atan, ceil, cos, cosh, erf, exp, exp2, floor, floordiv, floormod,
    if_then_else, isnan, log, log2, log10, max_value, min_value, nearbyint, power, round, rsqrt,
    sigmoid, sin, sinh, sqrt, tan, tanh, trunc, truncdiv, truncmod, indexdiv, indexmod,
)

from .extern import ExternOp, extern  # noqa: F401
from .reduction import CommReducer, comm_reducer, max, min, prod, sum  # noqa: F401
from .schedule import Schedule, Stage, create_schedule  # noqa: F401
from .tensor_intrin import TensorIntrin, decl_tensor_intrin  # noqa: F401
from .tensor import (  # noqa: F401
    ComputeOp, Operation, PlaceholderOp, Tensor, compute, placeholder, reduce_axis, size_var, thread_axis, var,
)
from .prim_func import create_prim_func  # noqa: F401
