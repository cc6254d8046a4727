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
    if cfg is None:
        cfg = _default_config(dview, kview, strides, padding, dilation, groups, packed is not None)
    out = mali.conv2d_nchw(dview, kview, strides, padding, dilation, out_dtype, groups, cfg=cfg)
    out.op.attrs["adreno_texture"] = True
    return out


def _default_config(data, kernel, strides, padding, dilation, groups, textures: bool) -> dict:
    """Mali's default tiles with at most 64 work-items on threadIdx.z (the output channels; the
    smallest per-dimension limit of common GPUs) and, reading textures, channel steps of 4
    innermost: the four reads of one texel then sit side by side and the printer fetches it once."""
    from ..gpu import conv2d as gpu_conv2d
    from ..mali.conv2d import default_config

    p = gpu_conv2d.shape_of(data, kernel, strides, padding, dilation, groups)
    conf = default_config(p)
    blocks, vthreads, threads, inner = conf["tile_f"]
    if threads > 64:
        t = max(d for d in range(1, 65) if threads % d == 0)
        conf["tile_f"] = [blocks * (threads // t), vthreads, t, inner]
    icg = p.in_channel // p.groups
    if textures and groups == 1 and icg % 4 == 0:
        conf["tile_rc"] = [icg // 4, 4]
    return conf


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
