"""Depthwise and grouped conv2d NCHW on GPUs: register tiles, no shared memory.

A depthwise output channel reads one input channel, so there is no reduction over channels
whose operands a work-group could share; each work-item computes a ``fi x yi x xi`` tile of
outputs (knobs ``tile_f``, ``tile_y``, ``tile_x``: block / virtual thread / thread / inner) with
the window loops innermost and unrolled, reading the input through the cache.

float16 depthwise convs on CUDA with ``KILN_CUDA_HALF2_DEPTHWISE=1`` (``half2``): two
neighbouring channels per work-item (``tile_f``'s inner 2) are one ``float16x2`` vector, so each
window step is one ``fma.rn.f16x2`` for both channels (kiln/codegen/cuda.py prints a
``float16x2`` register update as half2 arithmetic). The sums are then float16 (each of the
KH * KW steps rounds once), whatever float32 ``out_dtype`` asked for: relay's float16 models
round the conv's result to float16 right after it anyway. Off by default: on the H200 batch-1
MobileNetV2 float16 ran 0.189 ms with it against 0.187 ms with float sums (its depthwise layers
are bound by loads and latency, not arithmetic; docs/cuda.md).
"""

from __future__ import annotations

import os

from kiln import te

from ..nn.conv2d import conv2d_nchw as _conv2d_nchw
from ..nn.depthwise_conv2d import depthwise_conv2d_nchw as _depthwise_conv2d_nchw
from ..utils import knob
from .common import as_list, inline_injective, max_threads, unroll_pragmas
from .conv2d import MAX_THREADS_Z, bind_output_tiles, find, shape_of
from .tiling import divisor, resolve

TAGS = ("depthwise_conv2d_nchw", "conv2d_nchw")
KNOBS = ("tile_f", "tile_y", "tile_x", "auto_unroll_max_step", "unroll_explicit")


def default_config(f: int, h: int, w: int, threads: int | None = None, fi: int = 1) -> dict:
    """Untuned tiles; ``fi``: channels per work-item (2: the half2 pairs)."""
    threads = threads or max_threads()
    xi = 2 if w % 2 == 0 and w >= 8 else 1
    tx = divisor(w // xi, 32)
    ty = divisor(h, max(1, 128 // tx))
    tf = divisor(f // fi, max(1, min(MAX_THREADS_Z, min(threads, 256) // (tx * ty))))  # channels: threadIdx.z
    return {"tile_f": [f // (tf * fi), 1, tf, fi], "tile_y": [h // ty, 1, ty, 1],
            "tile_x": [w // (tx * xi), 1, tx, xi], "auto_unroll_max_step": 512, "unroll_explicit": True}


def config_for(f: int, h: int, w: int, cfg=None, fi: int = 1) -> dict:
    conf = default_config(f, h, w, fi=fi)
    conf.update({k: knob(cfg, k, v) for k, v in conf.items()})
    for k, n in (("tile_f", f), ("tile_y", h), ("tile_x", w)):
        conf[k] = resolve(conf[k], n, k)
    return conf


def depthwise_conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None, cfg=None):
    """topi.nn.depthwise_conv2d_nchw (kernel C x M x KH x KW), recording its GPU tiles."""
    out = _depthwise_conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype)
    _, f, h, w = (int(getattr(d, "value", d)) for d in out.shape)
    out.op.attrs["gpu_config"] = config_for(f, h, w, cfg)
    return out


def group_conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None, groups=1, cfg=None):
    """conv2d with groups > 1 (depthwise when groups == channels), OIHW kernel; float16
    depthwise convs on CUDA sum in half2 pairs of channels (``use_half2``), their result cast
    to ``out_dtype``."""
    pairs = use_half2(data, kernel, groups)
    conv = _conv2d_nchw(data, kernel, strides, padding, dilation, "float16" if pairs else out_dtype, groups)
    conv.op.attrs["gpu_shape"] = shape_of(data, kernel, strides, padding, dilation, groups)
    _, f, h, w = (int(getattr(d, "value", d)) for d in conv.shape)
    conv.op.attrs["gpu_config"] = config_for(f, h, w, cfg, fi=2 if pairs else 1)
    if pairs and str(out_dtype or "float16") != "float16":
        return te.compute(conv.shape, lambda *i: conv(*i).astype(out_dtype), name="T_cast", tag="elemwise")
    return conv


def use_half2(data, kernel, groups) -> bool:
    """Whether a grouped conv sums in half2 channel pairs: ``KILN_CUDA_HALF2_DEPTHWISE=1``, CUDA,
    float16 data and kernel, one input and one output channel per group (depthwise), an even
    channel count. Otherwise float sums, as on other GPUs (the default: no faster, above)."""
    from kiln.target import Target

    target = Target.current(allow_none=True)
    if target is None or target.kind.name != "cuda" or os.environ.get("KILN_CUDA_HALF2_DEPTHWISE", "0") != "1":
        return False
    c, o = int(data.shape[1]), int(kernel.shape[0])
    return (str(data.dtype), str(kernel.dtype)) == ("float16", "float16") and groups == c == o and \
        int(kernel.shape[1]) == 1 and c % 2 == 0


def schedule_depthwise_conv2d_nchw(outs, cfg=None):
    outs = as_list(outs)
    out = outs[0]
    conv = None
    for tag in TAGS:
        try:
            conv = find(out, tag)
            break
        except ValueError:
            continue
    if conv is None:
        raise ValueError(f"schedule_depthwise_conv2d_nchw: no convolution under {out.name}")
    _, f, h, w = (int(getattr(d, "value", d)) for d in conv.shape)
    half2 = str(conv.dtype) == "float16" and conv.op.attrs.get("gpu_config", {}).get("tile_f", [1])[-1] == 2
    conf = config_for(f, h, w, cfg, fi=2 if half2 else 1) if cfg is not None else \
        conv.op.attrs.get("gpu_config") or config_for(f, h, w)
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)
    schedule_register_tiled(s, conv, out, conf, pairs=half2 and conf["tile_f"][3] == 2)
    return s


def schedule_register_tiled(s, conv, out, conf, vector: bool = False, pairs: bool = False) -> None:
    """Output tiles per work-item accumulated in registers; the input read straight from global
    memory. ``vector``: the innermost column tile becomes one vector (Mali, float4); ``pairs``:
    the work-item's two channels are one vector (CUDA half2)."""
    if conv.op is out.op:
        local = s.cache_write(conv, "local")
        output = conv
    else:
        s[conv].set_scope("local")
        local, output = conv, out
    st = s[output]
    bf, tx, _, xi = bind_output_tiles(st, conf)
    unroll_pragmas(st, bf, conf)
    lt = s[local]
    lt.compute_at(st, tx)
    _, lf, ly, lx = lt.op.axis
    if pairs:  # the channel pair innermost: one float16x2 update per window step and column
        lt.reorder(*lt.op.reduce_axis, ly, lx, lf)
        lt.vectorize(lf)
        return
    lt.reorder(*lt.op.reduce_axis, lf, ly, lx)
    if vector and conf["tile_x"][3] in (2, 4, 8, 16):
        lt.vectorize(lx)
        st.vectorize(xi)
