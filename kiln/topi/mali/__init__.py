"""``topi.mali``: the GPU schedules (``topi.gpu``) with what differs on ARM Mali GPUs.

Mali has no on-chip shared memory: OpenCL ``__local`` is ordinary cached memory there, so
staging tiles through it and synchronizing costs more than it saves. Its shader cores are wide
SIMD units fed by vector instructions: a work-item does more work, as float4 vectors. So the
conv2d and dense kernels here keep every work-item's output tile in registers, read the
operands straight from global memory, and make the innermost column tile one vector (``tile_x``'s
innermost size 4: float4). Everything else is topi.gpu's.
"""

from ..gpu import (  # noqa: F401
    batch_matmul, conv2d_nhwc, conv2d_transpose_nchw, default_schedule, depthwise_conv2d_nchw, layer_norm,
    log_softmax, matmul, pool2d, schedule_adaptive_pool, schedule_broadcast, schedule_concatenate,
    schedule_conv2d_nhwc, schedule_conv2d_transpose_nchw, schedule_elemwise, schedule_global_pool,
    schedule_injective, schedule_layer_norm, schedule_pool, schedule_reduce, schedule_resize, schedule_softmax,
    softmax,
)
from .conv2d import conv2d_nchw, schedule_conv2d_nchw, schedule_depthwise_conv2d_nchw  # noqa: F401
from .dense import dense, schedule_batch_matmul, schedule_dense, schedule_matmul  # noqa: F401
