"""The NCHW4c convolutions of adreno graphs as tunable templates: ``conv2d_NCHW4c.adreno`` and
``depthwise_conv2d_NCHW4c.adreno``.

relay.build at opt_level 3 runs an adreno graph's convs on NCHW4c images (docs/adreno.md) with
topi.adreno's one NCHW4c schedule. Its workloads are the shapes that build lowers: the data as
the graph holds it (NCHW4c, or NCHW for a plain input), the weight OIHW (packed to OIHW4o at
build time), the conv's attributes and whether its output is blocked (relay/backend/dispatch.py).
The knobs are that schedule's choices (kiln/topi/adreno/nchw4c.py): ``tile_pixels`` and
``tile_blocks`` (output pixels and blocks of 4 channels per work-item), ``threads`` (work-items
per group, at most), ``unroll_channels`` (the 4 input channels of a data texel side by side) and
``unroll_kernel`` (the window). The default is the untuned build's choice.

Candidates are measured with buffer arguments: the runners allocate buffers, not images, so a
tuning run times the kernel of a ``relay.backend.adreno_textures: False`` build.
"""

from __future__ import annotations

from kiln import te

from ..task import register_topi_compute, register_topi_schedule

_PIXELS = (1, 2, 4, 8)
_BLOCKS = (1, 2, 4)
_THREADS = (16, 32, 64, 128, 256)


def _ints(shape) -> tuple:
    return tuple(int(getattr(d, "value", d)) for d in shape)


def _define(cfg, ow: int, blocks: int, kernel_hw: int, channels: bool) -> None:
    from kiln.topi.adreno.nchw4c import untuned_tile

    pixels = [p for p in _PIXELS if ow % p == 0]
    cfg.define_knob("tile_pixels", pixels)
    cfg.define_knob("tile_blocks", [b for b in _BLOCKS if blocks % b == 0])
    cfg.define_knob("threads", list(_THREADS))
    if channels:
        cfg.define_knob("unroll_channels", [1, 0])
    if kernel_hw > 1:
        cfg.define_knob("unroll_kernel", [0, 1])
    default = dict(zip(("tile_pixels", "tile_blocks", "threads"), untuned_tile(ow, blocks)))
    if channels:
        default["unroll_channels"] = 1
    if kernel_hw > 1:
        default["unroll_kernel"] = 0
    cfg.define_default(default)


def _conv(cfg, data, kernel, strides, padding, dilation, groups, out_dtype, out_block):
    from kiln.topi import adreno
    from kiln.topi.nn.conv2d import conv2d_shape

    o, i, kh, kw = _ints(kernel.shape)
    in_block = 4 if len(data.shape) == 5 else 0
    packed = te.placeholder((o // 4, i, kh, kw, 4), name="kernel_OIHW4o", dtype=kernel.dtype)
    # The output size from the shapes: the knobs depend on it, and building the conv once to
    # read it and again with the knobs cost a second compute per task.
    n, c, h, w = _ints(data.shape)[:4]
    p = conv2d_shape("conv2d_NCHW4c.adreno", (n, c * 4 if in_block else c, h, w), (o, i, kh, kw),
                     strides, padding, dilation, groups)
    oh, ow = p.out_height, p.out_width
    fallback = getattr(cfg, "is_fallback", False)
    if not fallback:
        _define(cfg, ow, o // 4, kh * kw, groups == 1 and bool(in_block))
    out = adreno.conv2d_NCHW4c(data, packed, strides, padding, dilation, groups, out_dtype, in_block,
                               out_block, prepacked=True, cfg=None if fallback else cfg)
    cfg.add_flop(2.0 * n * o * oh * ow * (i * kh * kw))
    out.op.attrs["template_inputs"] = [data, packed]  # what relay.build deploys: the OIHW4o weight
    return out


def _schedule(cfg, outs):
    from kiln.topi import adreno
    return adreno.schedule_nchw4c(outs)


for _name in ("conv2d_NCHW4c.adreno", "depthwise_conv2d_NCHW4c.adreno"):
    register_topi_compute(_name, _conv)
    register_topi_schedule(_name, _schedule)
