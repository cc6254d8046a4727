"""``tvm.topi``: operator computes and CPU schedules.

Computes: ``topi.nn.conv2d_nchw``, ``topi.nn.dense``, ``topi.add``, ``topi.sum``, ``topi.reshape``...
Schedules: ``topi.generic.schedule_injective(outs)`` and the fast CPU ones in ``topi.x86`` and
``topi.arm_cpu``; GPU ones in ``topi.gpu`` (every GPU target) and ``topi.mali`` (each takes an
optional config mapping of knobs; see docs/topi.md).
"""

from . import adreno, arm_cpu, cpu, generic, gpu, image, mali, nn, testing, utils, x86  # noqa: F401
from .broadcast import (  # noqa: F401
    add, bitwise_and, bitwise_or, bitwise_xor, broadcast_shape, broadcast_to, divide, equal, floor_divide,
    floor_mod, greater, greater_equal, less, less_equal, logical_and, logical_or, logical_xor, maximum, minimum,
    mod, multiply, not_equal, power, subtract,
)
from .fast_math import fast_erf, fast_exp, fast_gelu, fast_sigmoid, fast_tanh  # noqa: F401
from .math import (  # noqa: F401
    abs, acos, asin, atan, bitwise_not, cast, ceil, cos, cosh, erf, exact_erf, exact_exp, exact_sigmoid, exact_tanh, exp, floor, full, full_like, identity, isinf,
    isnan, log, log2, log10, logical_not, negative, ones_like, reciprocal, round, rsqrt, sigmoid, sign, sin, sinh,
    sqrt, tan, tanh, trunc, zeros_like,
)
from .reduction import all, any, argmax, argmin, max, mean, min, prod, sum  # noqa: F401
from .transform import (  # noqa: F401
    concatenate, expand_dims, flatten, flip, gather, layout_transform, one_hot, repeat, reshape, reverse, split,
    squeeze, stack, strided_slice, take, tile, transpose, where,
)
