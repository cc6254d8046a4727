"""``topi.arm_cpu``: schedules for ARM CPUs (NEON).

The algorithms are the x86 ones (vector blocks of output channels with a register tile of
pixels for conv2d, vector dot tiles for dense); what differs is the shape of the tiles. Every
default knob is derived from the active target's vector width and register count
(``topi.cpu``), so build inside ``with tvm.target.Target("llvm -mtriple=aarch64-linux-gnu"):``
(or pass ``cfg``) and a 4-lane NEON tiling comes out: e.g. conv2d ``oc_bn`` 4 or 8 instead of
16 or 32.
"""

from ..x86 import (  # noqa: F401
    batch_matmul, conv2d_nchw, conv2d_NCHWc, schedule_conv2d_NCHWc, conv2d_winograd_NCHWc, schedule_conv2d_winograd_NCHWc, layer_norm, log_softmax, pool2d, softmax, conv2d_nhwc, conv2d_transpose_nchw, dense, depthwise_conv2d_nchw,
    schedule_adaptive_pool, schedule_batch_matmul, schedule_concatenate, schedule_conv2d_nchw, schedule_conv2d_nhwc,
    schedule_conv2d_transpose_nchw, schedule_dense, schedule_depthwise_conv2d_nchw, schedule_injective,
    schedule_layer_norm, schedule_pool, schedule_reduce, schedule_softmax,
    depthwise_conv2d_NCHWc, schedule_depthwise_conv2d_NCHWc, schedule_pool_NCHWc, schedule_global_pool_NCHWc,
)
