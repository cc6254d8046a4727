"""``topi.gpu``: schedules for every GPU target (target key ``gpu``: OpenCL now, CUDA later).

Computes are topi.nn's; the tunable ones (conv2d, depthwise conv2d, dense, matmul,
batch_matmul) take an optional ``cfg`` of knobs (TVM's names: ``tile_f``, ``tile_y``,
``tile_x``, ``tile_rc``, ``tile_ry``, ``tile_rx``, ``tile_k``, ``auto_unroll_max_step``,
``unroll_explicit``) and record the tiles in their op so the schedule agrees:

    out = topi.gpu.conv2d_nchw(data, kernel, 1, 1, 1, "float32")
    s = topi.gpu.schedule_conv2d_nchw([out])
    f = tvm.build(s, [data, kernel, out], target="opencl")

Vendor flavours (``topi.mali``) override only what differs.
"""

from kiln.topi.nn.conv2d_transpose import conv2d_transpose_nchw as _conv2d_transpose_nchw
from kiln.topi.nn.conv2d import conv2d_nhwc as _conv2d_nhwc
from kiln.topi.nn.pooling import pool2d as _pool2d
from kiln.topi.nn.softmax import log_softmax  # noqa: F401

from ..cuda.attention import attention, schedule_attention  # noqa: F401  (formed on CUDA targets)
from .common import schedule_per_item
from .conv2d import conv2d_nchw as _conv2d_nchw_direct, schedule_conv2d_nchw  # noqa: F401
from .conv2d_winograd import conv2d_nchw_winograd, schedule_conv2d_nchw_winograd  # noqa: F401
from .dense import (  # noqa: F401
    batch_matmul as _batch_matmul, dense as _dense, matmul, schedule_batch_matmul, schedule_dense, schedule_matmul,
)
from .depthwise_conv2d import (  # noqa: F401
    depthwise_conv2d_nchw, group_conv2d_nchw, schedule_depthwise_conv2d_nchw,
)
from .injective import (  # noqa: F401
    schedule_adaptive_pool, schedule_broadcast, schedule_concatenate, schedule_elemwise, schedule_global_pool,
    schedule_injective, schedule_pool, schedule_resize,
)
from .reduction import layer_norm, schedule_layer_norm, schedule_reduce, schedule_softmax, softmax  # noqa: F401

default_schedule = schedule_per_item
schedule_conv2d_transpose_nchw = schedule_per_item


def conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None, groups=1, cfg=None, out_channels=None):
    """conv2d NCHW / OIHW: the shared-memory direct kernel, or the register-tiled one when grouped;
    float16 on CUDA: an implicit GEMM on tensor cores (topi.cuda.conv2d_nchw_tensorcore); float32
    on CUDA with the stride its kernel size (a ViT's patches): a dense product (topi.cuda.patch_conv)."""
    from kiln.topi.cuda import conv2d_tensorcore as ctc, tensorcore as tc

    if ctc.use_tensorcore_conv_nchw(data, kernel, strides, padding, dilation, groups, out_dtype):
        return ctc.conv2d_nchw_tensorcore(data, kernel, strides, padding, dilation, out_dtype, cfg=tc.tensorcore_cfg(cfg))
    from kiln.topi.cuda import patch_conv

    if patch_conv.use_patch_gemm(data, kernel, strides, padding, dilation, groups):  # CUDA: a ViT's patches
        return patch_conv.conv2d_patches(data, kernel, strides, out_dtype)
    if groups > 1:
        return group_conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, groups, cfg=cfg)
    return _conv2d_nchw_direct(data, kernel, strides, padding, dilation, out_dtype, groups, cfg=cfg)


def conv2d_nhwc(data, kernel, strides, padding, dilation, out_dtype=None, groups=1, cfg=None):
    """conv2d NHWC / HWIO: float16 on CUDA with sizes multiples of 16 runs on tensor cores
    (topi.cuda: an implicit GEMM), anything else one work-item per output."""
    from kiln.topi.cuda import tensorcore as tc

    if groups == 1 and tc.use_tensorcore_conv(data, kernel, strides, padding, dilation):
        return tc.conv2d_nhwc_tensorcore(data, kernel, strides, padding, dilation, out_dtype, cfg=tc.tensorcore_cfg(cfg))
    return _conv2d_nhwc(data, kernel, strides, padding, dilation, out_dtype, groups)


def schedule_conv2d_nhwc(outs):
    from kiln.topi.cuda import tensorcore as tc

    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    return tc.schedule_dense_tensorcore(outs) if tc.is_tensorcore(outs[0]) else schedule_per_item(outs)


def conv2d_transpose_nchw(data, kernel, strides, padding, out_dtype=None, output_padding=(0, 0), groups=1,
                          dilation=(1, 1), cfg=None):
    del cfg
    return _conv2d_transpose_nchw(data, kernel, strides, padding, out_dtype, output_padding, groups, dilation)


def dense(data, weight, bias=None, out_dtype=None, cfg=None):
    return _dense(data, weight, bias, out_dtype, cfg=cfg)


def batch_matmul(a, b, oshape=None, out_dtype=None, transpose_a=False, transpose_b=True, cfg=None):
    return _batch_matmul(a, b, oshape, out_dtype, transpose_a, transpose_b, cfg=cfg)


def pool2d(data, kernel, stride, dilation=(1, 1), padding=(0, 0, 0, 0), pool_type="max", ceil_mode=False,
           layout="NCHW", count_include_pad=True):
    return _pool2d(data, kernel, stride, dilation, padding, pool_type, ceil_mode, layout, count_include_pad)
