"""Winograd F(2x2, 3x3) conv2d on channel-blocked data (NCHW{b}c) for x86.

A 3x3 stride-1 convolution computes each 2x2 block of outputs from a 4x4 window of input as

    Y = A^T [ (G g G^T) * (B^T d B) ] A        (* elementwise over the 4x4 "frequencies" e)

so per output pixel it needs 16/4 = 4 multiplications per (input, output) channel pair instead
of 9: 2.25x fewer. The multiplications form 16 independent matrix products over the channels,
each one the same register tile as a 1x1 convolution:

    V[n, e, C/ib, P, ib]    = B^T d B of every input tile (P = tiles), a parallel pass
    U[K/bn, e, C/ib, ib, bn] = G g G^T of the weight (``prepack_kernel_winograd`` at build time)
    M[n, e, K/bn, P, bn]    = sum over channels of V * U (per e: tile_p tiles x bn channels in
                               registers), computed for tile_p tiles at a time inside the
                               output loop, so M never goes to memory
    out[n, K/bn, OH, OW, bn] = A^T M A, with any fused epilogue

The transforms' 0/1 coefficients are folded away when the frequency loops unroll. Numerically
F(2x2, 3x3) stays within a few float32 ulps of the direct kernel (its matrices are exact small
fractions). bfloat16 data is transformed in the accumulation dtype (float32: V = B^T d B of
bfloat16 numbers is exact there, where bfloat16 would round each of its sums to 8 bits); the
weight's U is rounded to bfloat16 once, from float64, like the weight itself. float16 on a CPU
without native half arithmetic is transformed and summed in float32 too (conv2d_nchwc's
``accumulation_dtype``) and rounded once at the output. Knobs: ``oc_bn`` (output block), ``tile_p`` (tiles per register tile).
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir

from ..nn.conv2d import conv2d_shape
from ..nn.pad import pad
from ..utils import const_int, const_shape, divisor_at_most, knob, with_default
from ..cpu import accumulator_rows, vector_lanes, vector_registers
from .conv2d import find_tagged
from .conv2d_nchwc import out_block
from .injective import tile_root

TAG = "conv2d_winograd_NCHWc"

BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


def applies_to(kernel_hw, strides, dilation, groups) -> bool:
    """Whether the Winograd kernel computes a conv of these attributes (3x3, stride 1, no
    dilation, groups 1); relay's layout pass and backend ask the same question here."""
    return tuple(kernel_hw) == (3, 3) and tuple(strides) == (1, 1) and tuple(dilation) == (1, 1) and groups == 1


MIN_TILES = 32


def direct_is_faster(dtype, target=None, out_hw=None) -> bool:
    """bfloat16 on a CPU with AMX-BF16 (cpu_facts): the direct kernel's tile products
    (x86/amx_bf16.py) beat Winograd's 2.25x fewer multiplications (ResNet-18's 3x3 layers ran
    3-5x faster than Winograd in float32 on a Sapphire Rapids core).

    ``out_hw`` (output height, width): an image of fewer than ``MIN_TILES`` 2x2 tiles, on a CPU
    that runs 512-bit FMAs whole (``CPUFacts.full_width_avx512``), takes the direct kernel too:
    its transformed weights (16 x C x K, 1.8x the 3x3 weight) serve only a few tiles per read,
    and 512->512 at 7x7 (16 tiles) ran 2.4 ms by Winograd, 1.9 ms direct (one Sapphire Rapids
    core, CPU time). So does a row of tiles with no divisor from 4 to 16 (a prime 17 at 33x33:
    DeepLabV3's 256->256 head conv ran 14.8 ms by Winograd, 6.2 ms direct)."""
    from kiln.target.cpu_facts import cpu_facts

    facts = cpu_facts(target)
    if str(dtype) == "bfloat16" and "amx-bf16" in facts.features:
        return True
    if out_hw is not None and facts.full_width_avx512:
        h, w = (int(d) for d in out_hw)
        row = -(-w // 2)  # tiles in a row: the product's register tile takes a divisor of it
        return row * -(-h // 2) < MIN_TILES or not any(row % d == 0 for d in range(4, 17))
    return False


def applies(p) -> bool:
    """``applies_to`` for a ``Conv2DShape``."""
    return applies_to((p.kernel_h, p.kernel_w), (p.stride_h, p.stride_w), (p.dilation_h, p.dilation_w), p.groups)


def default_config(p) -> dict:
    """oc_bn as the direct kernel's (AlterOpLayout picks the layout before the kernel); tile_p
    tiles of one frequency as accumulators, in at most half the vector registers: with 16
    (AVX2), 7 tiles ran 64@56 and 128@28 13% faster than 14 in whole ResNet-18 runs, and 4
    slower again; with 32, 14 tiles is the same rule."""
    from .conv2d_nchwc import default_config as direct_default

    lanes, regs = vector_lanes(), vector_registers()
    bn = direct_default(p)["oc_bn"]
    per_tile = max(1, bn // lanes)
    tiles_w = -(-p.out_width // 2)
    rows = min(accumulator_rows(per_tile, regs, spare=6), regs // 2 // per_tile)
    tile_p = divisor_at_most(tiles_w, rows, prefer=(14, 7, 8, 4))
    if tile_p < 4 and tiles_w > 4:
        tile_p = min(tiles_w, rows)
    from kiln.target.cpu_facts import cpu_facts

    if not cpu_facts().full_width_avx512:
        return {"oc_bn": bn, "tile_p": tile_p}
    return {"oc_bn": bn, "tile_p": tile_p, "rows_outer": int(rows_outer(p)), "prefetch": 1}


def rows_outer(p) -> bool:
    """Whether the output loop's tasks walk tile rows outside the output blocks (the ``rows_outer``
    knob; ``conv2d_nchwc.rows_outer`` for the direct kernel): blocks outside read all of V (the
    transformed input, 16 x C x tiles) once per block, rows outside all of U (16 x C x K) once
    per tile row. Where V is the larger and beyond half an L2: one Sapphire Rapids core, CPU
    time, 64->64 at 56x56 (V 3.2 MB, U 256 KB) 1.36 -> 1.10 ms (caches flushed: 2.15 -> 1.55),
    128->128 at 28x28 (V 1.6 MB, U 1 MB) 1.19 -> 1.15 ms (1.75 -> 1.45); 256->256 at 14x14 (U
    4 MB) ran 0.97 -> 1.77 ms."""
    from .conv2d_nchwc import ROWS_WEIGHTS

    tiles = -(-p.out_height // 2) * -(-p.out_width // 2)
    v_bytes, u_bytes = 16 * p.in_channel * tiles * 4, 16 * p.in_channel * p.out_channel * 4
    return v_bytes >= ROWS_V and u_bytes <= min(ROWS_WEIGHTS, v_bytes)


ROWS_V = 1 << 20  # a V at least this large (half an Intel core's L2): tile rows outside (rows_outer)


def config_for_shape(p, cfg=None) -> dict:
    """The knobs for workload ``p``: cfg's where it sets them, else defaults; oc_bn lowered to a
    block that divides the output channels (0 if none does)."""
    conf = {"rows_outer": 0, "prefetch": 0, **default_config(p)}  # (off where the defaults lack them)
    conf.update({name: knob(cfg, name, v) for name, v in conf.items()})
    conf["oc_bn"] = out_block(p.out_channel, int(conf["oc_bn"]))
    return conf


def config_space(p) -> dict:
    tiles_w = -(-p.out_width // 2)
    space = {"oc_bn": sorted({out_block(p.out_channel, b) for b in (16, 32, 64)} - {0}),
             "tile_p": sorted(set(range(2, min(tiles_w, 14) + 1)))}
    from kiln.target.cpu_facts import cpu_facts

    if cpu_facts().full_width_avx512:  # the knobs whose defaults are on there only (default_config)
        space.update(rows_outer=[0, 1], prefetch=[0, 1])
    default = default_config(p)
    return with_default(space, {**default, "oc_bn": out_block(p.out_channel, default["oc_bn"])})


def _terms(weights, values):
    """sum(w * v) over the nonzero weights; +-1 need no multiplication."""
    out = None
    for w, v in zip(weights, values):
        if w == 0:
            continue
        term = v if w == 1 else (-v if w == -1 else v * tir.const(float(w), v.dtype))
        out = term if out is None else out + term
    return out


def _select(index, cases):
    """cases[index] as a Select chain; folds to one case once ``index`` is a constant."""
    out = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        out = tir.Select(index == k, cases[k], out)
    return out


def conv2d_winograd_NCHWc(data, kernel, padding, out_dtype=None, cfg=None, out_channels=None):  # noqa: N802
    """3x3 stride-1 conv2d from NCHW{ib}c data to NCHW{oc_bn}c output by Winograd F(2x2, 3x3).

    ``kernel``: OIHW (K, C, 3, 3), or ``prepack_kernel_winograd(w, ib, bn)`` (K/bn, 16, C/ib, ib,
    bn); pass ``out_channels`` with a pre-packed kernel.
    """
    dshape = const_shape(data, "conv2d_winograd data")
    if len(dshape) != 5:
        raise ValueError(f"conv2d_winograd_NCHWc: input 'data' has {len(dshape)} dims; expected 5 (NCHW<b>c)")
    n, chunks, h, w, ib = dshape
    c = chunks * ib
    packed = len(kernel.shape) == 5
    k = out_channels or (const_int(kernel.shape[0]) * const_int(kernel.shape[4]) if packed else const_int(kernel.shape[0]))
    kh, kw = (3, 3) if packed else (const_int(kernel.shape[2]), const_int(kernel.shape[3]))
    p = conv2d_shape("conv2d_winograd_NCHWc", (n, c, h, w), (k, c, kh, kw), 1, padding, 1, 1)
    if not applies(p):
        raise ValueError("conv2d_winograd_NCHWc: needs a 3x3 kernel, stride 1, no dilation")
    out_dtype = out_dtype or str(data.dtype)
    conf = config_for_shape(p, cfg)
    bn = const_int(kernel.shape[4]) if packed else conf["oc_bn"]
    if not bn or k % bn:
        raise ValueError(f"conv2d_winograd_NCHWc: no channel block divides the {k} output channels")
    conf["oc_bn"] = bn
    th, tw = -(-p.out_height // 2), -(-p.out_width // 2)
    padded = pad(data, (0, 0, p.pad_top, p.pad_left, 0),
                 (0, 0, 2 * th + 2 - h - p.pad_top, 2 * tw + 2 - w - p.pad_left, 0), name="data_pad")

    from .conv2d_nchwc import accumulation_dtype

    acc = accumulation_dtype(data.dtype, out_dtype)  # float32 for float16 without native half
    wide = acc if str(data.dtype) in ("bfloat16", "float16") and acc == "float32" else str(data.dtype)

    def fv(b, e, cb, t, ci):
        y, x = (t // tw) * 2, (t % tw) * 2
        d = [[padded[b, cb, y + i, x + j, ci].astype(wide) for j in range(4)] for i in range(4)]
        cases = []
        for e1 in range(4):
            rows = [_terms(BT[e1], [d[i][j] for i in range(4)]) for j in range(4)]  # (B^T d)[e1][j]
            for e2 in range(4):
                cases.append(_terms(BT[e2], rows))
        return _select(e, cases)

    v = te.compute((n, 16, chunks, th * tw, ib), fv, name="winograd_input", tag="winograd_input")
    u = kernel if packed else _transform_kernel(kernel, ib, bn)
    rco = te.reduce_axis((0, chunks), name="rco")
    rci = te.reduce_axis((0, ib), name="rci")
    m = te.compute((n, 16, k // bn, th * tw, bn),
                   lambda b, e, kb, t, kk: te.sum(v[b, e, rco, t, rci].astype(acc)
                                                  * u[kb, e, rco, rci, kk].astype(acc), axis=[rco, rci]),
                   name="winograd_product", tag=TAG, attrs={"workload": p, "config": conf})

    def fout(b, kb, y, x, kk):
        t = (y // 2) * tw + x // 2
        cases = []
        for a in range(2):
            for c2 in range(2):
                cases.append(_terms([AT[a][e1] * AT[c2][e2] for e1 in range(4) for e2 in range(4)],
                                    [m[b, e, kb, t, kk] for e in range(16)]))
        out = _select((y % 2) * 2 + x % 2, cases)
        return out if acc == str(out_dtype) else out.astype(out_dtype)

    return te.compute((n, k // bn, p.out_height, p.out_width, bn), fout, name="conv2d_winograd",
                      tag="injective,winograd_output")


def _transform_kernel(kernel, ib: int, bn: int):
    """U = G g G^T as a TE stage (constant-folded when the kernel is a parameter)."""
    k, c = const_int(kernel.shape[0]), const_int(kernel.shape[1])

    dtype = str(kernel.dtype)
    wide = "float32" if dtype == "bfloat16" else dtype  # one rounding to bfloat16, at the end

    def fu(kb, e, cb, ci, kk):
        g = [[kernel[kb * bn + kk, cb * ib + ci, i, j].astype(wide) for j in range(3)] for i in range(3)]
        cases = []
        for e1 in range(4):
            rows = [_terms(G[e1], [g[i][j] for i in range(3)]) for j in range(3)]
            for e2 in range(4):
                cases.append(_terms(G[e2], rows))
        return _select(e, cases).astype(dtype)

    return te.compute((k // bn, 16, c // ib, ib, bn), fu, name="winograd_kernel", tag="injective,kernel_pack")


def prepack_kernel_winograd(weight: np.ndarray, ib: int, bn: int) -> np.ndarray:
    """numpy: OIHW 3x3 weight -> U (K/bn, 16, C/ib, ib, bn), what _transform_kernel computes."""
    k, c = weight.shape[:2]
    u = np.einsum("ai,kcij,bj->abkc", G, weight.astype(np.float64), G).reshape(16, k, c)
    u = u.reshape(16, k // bn, bn, c // ib, ib).transpose(1, 0, 3, 4, 2)
    return np.ascontiguousarray(u).astype(weight.dtype)


def schedule_output_tiles(s, out, m, tile: int, rows_outer: bool = False, loops=None):
    """The output loop of an NCHWc Winograd F(2x2, 3x3) (float or int8): (batch, chunk, tile row)
    parallel, ``tile`` tiles of 2x2 pixels a step; the product ``m`` for those tiles computed there,
    per frequency in a register tile over the channel reduction. Returns that register stage.
    ``rows_outer``: the tasks in (batch, tile row, chunk) order (see ``rows_outer``). ``loops``, a
    list, receives the task and tile-group loops (their IterVars)."""
    n, kb, y, x, kk = s[out].op.axis
    yo, yi = s[out].split(y, factor=2)
    xt, xi = s[out].split(x, factor=2)
    xo, xp = s[out].split(xt, factor=tile)
    outer = [n, yo, kb] if rows_outer else [n, kb, yo]
    s[out].reorder(*outer, xo, xp, yi, xi, kk)
    s[out].unroll(yi)
    s[out].unroll(xi)
    s[out].vectorize(kk)
    task = s[out].fuse(*outer)
    s[out].parallel(task)
    if loops is not None:
        loops += [task, xo]
    s[m].compute_at(s[out], xo)
    mm = s.cache_write(m, "local")
    _, e, _, _, mk = s[m].op.axis
    s[m].vectorize(mk)
    s[mm].compute_at(s[m], e)
    return mm


def _prefetch_next_block(s, m, mm, out, tile_p: int, task, xo, rows_outer: bool = False):
    """Software prefetches of U (the transformed weight) for the next output block: the tasks
    are (block, tile row), rows inside, and the block's first row reads all of its U (16 x C x
    bn: 512 KB for 256 channels in blocks of 32) from memory in a whole model, at several times
    the rate memory delivers to one core, the other rows from L2; each row asks instead for its
    share of the next block's U, evenly over its (tile group, frequency, channel block)
    iterations (a ``prefetch`` pragma on the channel-block loop; the last block: its own). With
    rows outside the blocks the next task is the next block of the same tile row: each task asks
    for all of the next block's U (the first row's tasks read it from memory, the others find it
    in L2)."""
    u = m.op.input_tensors[1]
    blocks, _, chans, ib, bn = (const_int(d) for d in u.shape)
    _, kb, y, x, _ = s[out].op.axis
    rows = -(-const_int(y.dom.extent) // 2)
    groups = -(--(-const_int(x.dom.extent) // 2) // tile_p)
    e = s[m].op.axis[1]
    rco = s[mm].op.reduce_axis[0]
    per_line = max(1, 64 // u.dtype.bytes)
    lines = -(-16 * chans * ib * bn // per_line)
    iters = groups * 16 * chans
    it = (xo.var * 16 + e.var) * chans + rco.var
    if rows_outer:
        share = -(-lines // iters)
        nxt = tir.min(task.var % blocks + 1, blocks - 1)
        first = 0
    else:
        per_row = -(-lines // rows)
        share = -(-per_row // iters)
        nxt = tir.min((task.var // rows) % blocks + 1, blocks - 1)
        first = (task.var % rows) * per_row
    # one clamp per iteration (the window ends at the last line), then constant offsets
    start = tir.min(first + it * share, lines - share) * per_line
    loads = [u[nxt, 0, 0, 0, start + j * per_line] for j in range(share)]
    s[mm].pragma(rco, "prefetch", loads)


TRANSFORM_TASKS = 64  # parallel tasks the input transform aims at: 4 per thread on 16 cores


def transform_groups(tiles: int, blocks: int, min_tasks: int) -> int:
    """Into how many groups of tiles the input transform splits each channel block so that
    ``blocks`` x groups reaches ``min_tasks``: the fewest that divide the tiles and do, groups of
    at least 4 tiles (the most such groups where none reaches it); 1 for ``min_tasks`` 0."""
    if min_tasks <= 0 or blocks >= min_tasks:
        return 1
    fit = [g for g in range(1, tiles + 1) if tiles % g == 0 and tiles // g >= 4]
    return next((g for g in fit if blocks * g >= min_tasks), fit[-1] if fit else 1)


def schedule_input_transform(s, v, min_tasks: int = 0) -> None:
    """The input transform: one parallel pass, vectorized along the channel block; with
    ``min_tasks``, each block's tiles split into groups (``transform_groups``) that are tasks
    too: by channel block alone ResNet's transforms were 4 tasks (64 channels at 56x56, blocks
    of 16) or 8, which 16 threads could not share."""
    vb, ve, vcb, vt, vci = s[v].op.axis
    groups = transform_groups(const_int(vt.dom.extent), const_int(vb.dom.extent) * const_int(vcb.dom.extent),
                              min_tasks)
    vto, vt = s[v].split(vt, nparts=groups)
    s[v].reorder(vb, vcb, vto, vt, ve, vci)
    s[v].unroll(ve)
    s[v].vectorize(vci)
    s[v].parallel(s[v].fuse(vb, vcb, vto))


def schedule_conv2d_winograd_NCHWc(outs, cfg=None):  # noqa: N802
    """Schedule for ``conv2d_winograd_NCHWc`` with a fused elementwise epilogue on its output (a
    direct conv2d_NCHWc compute, which relay picks for bfloat16 on AMX, goes to its schedule)."""
    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    try:
        find_tagged(outs[0], TAG)
    except ValueError:
        from .conv2d_nchwc import schedule_conv2d_NCHWc
        return schedule_conv2d_NCHWc(outs)
    s = te.create_schedule([o.op for o in outs])
    m = find_tagged(outs[0], TAG)
    store = find_tagged(outs[0], "injective,winograd_output")
    out = tile_root(s, outs[0], store, m)
    if out.op is not store.op:
        s[store].compute_inline()
    conf = m.op.attrs["config"]
    tile_p = conf["tile_p"]
    # Output: (n, chunk, tile row) parallel; tile_p tiles of 2x2 pixels per step, where the
    # product for those tiles is computed (16 frequencies x tile_p x bn, in the stack).
    loops = []
    mm = schedule_output_tiles(s, out, m, tile_p, bool(conf.get("rows_outer")), loops)
    _, _, _, mt, mkk = s[mm].op.axis
    rco, rci = s[mm].op.reduce_axis
    s[mm].reorder(rco, rci, mt, mkk)
    s[mm].unroll(mt)
    s[mm].vectorize(mkk)
    if conf.get("prefetch"):
        _prefetch_next_block(s, m, mm, out, tile_p, *loops, rows_outer=bool(conf.get("rows_outer")))
    # The input transform: one parallel pass, vectorized along the channel block.
    v = m.op.input_tensors[0]
    schedule_input_transform(s, v, TRANSFORM_TASKS)
    pad_stage = v.op.input_tensors[0]
    if "pad" in pad_stage.op.tag:
        # Inlined: ~10% faster than a separate padding pass (measured 553 vs 630 us at 64@56),
        # at the price of larger expressions to simplify when compiling.
        s[pad_stage].compute_inline()
    u = m.op.input_tensors[1]
    if "kernel_pack" in u.op.tag:
        ukb, ue, ucb, uci, ukk = s[u].op.axis
        s[u].parallel(s[u].fuse(ukb, ue))
        s[u].vectorize(ukk)
    return s
