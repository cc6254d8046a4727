"""conv2d NCHW for Mali: register tiles of ``fi x yi x xi`` outputs per work-item, the columns
as one vector (float4 when ``tile_x``'s innermost size is 4), operands read from global memory
(no shared-memory staging; see the package docstring). Depthwise convolutions use the same
kernel with their own default tiles."""

from __future__ import annotations

from kiln import te

from ...errors import ScheduleError
from ..gpu import conv2d as gpu_conv2d
from ..gpu import depthwise_conv2d as gpu_depthwise
from ..gpu.common import as_list, inline_injective, max_threads
from ..gpu.tiling import divisor

KNOBS = ("tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx", "auto_unroll_max_step", "unroll_explicit")


def default_config(p, threads: int | None = None) -> dict:
    """4 output channels x 4 columns (one float4) per work-item where the sizes allow."""
    threads = threads or min(max_threads(), 128)
    f, h, w = p.out_channel, p.out_height, p.out_width
    xi = 4 if w % 4 == 0 else 2 if w % 2 == 0 else 1
    fi = divisor(f, 4) if p.groups == 1 else 1
    tx = divisor(w // xi, 8)
    ty = divisor(h, max(1, 32 // tx))
    tf = divisor(f // fi, max(1, min(gpu_conv2d.MAX_THREADS_Z, threads // (tx * ty))))
    icg = p.in_channel // p.groups
    return {"tile_f": [f // (tf * fi), 1, tf, fi], "tile_y": [h // ty, 1, ty, 1],
            "tile_x": [w // (tx * xi), 1, tx, xi], "tile_rc": [icg, 1], "tile_ry": [p.kernel_h, 1],
            "tile_rx": [p.kernel_w, 1], "auto_unroll_max_step": 512, "unroll_explicit": True}


def config_for(p, cfg=None) -> dict:
    return gpu_conv2d.config_for(p, cfg, defaults=default_config)


def conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None, groups=1, cfg=None, out_channels=None):
    del out_channels
    from ..nn.conv2d import conv2d_nchw as _conv2d_nchw

    out = _conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, groups)
    p = gpu_conv2d.shape_of(data, kernel, strides, padding, dilation, groups)
    out.op.attrs["gpu_shape"] = p
    out.op.attrs["gpu_config"] = config_for(p, cfg)
    return out


def schedule_conv2d_nchw(outs, cfg=None):
    outs = as_list(outs)
    out = outs[0]
    conv = _find_conv(out)
    p = conv.op.attrs.get("gpu_shape")
    if p is None:
        raise ScheduleError(f"mali.schedule_conv2d_nchw: {conv.name} was not made by topi.mali.conv2d_nchw")
    conf = config_for(p, cfg) if cfg is not None else conv.op.attrs.get("gpu_config") or config_for(p)
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)
    gpu_depthwise.schedule_register_tiled(s, conv, out, conf, vector=True)
    if p.groups == 1:
        _split_reduction(s, conv, out, conf)
    return s


def _find_conv(out):
    for tag in gpu_depthwise.TAGS:
        try:
            return gpu_conv2d.find(out, tag)
        except ValueError:
            continue
    raise ScheduleError(f"mali.schedule_conv2d_nchw: no convolution under {out.name}")


def _split_reduction(s, conv, out, conf) -> None:
    """Channel steps of ``tile_rc`` outermost, the window and the channel step inside (the
    register tile stays innermost)."""
    local = next(st for st in s.stages if st.attach.value == "scope" and getattr(st.op, "reduce_axis", None))
    rc, ry, rx = local.op.reduce_axis
    rco, rci = local.split(rc, factor=conf["tile_rc"][1])
    _, lf, ly, lx = local.op.axis
    local.reorder(rco, ry, rx, rci, lf, ly, lx)


def schedule_depthwise_conv2d_nchw(outs, cfg=None):
    return gpu_depthwise.schedule_depthwise_conv2d_nchw(outs, cfg) if cfg is not None else \
        _depthwise_vector(outs)


def _depthwise_vector(outs):
    outs = as_list(outs)
    out = outs[0]
    conv = _find_conv(out)
    _, f, h, w = (int(getattr(d, "value", d)) for d in conv.shape)
    conf = conv.op.attrs.get("gpu_config") or gpu_depthwise.config_for(f, h, w)
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)
    gpu_depthwise.schedule_register_tiled(s, conv, out, conf, vector=True)
    return s
