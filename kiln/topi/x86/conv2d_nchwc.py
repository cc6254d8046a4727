"""conv2d on channel-blocked data (NCHW{b}c) for x86: the layout graph compilers keep end to end.

``data`` is (N, C/ib, H, W, ib) (plain NCHW counts as ib = 1), the output (N, O/bn, OH, OW, bn)
with ``bn = oc_bn``: the register tile of ``x86.conv2d_nchw`` (``tile_ow`` pixels x ``oc_bn``
channels accumulated in vector registers) is stored as it is, with no unpack to NCHW, and the
next convolution reads ``ib`` contiguous input channels per pixel. The kernel is regrouped to

    kernel_vec[O/bn, C/ib, KH, KW, ib, bn]

so the reduction walks it contiguously (``prepack_kernel_nchwc`` does that once for constant
weights). The knobs are those of ``x86.conv2d_nchw`` (its autotvm configs apply unchanged);
``vectorize_out`` has no meaning here (the block is stored as whole vectors). One more,
``oc_chunks``, lets the register tile span that many consecutive output blocks (``tile_ow``
pixels x ``oc_chunks * oc_bn`` channels) without changing the layout: with 16 vector registers
(AVX2) it is how a tile gets several vectors per pixel while the blocks stay one vector wide.
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir

from ..cpu import tile_operands, vector_lanes, vector_registers
from ..nn.conv2d import conv2d_shape
from ..nn.pad import pad
from ..utils import const_int, const_shape, divisor_at_most, find_stage, knob, with_default
from . import conv2d as _nchw
from . import amx_bf16 as amx
from . import conv2d_bf16 as bf16
from .conv2d import _schedule_packing, _schedule_tile, find_tagged, schedule_blocked_tile
from .injective import tile_root

TAG = "conv2d_NCHWc"


def default_config(p) -> dict:
    """conv2d_nchw's heuristic knobs, with oc_bn lowered to a block that divides the channels
    (and no ``vectorize_out``: blocks are stored as whole vectors)."""
    conf = {k: v for k, v in _nchw.default_config(p).items() if k != "vectorize_out"}
    conf["oc_bn"] = out_block(p.out_channel, conf["oc_bn"])
    conf["oc_chunks"] = 1
    conf["ic_pass"] = 0
    conf["pass_rows"] = 0
    conf["rows_outer"] = 0
    conf["prefetch"] = 0
    lanes, regs = vector_lanes(), vector_registers()
    if regs < 32 and conf["oc_bn"] >= lanes:
        # 16 registers: one vector per pixel leaves 14 rows, each costing a broadcast load per
        # FMA; a tile over several blocks shares each broadcast among them (AVX2 1x1 convs:
        # 3 blocks x 4 pixels ran 576->96 @14 1.13x and 144->144 @56 1.27x faster than 1 x 14).
        # Short rows of a 1x1 conv: the tile spans blocks of one vector rather than pixels of a
        # two-vector block (MobileNetV2's 1x1 convs at 7x7 on AVX2, 8 lanes: 4-15% faster as
        # 3-4 blocks of 8 than as 4 pixels of 16). Wider kernels keep the wide block: in
        # ResNet-18 the 3x3/2 conv's output feeds Winograd at 512@7, which ran 30% slower on
        # blocks of 8 than the conv gained.
        # (Narrower vectors, SSE's 4 lanes, keep two per block: one is too narrow for the tile.)
        if lanes >= 8 and conf["oc_bn"] > lanes and p.out_channel % lanes == 0 and (p.kernel_h, p.kernel_w) == (1, 1):
            conf["oc_bn"] = lanes
        window = not input_block(p.in_channel) and p.kernel_w > 1  # taps innermost (cpu.pixel_major)
        conf["oc_chunks"], conf["tile_ow"] = chunk_tile(p.out_width, p.out_channel // conf["oc_bn"],
                                                        conf["oc_bn"] // lanes, regs, window)
    elif regs >= 32 and conf["oc_bn"] and _facts().full_width_avx512:
        conf.update(full_width_tile(p, conf["oc_bn"], lanes))
    return conf


def _facts():
    from kiln.target.cpu_facts import cpu_facts

    return cpu_facts()


WINDOW_CHUNKS = 2  # output blocks per register tile of a plain-input window conv (full_width_tile)
FULL_WIDTH_ROWS = 14  # pixels of two vectors each: 28 accumulators, 2 operands, a broadcast, one spare
PASS_WEIGHTS = 48 << 10  # bytes of weights one channel pass reads (an L1 data cache: 48 KB on Intel cores)
PASS_FROM = 192 << 10  # a task's weights above this are re-read from beyond L2 for each row otherwise
PASS_OUTPUT = 64 << 10  # the largest accumulation buffer (a task's whole output) a pass may keep
PASS_CHANNELS = 64  # at most, per pass (1x1 convs: 512->2048 at 7x7 ran faster by 64 than by 32 or 384)


def full_width_tile(p, bn: int, lanes: int) -> dict:
    """Tile knobs where a 512-bit FMA runs whole (``CPUFacts.full_width_avx512``, Intel's AVX-512
    cores, two FMA ports on Xeons). A tile issues r*v FMAs and r + v loads per step (r pixels, v
    vectors); with two FMAs and two 512-bit loads per cycle, one vector per pixel (the AMD-tuned
    default: 14 x 1) is load-bound at half the FMA rate. Two vectors per pixel over 14 pixels (28
    accumulators) issue 16 loads per 28 FMAs: on a Sapphire Rapids core 256->128 1x1 at 56x56 ran
    1.38x, 64->64 3x3 at 56x56 1.16x and 1024->256 1x1 at 14x14 1.07x faster (CPU time, one thread).
    A one-vector block takes its second vector from the next block (``oc_chunks`` 2: the layout
    keeps blocks of one vector). Plain-input windows (the RGB stem) keep their tile.

    ``ic_pass`` (input channels per pass, 0 = off): where one task's weights (all input channels
    x taps x its output channels) exceed ``PASS_FROM``, or an L1 cache (``PASS_WEIGHTS``) for
    rows of at most 7 pixels (each weight vector then serves only 7 FMAs per read from L2), a
    task covers an output block (``pass_rows`` rows of it: see ``pass_rows``) and sums it over
    passes of ``ic_pass`` input channels, rows inside each pass, so a pass's weights are read from L1 for every row instead of from further
    out (one Sapphire Rapids core, CPU time: 512->512 3x3 at 7x7 2.4 -> 1.6 ms, 1024->2048 1x1/2
    to 7x7 1.85 -> 1.39 ms, 512->2048 1x1 at 7x7 0.73 -> 0.63 ms)."""
    conf = {}
    vectors = max(1, bn // lanes)
    window = not input_block(p.in_channel) and p.kernel_w > 1
    blocks = p.out_channel // bn
    if window:
        # The RGB stem: two one-vector blocks per tile over 7 pixels (14 accumulators; 14 x 2
        # spills beside the window's operands): ResNet's 3->64 7x7/2 at 224x224 ran 1.38-1.51 ->
        # 1.17-1.37 ms (0.85-0.91x; 8 x 2 and 4 x 4 0.87-0.94x; one core, CPU time, loaded).
        if WINDOW_CHUNKS > 1 and bn == lanes and blocks % WINDOW_CHUNKS == 0 and p.out_width >= 7:
            tile = divisor_at_most(p.out_width, 8, prefer=(7, 8))
            conf.update(oc_chunks=WINDOW_CHUNKS, tile_ow=tile if tile >= 4 else min(p.out_width, 7))
        return conf
    chunks = next((k for k in (2, 3) if bn >= lanes and vectors == 1 and blocks % k == 0), 1)
    if bn >= lanes and vectors * chunks in (2, 3):
        rows = 2 * FULL_WIDTH_ROWS // (vectors * chunks)  # 14 pixels of 2 vectors, 9 of 3
        tile = divisor_at_most(p.out_width, rows, prefer=(14, 12, 8, 7))
        if tile < 4 and p.out_width > 4:
            tile = min(p.out_width, rows)
        conf.update(oc_chunks=chunks, tile_ow=tile)
    block = bn * chunks * 4
    tap_weights = p.kernel_h * p.kernel_w * block
    task_weights = p.in_channel * tap_weights
    short_rows = conf.get("tile_ow", p.out_width) <= 7 and task_weights > PASS_WEIGHTS
    if (task_weights > PASS_FROM or short_rows) and p.out_height > 1 \
            and p.out_height * p.out_width * block <= PASS_OUTPUT:
        conf["ic_pass"] = max(1, min(PASS_CHANNELS, PASS_WEIGHTS // tap_weights))
    conf["rows_outer"] = int(rows_outer(p))
    conf["prefetch"] = 1  # weights a task reads next (_prefetch_weights; not with rows_outer)
    if (p.kernel_h, p.kernel_w) == (1, 1):
        # A 1x1 conv's reduction step unrolled over an input block of 32 (where the block is 32:
        # ResNet's convs at 14x14): 1024->512 at 14x14 1.29 -> 1.21 ms, 1024->256 0.68 -> 0.62,
        # 256->1024 0.65 -> 0.62 (one core, CPU time; weights from memory 6-9% faster too). Blocks
        # of 16 ran no faster unrolled; 3x3 convs ran slower (1.6x for 128->128 3x3/2: the code of
        # 3 taps x 16 steps x 28 FMAs). Only for convs as wide as those: unrolled, a 1x1 conv's
        # code is 2-5x larger, and narrower ones (SqueezeNet's 16-64 channel squeezes) gained
        # nothing measurable for the compile time it cost (a SqueezeNet build 1.6x longer).
        if min(p.in_channel, p.out_channel) >= UNROLL_FROM:
            conf["ic_unroll"] = UNROLL_BLOCK
    return conf


UNROLL_BLOCK = 32
UNROLL_FROM = 256  # input and output channels


ROWS_INPUT = 512 << 10  # an input at least this large (a quarter of an Intel core's L2) ...
ROWS_WEIGHTS = 1 << 20  # ... and a weight at most this large and half the input: rows outside the blocks


def rows_outer(p) -> bool:
    """Whether a conv's parallel tasks walk the output rows outside the channel blocks (the
    ``rows_outer`` knob): a task is (block, row) either way, but blocks outside rows read the whole
    input once per block group and rows outside blocks the whole weight once per row. Where the input
    is large and the weight small (ResNet-50's convs at 56x56: 3.2 MB of input, 64-512 KB of weights)
    the input then comes from beyond L2 for every group, the weight stays in L2: one Sapphire
    Rapids core, CPU time, 256->512 1x1/2 at 56x56 1.68 -> 1.33 ms, 256->128 1x1 1.39 -> 1.21 ms,
    256->64 1x1 0.69 -> 0.60 ms, 128->128 3x3/2 1.61 -> 1.48 ms; weights larger than the input
    (1024->512 1x1 at 14x14) ran 1.40 -> 1.74 ms rows outside. From 512 KB of input (was 1 MB):
    ResNet-50's 64->256 and 64->64 1x1 convs at 56x56 (800 KB), with two threads each of which
    owns half the tasks (thread_pool.py), read the input once per thread instead of once per
    block group: minima of 100 interleaved runs in the model, 2 threads, 64->256 + residual add
    0.47 -> 0.39 ms, 64->64 0.126 -> 0.092 ms; one thread 0-18% faster (loaded 2-core Sapphire
    Rapids machine)."""
    input_bytes = p.in_channel * p.in_height * p.in_width * 4
    weight_bytes = p.in_channel * p.out_channel * p.kernel_h * p.kernel_w * 4
    return input_bytes >= ROWS_INPUT and weight_bytes <= min(ROWS_WEIGHTS, input_bytes // 2)


def chunk_tile(width: int, chunks: int, vectors: int, registers: int, window: bool = False) -> tuple[int, int]:
    """(blocks per register tile, pixels per tile) for a row of ``width`` pixels and ``chunks``
    channel blocks of ``vectors`` vectors each, by a cost model of one reduction step:

    - a tile of r pixels x k blocks holds r*k*vectors accumulators and ``tile_operands`` more
      in the registers (``window``: see ``cpu.pixel_major``);
    - it issues r*kv FMAs and r + kv loads, two of each per cycle, and needs 8 FMAs in flight
      (latency 4 x 2 ports): its cost is max(r*kv, r + kv, 8) for r*kv results;
    - the row splits into ceil(width / r) tiles of nearly equal size (a narrow tail tile is
      latency-bound).

    The cheapest (k, r) per result wins; ties go to fewer loads per FMA (the loads share their
    ports with the epilogue's and the stores), then fewer blocks, then wider tiles.
    """
    best = None
    for k in (k for k in range(1, min(chunks, 4 // max(1, vectors)) + 1) if chunks % k == 0):
        kv = k * vectors
        for r in range(1, width + 1):
            if r * kv + tile_operands(r, k, vectors, window) > registers:
                break
            tiles = -(-width // r)
            cost = sum(max(w * kv, w + kv, 8) for w in [r] * (tiles - 1) + [width - r * (tiles - 1)])
            key = (cost / (width * kv), (r + kv) / (r * kv), k, -r)
            if best is None or key < best[0]:
                best = (key, k, r)
    return (best[1], best[2]) if best else (1, 1)


def config_space(p) -> dict:
    """Candidate values of each knob, for the tuner (oc_bn: the blocks that divide the channels)."""
    space = {k: v for k, v in _nchw.config_space(p).items() if k != "vectorize_out"}
    space["oc_bn"] = sorted({out_block(p.out_channel, b) for b in (8, 16, 32, 64)} - {0})
    space["oc_chunks"] = [1]
    if vector_registers() >= 32 and _facts().full_width_avx512:
        space["oc_chunks"] = [1, 2, 3]  # one vector per block, 2-3 blocks per tile (full_width_tile)
        space["ic_pass"] = [0, 32, 64, 128]
        space["pass_rows"] = sorted({0, 1, p.out_height})  # 0: pass_rows(), the rows per task
        space["rows_outer"] = [0, 1]
        space["prefetch"] = [0, 1]
        space["ic_unroll"] = sorted(set(space["ic_unroll"]) | {UNROLL_BLOCK})
    if vector_registers() < 32:
        # Multi-block tiles (see default_config), 2-4 blocks of narrow rows, instead of wider
        # layout blocks: the tuned graph keeps the untuned one's layout, which the next layers'
        # templates (input_block) were tuned on.
        space["oc_bn"] = [default_config(p)["oc_bn"]]
        space["oc_chunks"] = [1, 2, 3, 4]  # one that does not divide the blocks falls back to 1
        space["tile_ow"] = sorted(set(space["tile_ow"]) | set(range(2, min(p.out_width, 8) + 1)))
    return with_default(space, default_config(p))


def conv2d_NCHWc(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None, cfg=None,  # noqa: N802
                 out_channels=None, plain_output=False):
    """conv2d (groups 1) from NCHW or NCHW{ib}c data to NCHW{oc_bn}c output.

    ``kernel``: OIHW (O, C, KH, KW), or pre-packed by ``prepack_kernel_nchwc`` (6 dims; pass
    ``out_channels``). The output block is the ``oc_bn`` knob and must divide O. With
    ``plain_output`` the tile is unpacked to NCHW instead (the last convolution of a chain).
    """
    ndim = len(data.shape)
    if ndim not in (4, 5):
        raise ValueError(f"conv2d_NCHWc: input 'data' has {ndim} dims; expected 4 (NCHW) or 5 (NCHW<b>c)")
    dshape = const_shape(data, "conv2d_NCHWc data")
    ib = dshape[4] if ndim == 5 else 1
    channels = dshape[1] * ib
    prepacked = len(kernel.shape) in (6, 7)
    kshape = const_shape(kernel, "conv2d_NCHWc kernel")
    if len(kshape) == 7:  # bfloat16 channel pairs (conv2d_bf16.prepack_kernel_nchwc_bf16)
        kshape = (out_channels or kshape[0] * kshape[5], kshape[1] * kshape[4] * 2, kshape[2], kshape[3])
    elif prepacked:
        kshape = (out_channels or kshape[0] * kshape[5], kshape[1] * kshape[4], kshape[2], kshape[3])
    elif len(kshape) != 4:
        raise ValueError(f"conv2d_NCHWc: input 'kernel' has {len(kshape)} dims; expected 4 (OIHW) or 6 (pre-packed)")
    p = conv2d_shape("conv2d_NCHWc", (dshape[0], channels, dshape[2], dshape[3]), kshape, strides, padding,
                     dilation, 1)
    out_dtype = out_dtype or str(data.dtype)
    conf = config_for_shape(p, cfg)
    if prepacked:
        conf["oc_bn"] = const_int(kernel.shape[5])
    if plain_output and conf["oc_chunks"] > 1:  # NCHW tiles span one block (schedule_blocked_tile)
        conf["oc_chunks"] = 1
        conf["tile_ow"] = knob(cfg, "tile_ow", _nchw.default_config(p)["tile_ow"])
    bn = conf["oc_bn"]
    if bn and (p.out_channel // bn) % conf["oc_chunks"]:
        conf["oc_chunks"] = 1
    if not bn or p.out_channel % bn:
        raise ValueError(f"conv2d_NCHWc: no channel block divides the {p.out_channel} output channels "
                         f"(oc_bn={bn}); use x86.conv2d_nchw")
    if bf16.pairs_apply(data.dtype, kernel.dtype, ib) and len(kernel.shape) != 6:
        if amx.applies(data.dtype, kernel.dtype, ib, bn):
            packed = kernel if len(kernel.shape) == 7 else bf16.pack_kernel_nchwc_bf16(kernel, ib, bn)
            return amx.conv2d_nchwc_amx(data, packed, p, bn, plain_output, out_dtype=out_dtype)
        tile = bf16.default_tile_ow(p.out_width, bn, vector_lanes())
        return bf16.conv2d_nchwc_bf16(data, kernel, p, bn, knob(cfg, "tile_ow", tile) if cfg else tile, plain_output)
    if ndim == 4 and len(kernel.shape) != 7 and amx.plain_applies(data.dtype, kernel.dtype, channels, p.kernel_w,
                                                                   p.dilation_w, bn):
        return amx.conv2d_plain_amx(data, kernel, p, bn, plain_output, out_dtype=out_dtype)
    if ndim == 4:  # plain NCHW is NCHW1c
        plain = data
        data = te.compute(dshape + (1,), lambda n, c, y, x, b: plain[n, c, y, x], name="data_1c", tag="injective")
    acc = accumulation_dtype(data.dtype, out_dtype)
    (r0, r1), (c0, c1) = live_taps(p)
    # Taps that read only padding for every output pixel are left out, with the padding they read
    # (DeepLabV3's ASPP: a 3x3 conv dilated 36 on a 33x33 map is its centre tap, a 1x1 conv).
    pads = (p.pad_top - r0 * p.dilation_h, p.pad_left - c0 * p.dilation_w,
            p.pad_bottom - (p.kernel_h - 1 - r1) * p.dilation_h, p.pad_right - (p.kernel_w - 1 - c1) * p.dilation_w)
    padded = widened(pad(data, (0, 0, max(0, pads[0]), max(0, pads[1]), 0),
                         (0, 0, max(0, pads[2]), max(0, pads[3]), 0), name="data_pad"), acc)
    kernel_vec = kernel if prepacked else pack_kernel_nchwc(kernel, ib, bn)
    rco = te.reduce_axis((0, channels // ib), name="rco")
    rci = te.reduce_axis((0, ib), name="rci")
    ry = te.reduce_axis((0, r1 - r0 + 1), name="ry")
    rx = te.reduce_axis((0, c1 - c0 + 1), name="rx")

    top, left = max(0, pads[0]), max(0, pads[1])
    tile_w = int(conf.get("tile_ow") or 1)

    def fconv(n, occ, y, x, ocb):
        row = y * p.stride_h + ry * p.dilation_h + max(0, -pads[0])
        a = padded[n, rco, row, x * p.stride_w + rx * p.dilation_w + max(0, -pads[1]), rci]
        w = kernel_vec[occ, rco, ry + r0, rx + c0, rci, ocb]
        live = []
        if p.dilation_h > 1 and r1 > r0:
            # Dilated rows: a tap row inside the padding of this output row adds nothing; the
            # test is one per (row, tap row), outside the tile's channel loop (ASPP's rate 24 at
            # 33x33: half the tap rows of the image's rows are padding).
            live += [row >= top, row < top + p.in_height]
        if p.dilation_w > 1 and c1 > c0 and tile_w > 1:
            # Dilated columns, per width tile: a tap column that reads only padding for every
            # pixel of the tile adds nothing (exact for any tiling: a pixel's column lies between
            # its tile's first and last); the test depends on the tile and the tap column only.
            first = (x // tile_w) * tile_w
            col = rx * p.dilation_w + max(0, -pads[1])
            last = tir.min(first + (tile_w - 1), p.out_width - 1)
            live += [last * p.stride_w + col >= left, first * p.stride_w + col < left + p.in_width]
        if live:
            return te.sum(a.astype(acc) * w.astype(acc), axis=[rco, ry, rx, rci], where=tir.all(*live))
        return te.sum(a.astype(acc) * w.astype(acc), axis=[rco, ry, rx, rci])

    if not plain_output and flat_pixels(p) and flat_tasks(p, conf) and not conf.get("ic_pass"):
        # One axis over all H x W pixels: register tiles run on across rows, so a row whose
        # width the tile does not divide ends in no tail tile of its own (docs/topi.md).
        width = p.out_width

        def fflat(n, occ, q, ocb):
            a = padded[n, rco, q // width, q % width, rci]
            w = kernel_vec[occ, rco, 0, 0, rci, ocb]
            return te.sum(a.astype(acc) * w.astype(acc), axis=[rco, rci])

        conv = te.compute((p.batch, p.out_channel // bn, p.out_height * width, bn), fflat,
                          name="conv2d_NCHWc_tile", tag=TAG, attrs={"workload": p, "config": conf})
        return te.compute((p.batch, p.out_channel // bn, p.out_height, width, bn),
                          lambda n, c, y, x, b: conv[n, c, y * width + x, b].astype(out_dtype), name="conv2d_NCHWc",
                          tag="injective,conv2d_store")
    conv = te.compute((p.batch, p.out_channel // bn, p.out_height, p.out_width, bn), fconv,
                      name="conv2d_NCHWc_tile", tag=TAG, attrs={"workload": p, "config": conf})
    if plain_output:
        return te.compute((p.batch, p.out_channel, p.out_height, p.out_width),
                          lambda n, c, y, x: conv[n, c // bn, y, x, c % bn].astype(out_dtype), name="conv2d_nchw",
                          tag="injective,conv2d_store")
    # The stored output is the tile itself; a copy stage gives the schedule a loop nest to put
    # the tile (and any fused epilogue) in.
    return te.compute(conv.shape, lambda *i: conv(*i).astype(out_dtype), name="conv2d_NCHWc",
                      tag="injective,conv2d_store")


def live_taps(p) -> tuple:
    """((first, last) kernel row, (first, last) kernel column) that read the image for some output
    pixel; the others read only padding (a dilation as large as the image)."""

    def live(k, stride, dilation, pad_before, size, out):
        taps = [t for t in range(k) if t * dilation - pad_before <= size - 1
                and (out - 1) * stride + t * dilation - pad_before >= 0]
        return (taps[0], taps[-1]) if taps else (0, k - 1)

    return (live(p.kernel_h, p.stride_h, p.dilation_h, p.pad_top, p.in_height, p.out_height),
            live(p.kernel_w, p.stride_w, p.dilation_w, p.pad_left, p.in_width, p.out_width))


def accumulation_dtype(data_dtype, out_dtype) -> str:
    """float32 for a float16 conv on a CPU without native half arithmetic (F16C only, or no
    conversions at all: cpu_facts), else ``out_dtype``. Each float16 FMA would there be two
    conversions around a float32 one, per operation (~8x slower than float32); summing in
    float32 and rounding once at the store converts only the loads, and is no less accurate."""
    if str(data_dtype) != "float16" or str(out_dtype) != "float16":
        return str(out_dtype)
    from kiln.target.cpu_facts import cpu_facts

    return "float16" if {"avx512fp16", "fullfp16"} & cpu_facts().features else "float32"


def widened(padded, out_dtype: str):
    """The padded input of a float32-accumulating conv on bfloat16 / float16 data, converted to
    float32 in the packing pass: once per input element, where the tile would convert each
    broadcast pixel again for every FMA (1.5x slower for ResNet's 7x7 conv in bfloat16)."""
    if str(padded.dtype) not in ("bfloat16", "float16") or str(out_dtype) != "float32":
        return padded
    return te.compute(padded.shape, lambda *i: padded(*i).astype(out_dtype), name="data_pad_f32",
                      tag="injective,pad")


def flat_pixels(p) -> bool:
    """Whether the conv walks its pixels as one flat axis: a 1x1 kernel at stride 1 with no
    padding reads input pixel q for output pixel q, so H x W is one contiguous run."""
    return ((p.kernel_h, p.kernel_w, p.stride_h, p.stride_w) == (1, 1, 1, 1)
            and (p.pad_top, p.pad_left, p.pad_bottom, p.pad_right) == (0, 0, 0, 0))


MIN_TASKS = 8


def flat_tasks(p, conf) -> bool:
    """Whether walking the image as one run pays: the row's tiles must overrun it by a tenth
    (7 pixels in tiles of 3 compute 9; a run of 49 computes 51), and the channel blocks
    alone must give ``MIN_TASKS`` parallel tasks, as the rows no longer do (576->96 at 14x14
    in tiles of 4 blocks has 3: one run each would leave a core of two idle a third of the time)."""
    bn, chunks, tile = conf["oc_bn"], max(1, int(conf.get("oc_chunks", 1))), int(conf["tile_ow"])
    overrun = -(-p.out_width // tile) * tile - p.out_width
    return bool(bn) and overrun * 10 >= p.out_width and p.batch * (p.out_channel // bn) // chunks >= MIN_TASKS


def out_block(channels: int, preferred: int) -> int:
    """The output block for ``channels``: ``preferred`` (the oc_bn knob) if it divides them, else
    the largest power of two below it that does (24 channels -> 8), or 0 below 4 (no blocking)."""
    b = preferred
    while b >= 4 and channels % b:
        b = b // 2 if b & (b - 1) == 0 else 1 << (b.bit_length() - 1)  # down to a power of two
    return b if b >= 4 else 0


def input_block(channels: int) -> int:
    """The block a plain tensor of ``channels`` is given when it enters the blocked part of a
    graph: one vector of the target's float lanes if that divides it (the block the convs'
    default ``oc_bn`` gives their outputs, so tuning templates read the layout deployed builds
    have), else 16, 8 or 4; 0 if none does (it stays NCHW, like an RGB image)."""
    return next((b for b in (vector_lanes(), 16, 8, 4) if b >= 4 and channels % b == 0), 0)


def config_for_nchwc(data_shape, kernel_shape, strides=1, padding=0, dilation=1, cfg=None) -> dict:
    """The knobs conv2d_NCHWc uses for an NCHW-equivalent data shape and an OIHW kernel shape
    (oc_bn already adjusted to divide the output channels; 0 if nothing does)."""
    p = conv2d_shape("conv2d_NCHWc", tuple(data_shape), tuple(kernel_shape), strides, padding, dilation, 1)
    return config_for_shape(p, cfg)


def config_for_shape(p, cfg=None) -> dict:
    """The knobs for workload ``p`` (a ``Conv2DShape``): cfg's where it sets them, else defaults."""
    conf = default_config(p)
    conf.update({k: knob(cfg, k, v) for k, v in conf.items()})
    conf["oc_bn"] = out_block(p.out_channel, int(conf["oc_bn"]))
    if not conf["oc_bn"] or (p.out_channel // conf["oc_bn"]) % int(conf["oc_chunks"]):
        conf["oc_chunks"] = 1  # a tile spans whole blocks
    return conf


def pack_kernel_nchwc(kernel, ib: int, bn: int):
    """OIHW -> [O/bn, C/ib, KH, KW, ib, bn] (constant-folded when the kernel is a parameter)."""
    o, c, kh, kw = (const_int(d) for d in kernel.shape)
    return te.compute((o // bn, c // ib, kh, kw, ib, bn),
                      lambda oc, ic, y, x, i, b: kernel[oc * bn + b, ic * ib + i, y, x],
                      name="kernel_vec", tag="injective,kernel_pack")


def prepack_kernel_nchwc(weight: np.ndarray, ib: int, bn: int) -> np.ndarray:
    """numpy: OIHW weight -> (O/bn, C/ib, KH, KW, ib, bn), what pack_kernel_nchwc computes."""
    o, c, kh, kw = weight.shape
    return np.ascontiguousarray(weight.reshape(o // bn, bn, c // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def schedule_conv2d_NCHWc(outs, cfg=None):  # noqa: N802
    """Schedule for ``x86.conv2d_NCHWc`` with a fused elementwise epilogue on its output."""
    del cfg  # the knobs travel in the compute's attrs
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    conv = find_stage(outs[0], lambda op: getattr(op, "tag", "") in (TAG, bf16.TAG, amx.TAG), f"{TAG} stage")
    store = find_tagged(outs[0], "injective,conv2d_store")
    out = tile_root(s, outs[0], store, conv)
    if conv.op.tag in (bf16.TAG, amx.TAG):
        if out.op is not store.op:
            s[store].compute_inline()
        (amx.schedule_conv2d_nchwc_amx if conv.op.tag == amx.TAG else bf16.schedule_conv2d_nchwc_bf16)(s, conv, out)
        return s
    if out.op is not store.op:
        s[store].compute_inline()
    for t in conv.op.input_tensors:
        if t.op.name == "data_1c":  # plain NCHW read directly (no padding stage to inline it into)
            s[t].compute_inline()
    conf = conv.op.attrs["config"]
    if len(store.shape) == 4:  # plain_output: NCHW tiles, as x86.conv2d_nchw stores them
        schedule_blocked_tile(s, conv, out, blocked_input=True)
        return s
    n, c, y, x, b = s[out].op.axis
    chunks = conf.get("oc_chunks", 1)
    if len(conv.shape) == 5 and int(conf.get("ic_pass", 0) or 0) > 0:
        _schedule_channel_pass(s, conv, out, conf)
        return s
    rows = [y]
    if len(conv.shape) == 4:  # flat pixels: a task covers the whole image as one run
        x, rows = s[out].fuse(y, x), []
    xo, xi = s[out].split(x, factor=conf["tile_ow"])
    ci = None
    if chunks > 1:  # the tile spans `chunks` blocks: their loop sits inside the width tile
        c, ci = s[out].split(c, factor=chunks)
        s[out].unroll(ci)
    outer = [n, *rows, c] if conf.get("rows_outer") and rows else [n, c, *rows]
    s[out].reorder(*outer, xo, *([ci] if ci is not None else []), xi, b)
    s[out].vectorize(b)
    s[out].unroll(xi)
    task = s[out].fuse(*outer)
    s[out].parallel(task)
    s[conv].compute_at(s[out], xo)
    _schedule_tile(s, conv, conf, blocked_input=True, oc_chunks=chunks)
    if int(conf.get("prefetch", 0) or 0) and rows and not conf.get("rows_outer"):
        # tasks (block group, row), rows inside: each row asks for its share of the next group's weights
        height = const_int(rows[0].dom.extent)
        c_blocks = const_int(s[out].op.axis[1].dom.extent) // chunks
        rco = s[conv].op.reduce_axis[0]
        tiles = -(-const_int(s[out].op.axis[3].dom.extent) // int(conf["tile_ow"]))
        _prefetch_weights(s, conv, (task.var // height) % c_blocks * chunks, c_blocks * chunks, chunks,
                          task.var % height, height, [(xo, tiles), (rco, const_int(rco.dom.extent))], rco,
                          next_block=True)
    _schedule_packing(s, conv)
    return s



PASS_TASKS = 64  # parallel tasks a channel-pass conv aims at: 4 per thread on 16 cores


def pass_rows(height: int, blocks: int) -> int:
    """Output rows per task of a channel-pass conv with ``blocks`` output blocks (the
    ``pass_rows`` knob's default): all of them where the blocks alone give ``PASS_TASKS``
    tasks, else the most rows that do (a divisor of the height, or 2 rows with a one-row tail),
    down to one. Each task then sums its rows over the passes; a pass's weights are read once
    per task, so fewer rows cost re-reads: one Sapphire Rapids core, CPU time, 512->512 3x3 at
    7x7 in groups of 2 rows 1.40 -> 1.43 ms, 256->256 3x3 at 14x14 in single rows 1.23 ->
    1.17 ms. ResNet's late 3x3 convs had 8 (256 channels at 14x14) or 16 tasks (512 at 7x7):
    at 16 threads half the cores idled through the former."""
    if blocks >= PASS_TASKS:
        return height
    fit = [r for r in range(height, 0, -1) if blocks * -(-height // r) >= PASS_TASKS and (height % r == 0 or r <= 2)]
    return fit[0] if fit else 1


def _schedule_channel_pass(s, conv, out, conf):
    """The whole output of a channel block (all rows) accumulates in a buffer while the input
    channels pass ``ic_pass`` channels (whole input blocks) at a time, rows inside: each pass's weights (ic_outer x
    ib x taps x oc_bn) stay in the core's cache for every row, where the row-at-a-time order
    reads a block's weights of all input channels again for each row (late ResNet layers:
    512 channels x 3x3 x 32 = 590 KB per row)."""
    n, c, y, x, b = s[out].op.axis
    chunks = max(1, int(conf.get("oc_chunks", 1)))
    blocks = const_int(n.dom.extent) * const_int(c.dom.extent) // chunks
    rows = int(conf.get("pass_rows", 0) or 0) or pass_rows(const_int(y.dom.extent), blocks)
    yo, yi = s[out].split(y, factor=rows)
    if chunks > 1:
        c, ci = s[out].split(c, factor=chunks)
        s[out].reorder(n, c, yo, yi, x, ci, b)
    else:
        s[out].reorder(n, c, yo, yi, x, b)
    s[out].vectorize(b)
    groups = -(-const_int(y.dom.extent) // rows)
    task = s[out].fuse(n, c, yo)
    s[out].parallel(task)
    s[conv].compute_at(s[out], task)
    cn, occ, cy, cx, ocb = s[conv].op.axis
    rco, ry, rx, rci = s[conv].op.reduce_axis
    ib = const_int(rci.dom.extent)
    passes = const_int(rco.dom.extent)
    ipp = divisor_at_most(passes, max(1, int(conf["ic_pass"]) // ib))
    ro, ri = s[conv].split(rco, factor=ipp)
    xo, xi = s[conv].split(cx, factor=int(conf["tile_ow"]))
    if chunks > 1:
        s[conv].reorder(cn, ro, cy, xo, ri, ry, rx, rci, xi, occ, ocb)
        s[conv].unroll(occ)
    else:
        s[conv].reorder(cn, occ, ro, cy, xo, ri, ry, rx, rci, xi, ocb)
    # The block's input channels unroll (not the taps): a pass's loops are short, and one loop of
    # ib x tile FMAs per tap ran 512->512 3x3 at 7x7 5-13% faster than the taps unrolled around
    # a loop of ib steps.
    s[conv].unroll(rci)
    s[conv].unroll(xi)
    s[conv].vectorize(ocb)
    if int(conf.get("prefetch", 0) or 0):
        c_blocks = blocks // const_int(n.dom.extent)
        block = (task.var // groups) % c_blocks * chunks
        tiles = -(-const_int(cx.dom.extent) // int(conf["tile_ow"]))
        loops = [(ro, passes // ipp), (cy, rows), (xo, tiles), (ri, ipp), (ry, const_int(ry.dom.extent)),
                 (rx, const_int(rx.dom.extent))]
        _prefetch_weights(s, conv, block, c_blocks * chunks, chunks, task.var % groups, groups, loops, rx)
    _schedule_packing(s, conv)


# Lines asked for per iteration at most. ResNet-50's convs ask for <= 10; convs on 1x1-3x3 images
# (Inception's last blocks) asked for up to 576 each, which only made their code several times
# larger and slower to compile: their few iterations cannot spread a block's weights anyway.
PREFETCH_LINES = 16


def _prefetch_weights(s, conv, block, blocks: int, chunks: int, group, groups: int, loops, at, next_block=False):
    """Software prefetches of weights a task will read (a ``prefetch`` pragma on the tap-column
    loop, ``loops`` the leaf loops around it with their extents: pass, row, width tile, block of
    the pass, tap row, tap column). In a whole model the weights come from memory, and a channel
    pass reads its weights first in its first row, at several times the rate memory delivers to
    one core (the other rows read them from L1): a 512->512 3x3 conv at 7x7 streams 9.4 MB.

    - A task over all rows of its blocks (``groups`` 1) asks for the next pass's weights while
      this pass runs, each (row, width tile) its share of each tap's lines (after the last pass,
      the last one again).
    - A task over a group of rows (``pass_rows``): the other groups of its blocks read the
      weights from L2 after it, but the first group's passes are too short for the next pass's
      lines to arrive in time; each group asks instead for its share of the next blocks' weights,
      evenly over its iterations (the last blocks: their own again). ``next_block``: this form
      whatever the number of groups (the row schedule, where an image of one row has one).
    """
    kernel = conv.op.input_tensors[1]
    _, chans, kh, kw, ib, bn = (const_int(d) for d in kernel.shape)
    per_line = max(1, 64 // kernel.dtype.bytes)
    loads = []
    if groups == 1 and not next_block:
        (ro, passes), (cy, rows), (xo, tiles), (ri, ipp), (ry, nry), (rx, nrx) = loops
        (r0, _), (c0, _) = live_taps(conv.op.attrs["workload"])
        lines = -(-ib * bn // per_line)
        share = min(-(-lines // (rows * tiles)), max(1, PREFETCH_LINES // chunks))
        slot = cy.var * tiles + xo.var
        nxt = tir.min(ro.var + 1, passes - 1) * ipp + ri.var
        start = tir.min(slot * share, max(0, lines - share)) * per_line  # one clamp, then constant offsets
        for k in range(chunks):
            for j in range(min(share, lines)):
                loads.append(kernel[block + k, nxt, ry.var + r0, rx.var + c0, 0, start + j * per_line])
    else:
        plane = kh * kw * ib * bn  # elements of one input block of one output block
        lines = -(-chans * plane // per_line)
        per_group = -(-lines // groups)
        iters, it = 1, 0
        for iv, extent in loops:  # the iteration's index over the loops around the prefetch
            iters, it = iters * extent, it * extent + iv.var
        share = min(-(-per_group // iters), max(1, PREFETCH_LINES // chunks))
        start = tir.min(group * per_group + it * share, max(0, lines - share)) * per_line  # one clamp
        for k in range(chunks):
            nxt = tir.min(block + chunks + k, blocks - 1)
            for j in range(min(share, lines)):
                loads.append(kernel[nxt, 0, 0, 0, 0, start + j * per_line])  # a flat offset into that block
    s[conv].pragma(at, "prefetch", loads)
