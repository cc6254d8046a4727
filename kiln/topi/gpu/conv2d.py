"""conv2d NCHW on GPUs: direct convolution with shared-memory tiles and register blocking.

Each work-group computes a block of output (channels x rows x columns); each work-item a
``fi x yi x xi`` register tile of it (knobs ``tile_f``, ``tile_y``, ``tile_x``: four levels each,
block / virtual thread / thread / inner, TVM's names). The reduction over input channels and
the window runs in steps of ``tile_rc`` (and ``tile_ry`` / ``tile_rx``): per step, the work-group
copies the input patch and the weights it needs into shared memory (all work-items together,
neighbouring work-items on neighbouring addresses), waits at a barrier, and every work-item
accumulates its register tile from shared memory. ``auto_unroll_max_step`` / ``unroll_explicit``
unroll the inner loops.

Grouped and depthwise convolutions use ``depthwise_conv2d.py`` (no channel reduction to share).
"""

from __future__ import annotations

from kiln import te

from ..nn.conv2d import conv2d_nchw as _conv2d_nchw, conv2d_shape
from ..utils import const_shape, find_stage, knob
from .common import as_list, block, inline_injective, max_threads, thread, unroll_pragmas
from .tiling import cooperative_fetch, divisor, resolve, split_levels

TAG = "conv2d_nchw"
MAX_THREADS_Z = 64
KNOBS = ("tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx", "auto_unroll_max_step", "unroll_explicit")


def shape_of(data, kernel, strides, padding, dilation, groups=1):
    return conv2d_shape("conv2d", const_shape(data), const_shape(kernel), strides, padding, dilation, groups)


# Untuned tiles aim at this many work-items in flight (a GPU of ~128 compute units with a few
# warps each: an H100 has 132 SMs); batch-1 layers have few outputs, so fewer outputs per
# work-item and smaller work-groups keep every unit busy before register tiles grow.
BUSY_THREADS = 132 * 128
BUSY_GROUPS = 2 * 132
SHARED_FLOATS = 6144  # 24 KiB of staged input + weights per step: several groups per unit


def default_config(p, threads: int | None = None) -> dict:
    """Untuned tiles from the output shape: per work-item ``fi`` channels x ``xi`` columns
    (8, else 4, 2, 1 outputs: the most that still leaves ``BUSY_THREADS`` work-items), work-groups
    of 64..256 work-items (fewer when the layer has few outputs, so there are ``BUSY_GROUPS``
    groups), columns on threadIdx.x, rows on y, channels on z. Each reduction step stages
    ``rci`` input channels of the whole window (input patch and weights) in shared memory."""
    threads = threads or max_threads()
    strided = p.stride_h > 1 or p.stride_w > 1
    if p.kernel_h * p.kernel_w > 1 and p.in_channel // p.groups >= 16:
        # Measured on the H100 (bench/cuda_conv.py, ResNet-50): strided windows are fastest with
        # one output per work-item over 128-wide work-groups, 32 channels per step (their staged
        # patch is sparse, so register tiles of neighbouring columns reuse little of it); stride-1
        # windows below 56 x 56 outputs with 2 channels per work-item, 64-wide groups and 64
        # channels per step (512x7x7 3x3: 0.047 ms vs 0.097 with shape_config).
        if strided:
            return tiles(p, 1, 1, 128, 32)
        if p.out_height * p.out_width < 56 * 56 and p.out_channel % 2 == 0:
            return tiles(p, 2, 1, 64, 64)
    return shape_config(p, threads)


def shape_config(p, threads: int | None = None) -> dict:
    """The output-shape-driven tiles of default_config (any layer kind)."""
    threads = threads or max_threads()
    f, w = p.out_channel, p.out_width
    outputs = p.batch * f * p.out_height * w
    for fi, xi in ((4, 2), (2, 2), (4, 1), (2, 1), (1, 2), (1, 1)):
        if f % fi or (xi > 1 and (w % xi or w < 8)):
            continue
        if outputs // (fi * xi) >= BUSY_THREADS or (fi, xi) == (1, 1):
            break
    budget = max(32, min(threads, 256, max(64, outputs // (fi * xi) // BUSY_GROUPS)))
    return tiles(p, fi, xi, budget)


def per_tap_config(p, threads: int | None = None) -> dict:
    """Up to 4 output channels x 2 columns per work-item, work-groups of up to 256 work-items (16
    columns x 4 rows x channels), 8 input channels of one window tap staged per step."""
    threads = threads or max_threads()
    f, h, w = p.out_channel, p.out_height, p.out_width
    xi = 2 if w % 2 == 0 and w >= 16 else 1
    tx = divisor(w // xi, 16)
    ty = divisor(h, max(1, 64 // tx))
    fi = divisor(f, 4)
    tf = divisor(f // fi, max(1, min(MAX_THREADS_Z, min(threads, 256) // (tx * ty))))
    icg = p.in_channel // p.groups
    rci = divisor(icg, 8)
    return {"tile_f": [f // (tf * fi), 1, tf, fi], "tile_y": [h // ty, 1, ty, 1], "tile_x": [w // (tx * xi), 1, tx, xi],
            "tile_rc": [icg // rci, rci], "tile_ry": [p.kernel_h, 1], "tile_rx": [p.kernel_w, 1],
            "auto_unroll_max_step": 512, "unroll_explicit": True}


def tiles(p, fi: int, xi: int, budget: int, max_rc: int = 16, whole: bool = True, yi: int = 1) -> dict:
    """The knobs for a register tile of ``fi x yi x xi`` outputs per work-item and work-groups of
    about ``budget`` work-items (columns on x, rows on y, channels on z); the reduction steps
    over up to ``max_rc`` input channels, of the whole window when ``whole`` and it fits
    ``SHARED_FLOATS``, else one window tap per step."""
    f, h, w = p.out_channel, p.out_height, p.out_width
    tf, ty, tx = _group_shape(p, fi, yi, xi, budget)
    icg = p.in_channel // p.groups
    kh, kw = p.kernel_h, p.kernel_w
    patch_h = (ty * yi - 1) * p.stride_h + (kh - 1) * p.dilation_h + 1
    patch_w = (tx * xi - 1) * p.stride_w + (kw - 1) * p.dilation_w + 1
    per_channel = (patch_h * patch_w + tf * fi * kh * kw) if whole else (ty * yi * tx * xi + tf * fi)
    rci = next(r for r in (64, 32, 16, 8, 4, 2, 1) if r <= max_rc and icg % r == 0 and
               (r * per_channel <= SHARED_FLOATS or r == 1))
    whole = whole and rci * per_channel <= SHARED_FLOATS
    return {
        "tile_f": [f // (tf * fi), 1, tf, fi],
        "tile_y": [h // (ty * yi), 1, ty, yi],
        "tile_x": [w // (tx * xi), 1, tx, xi],
        "tile_rc": [icg // rci, rci],
        "tile_ry": [1, kh] if whole else [kh, 1],
        "tile_rx": [1, kw] if whole else [kw, 1],
        "auto_unroll_max_step": 512,
        "unroll_explicit": True,
    }


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _group_shape(p, fi: int, yi: int, xi: int, budget: int) -> tuple:
    """(tf, ty, tx) work-items on channels, rows, columns, at most ``budget`` of them: enough
    work-items (half the budget or more), rows of 8 columns or more (coalesced loads), then the
    most products per value staged in shared memory (a block tile of channels x pixels near
    square, counting the window's halo), then the most work-items. Channels go to threadIdx.z,
    which CUDA and NVIDIA's OpenCL cap at 64 work-items."""
    taps = p.kernel_h * p.kernel_w
    best = None
    for tx in _divisors(p.out_width // xi, min(32, budget)):
        for ty in _divisors(p.out_height // yi, budget // tx):
            rows = (ty * yi - 1) * p.stride_h + (p.kernel_h - 1) * p.dilation_h + 1
            cols = (tx * xi - 1) * p.stride_w + (p.kernel_w - 1) * p.dilation_w + 1
            for tf in _divisors(p.out_channel // fi, min(MAX_THREADS_Z, budget // (tx * ty))):
                n = tf * ty * tx
                bm, bn = tf * fi, ty * yi * tx * xi
                reuse = bm * bn * taps / (rows * cols + bm * taps)
                key = (n >= budget // 2, tx * xi >= min(p.out_width, 8), reuse, n, tx)
                if best is None or key > best[0]:
                    best = (key, (tf, ty, tx))
    return best[1]


def bind_output_tiles(st, conf):
    """Split an NCHW output stage's f, y, x by the four-level ``tile_*`` knobs (block, virtual
    thread, thread, register) and bind them; returns the batch-and-block axis ``bf``, the
    innermost thread axis ``tx`` and the register tiles ``fi``, ``xi``."""
    n, f, y, x = st.op.axis
    bf, vf, tf, fi = split_levels(st, f, conf["tile_f"])
    by, vy, ty, yi = split_levels(st, y, conf["tile_y"])
    bx, vx, tx, xi = split_levels(st, x, conf["tile_x"])
    bf = st.fuse(n, bf)
    st.reorder(bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    st.bind(bf, block("z"))
    st.bind(by, block("y"))
    st.bind(bx, block("x"))
    for v, size in ((vf, conf["tile_f"][1]), (vy, conf["tile_y"][1]), (vx, conf["tile_x"][1])):
        if size > 1:
            st.bind(v, te.thread_axis("vthread"))
    st.bind(tf, thread("z"))
    st.bind(ty, thread("y"))
    st.bind(tx, thread("x"))
    return bf, tx, fi, xi


def config_for(p, cfg=None, defaults=None) -> dict:
    """The knobs the kernel uses: cfg's where it sets them, else ``defaults(p)`` (this module's
    untuned tiles unless a flavour such as mali passes its own); tiles exact."""
    conf = (defaults or default_config)(p)
    conf.update({k: knob(cfg, k, v) for k, v in conf.items()})
    totals = {"tile_f": p.out_channel, "tile_y": p.out_height, "tile_x": p.out_width,
              "tile_rc": p.in_channel // p.groups, "tile_ry": p.kernel_h, "tile_rx": p.kernel_w}
    for k, n in totals.items():
        conf[k] = resolve(conf[k], n, k)
    return conf


def conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype=None, groups=1, cfg=None, out_channels=None):
    """topi.nn.conv2d_nchw, recording the GPU tiles it will be scheduled with."""
    del out_channels
    out = _conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, groups)
    p = shape_of(data, kernel, strides, padding, dilation, groups)
    out.op.attrs["gpu_config"] = config_for(p, cfg) if groups == 1 else None
    out.op.attrs["gpu_shape"] = p
    return out


def find(out, tag: str):
    """The stage tagged ``tag`` feeding ``out`` (out itself, or under an elementwise epilogue)."""
    return find_stage(out, lambda op: getattr(op, "tag", "") == tag, f"{tag} stage")


def schedule_conv2d_nchw(outs, cfg=None):
    """Schedule conv2d_nchw (and the elementwise ops after it) with its recorded or given tiles."""
    outs = as_list(outs)
    out = outs[0]
    from ..cuda import conv2d_tensorcore as ctc, tensorcore as tc

    if tc.is_tensorcore(out):  # conv2d_nchw_tensorcore (CUDA float16 / bfloat16)
        return ctc.schedule_conv2d_nchw_tensorcore(outs, cfg=tc.tensorcore_cfg(cfg))
    from ..cuda import patch_conv

    if patch_conv.is_patch_gemm(out):  # a patchify conv as a dense product (CUDA float32)
        return patch_conv.schedule_conv2d_patches(outs)
    try:
        conv = find(out, TAG)
    except ValueError:
        from .conv2d_winograd import schedule_conv2d_nchw_winograd  # made by conv2d_nchw_winograd
        return schedule_conv2d_nchw_winograd(outs, cfg)
    p = conv.op.attrs.get("gpu_shape")
    if p is None or p.groups != 1:
        from .depthwise_conv2d import schedule_depthwise_conv2d_nchw
        return schedule_depthwise_conv2d_nchw(outs, cfg)
    conf = config_for(p, cfg) if cfg is not None else conv.op.attrs.get("gpu_config") or config_for(p)
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)
    schedule_direct(s, conv, out, conf)
    return s


def schedule_direct(s, conv, out, conf) -> None:
    padded, kernel = conv.op.input_tensors
    if conv.op is out.op:
        local = s.cache_write(conv, "local")
        output = conv
    else:
        s[conv].set_scope("local")
        local, output = conv, out
    aa = s.cache_read(padded, "shared", [local])
    ww = s.cache_read(kernel, "shared", [local])
    if "pad" in getattr(padded.op, "tag", "") and s[padded].attach.value != "inline":
        s[padded].compute_inline()

    st = s[output]
    _, tx, fi, _ = bind_output_tiles(st, conf)
    # Unroll the register tile (inner reduction and write-back), not the shared-memory fetches.
    unroll_pragmas(st, fi, conf)

    lt = s[local]
    lt.compute_at(st, tx)
    _, lf, ly, lx = lt.op.axis
    rc, ry, rx = lt.op.reduce_axis
    rco, rci = split_levels(lt, rc, conf["tile_rc"])
    ryo, ryi = split_levels(lt, ry, conf["tile_ry"])
    rxo, rxi = split_levels(lt, rx, conf["tile_rx"])
    lt.reorder(rco, ryo, rxo, rci, ryi, rxi, lf, ly, lx)
    unroll_pragmas(lt, rci, conf)
    s[aa].compute_at(lt, rxo)
    s[ww].compute_at(lt, rxo)
    threads = [("threadIdx.z", conf["tile_f"][2]), ("threadIdx.y", conf["tile_y"][2]),
               ("threadIdx.x", conf["tile_x"][2])]
    for cache in (aa, ww):
        outer = cooperative_fetch(s, cache, threads)
        # Unrolled, a work-item's global loads of one step are all in flight together instead of
        # one load latency per element (the step's cost when each work-item fetches many).
        # (The unroll pass leaves loops of more than 256 iterations alone.)
        if knob(conf, "fetch_unroll", True):
            s[cache].unroll(outer)
