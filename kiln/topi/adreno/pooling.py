"""Pooling and global pooling NCHW for Adreno: the input read through an NCHW4c texture.

topi.nn's computes run on an NCHW view of the packed texture (kiln/topi/adreno/texture.py), so
every window tap is a ``read_imagef``; the schedules are topi.gpu's plus the pack kernel.
"""

from __future__ import annotations

from .. import gpu
from ..nn import pooling as nn_pooling
from .nchw4c import schedule_nchw4c, texel_shaped
from .texture import pack_activation, schedule_packs


def pool2d(data, kernel, stride, dilation=(1, 1), padding=(0, 0, 0, 0), pool_type="max", ceil_mode=False,
           layout="NCHW", count_include_pad=True):
    if layout != "NCHW" or len(data.shape) != 4:
        return gpu.pool2d(data, kernel, stride, dilation, padding, pool_type, ceil_mode, layout, count_include_pad)
    _, view = pack_activation(data, data.name)
    return gpu.pool2d(view, kernel, stride, dilation, padding, pool_type, ceil_mode, layout, count_include_pad)


def global_pool(data, pool_type="avg", layout="NCHW"):
    if layout != "NCHW" or len(data.shape) != 4:
        return nn_pooling.global_pool(data, pool_type, layout)
    _, view = pack_activation(data, data.name)
    return nn_pooling.global_pool(view, pool_type, layout)


def _texels(outs) -> bool:
    outs = [outs] if not isinstance(outs, (list, tuple)) else outs
    return len(outs) == 1 and texel_shaped(outs[0])  # NCHW4c graphs: may write an image


def schedule_pool(outs, cfg=None):
    if _texels(outs):
        return schedule_nchw4c(outs, cfg)
    s = gpu.schedule_pool(outs, cfg)
    schedule_packs(s)
    return s


def schedule_global_pool(outs, cfg=None):
    if _texels(outs):
        return schedule_nchw4c(outs, cfg)
    s = gpu.schedule_global_pool(outs, cfg)
    schedule_packs(s)
    return s
