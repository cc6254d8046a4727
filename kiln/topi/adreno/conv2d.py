"""conv2d and depthwise conv2d NCHW for Adreno: data and weights read through textures.

The operator keeps NCHW / OIHW at its edges (the graph's tensors are buffers); inside, the data
is packed into an NCHW4c image and the weights into an OIHW4o image (kiln/topi/adreno/texture.py),
and Mali's register-tiled kernel (topi.mali: no shared-memory staging, a float4 of columns per
work-item, which suits Adreno's texture L1 as well) reads both through ``read_imagef``. Grouped
convolutions other than depthwise ones use topi.gpu's buffer kernels.
"""

from __future__ import annotations

from .. import gpu, mali
from ..utils import const_int
from .texture import pack_activation, pack_weight, schedule_packs


def _textured(data, kernel, groups: int) -> bool:
    c, o = const_int(data.shape[1]), const_int(kernel.shape[0])
    return groups == 1 or (groups == c and o == c)


def conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None, groups=1, cfg=None, out_channels=None):
    """conv2d NCHW / OIHW reading packed textures; the same knobs as topi.mali.conv2d_nchw."""
    del out_channels
    if not _textured(data, kernel, groups):
        return gpu.conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, groups, cfg=cfg)
    packed, dview = pack_activation(data, data.name)
    _, kview = pack_weight(kernel, kernel.name)
    icg = const_int(kernel.shape[1])
    if cfg is None and packed is not None and groups == 1 and icg % 4 == 0:
        # Channel steps of 4 innermost (unrolled): the four reads of one texel sit side by side
        # with equal coordinates, so the OpenCL compiler can fetch it once.
        cfg = {"tile_rc": [-1, 4]}
    out = mali.conv2d_nchw(dview, kview, strides, padding, dilation, out_dtype, groups, cfg=cfg)
    out.op.attrs["adreno_texture"] = True
    return out


def depthwise_conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None, cfg=None):
    """Depthwise conv2d NCHW, kernel (C, 1, KH, KW), through textures."""
    return conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, const_int(data.shape[1]), cfg=cfg)


def schedule_conv2d_nchw(outs, cfg=None):
    """Mali's register-tiled schedule for the convolution, plus one kernel per texture pack."""
    s = mali.schedule_conv2d_nchw(outs, cfg)
    schedule_packs(s)
    return s


def schedule_depthwise_conv2d_nchw(outs, cfg=None):
    s = mali.schedule_depthwise_conv2d_nchw(outs, cfg)
    schedule_packs(s)
    return s
