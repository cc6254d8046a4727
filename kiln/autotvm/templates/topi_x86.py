"""Tunable x86 operators from kiln.topi: conv2d NCHW and dense, registered with
``register_topi_compute/schedule`` so that ``extract_from_program`` finds them and a build under
``apply_history_best`` reads the tuned knobs.

The knobs and their candidates are topi's own (``config_space``); topi's compute reads them
from the config (``cfg["oc_bn"].val``) and fills in its heuristic default for anything the
config does not set, which is also what an untuned (fallback) build gets.
"""

from __future__ import annotations

import importlib  # kiln.topi.x86 re-exports functions named like its modules

from ..task import register_topi_compute, register_topi_schedule


def _define(cfg, space: dict) -> None:
    for name, values in space.items():
        cfg.define_knob(name, list(values))


def _ints(shape) -> tuple:
    return tuple(int(getattr(d, "value", d)) for d in shape)


def _untuned(cfg):
    # The fallback config would pick each knob's first candidate; topi's heuristic is better.
    return None if getattr(cfg, "is_fallback", False) else cfg


@register_topi_compute("conv2d_nchw.x86")
def conv2d_nchw(cfg, data, kernel, strides=1, padding=0, dilation=1, layout="NCHW",
                out_dtype="float32"):
    from kiln.topi.nn.conv2d import conv2d_shape
    x86 = importlib.import_module("kiln.topi.x86.conv2d")

    del layout  # this template is the NCHW one; extraction maps other layouts elsewhere
    shape = conv2d_shape("conv2d", _ints(data.shape), _ints(kernel.shape), strides, padding,
                         dilation, 1)
    if not cfg.is_fallback:
        _define(cfg, x86.config_space(shape))
    cfg.add_flop(2.0 * shape.batch * shape.out_channel * shape.out_height * shape.out_width
                 * shape.in_channel // shape.groups * shape.kernel_h * shape.kernel_w)
    return x86.conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype or None,
                           cfg=_untuned(cfg))


@register_topi_schedule("conv2d_nchw.x86")
def schedule_conv2d_nchw(cfg, outs):
    x86 = importlib.import_module("kiln.topi.x86.conv2d")
    return x86.schedule_conv2d_nchw(outs, cfg=_untuned(cfg))


@register_topi_compute("dense_nopack.x86")
def dense(cfg, data, weight, bias=None, out_dtype="float32"):
    x86 = importlib.import_module("kiln.topi.x86.dense")

    m, k = _ints(data.shape)
    n = _ints(weight.shape)[0]
    if not cfg.is_fallback:
        _define(cfg, x86.config_space(m, n, k))
    cfg.add_flop(2.0 * m * n * k)
    return x86.dense(data, weight, bias, out_dtype or None, cfg=_untuned(cfg))


@register_topi_schedule("dense_nopack.x86")
def schedule_dense(cfg, outs):
    x86 = importlib.import_module("kiln.topi.x86.dense")
    return x86.schedule_dense(outs, cfg=_untuned(cfg))
