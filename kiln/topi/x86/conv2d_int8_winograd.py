"""Exact int8 3x3 convolutions by Winograd F(2x2, 3x3) in 16-bit integers, for x86 without VNNI.

Without VNNI an exact u8 x s8 product costs the 16-bit path's two ``vpmaddwd`` and two adds per
4 channels x L lanes (x86/int8_intrin.py; ``vpmaddubsw`` saturates for full-range weights), the
same multiply throughput as float32 FMAs on int16 pairs; kiln's float32 3x3 convs use Winograd
(x86/conv2d_winograd.py), 2.25x fewer multiplications. The same transform in integers is exact:

    V  = B^T d B            B's entries are 0 and +-1: |V| <= 4 * 255, int16
    U4 = (2G) g (2G)^T      2G is integer (G has halves): |U4| <= 9 * 128, int16 (build time)
    M4 = sum_c V * U4       per frequency e, vpmaddwd on int16 pairs, int32: needs
                            C * 1020 * 1152 < 2**31 (C <= 1827, ``applies``)
    y  = (A^T M4 A) / 4     A's entries are 0 and +-1, in int32 for C < 202 (9 terms), else
                            int64; 4 divides it exactly

so ``y`` is the direct conv's int32 sum of the raw u8 data and the weights (padding with the data
zero point, as the direct kernel), bit for bit, and the requantize epilogue follows as there.
Per output pixel 4 products per channel pair instead of 9.
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir

from .conv2d_int8 import epilogue_schedule

BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.int64)
G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], dtype=np.int64)  # 2 * G
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.int64)


def _terms(coefficients, values):
    """sum(c * v) over the nonzero coefficients, all 0 or +-1 here (adds and subtracts only)."""
    out = None
    for c, v in zip(coefficients, values):
        if c == 0:
            continue
        assert c in (1, -1), c
        out = (v if c == 1 else -v) if out is None else (out + v if c == 1 else out - v)
    return out


def _select(index, cases):
    """cases[index] as a chain of selects; one case once ``index`` is a constant (unrolled loops)."""
    out = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        out = tir.Select(index == k, cases[k], out)
    return out
PRODUCT_TAG = "int8_winograd_product"
OUTPUT_TAG = "int8_winograd_output"
V_MAX, U_MAX = 4 * 255, 9 * 128


def applies(kernel_hw, strides, dilation, in_channels: int) -> bool:
    """3x3, stride 1, no dilation, and the int32 sums of ``M4`` cannot overflow."""
    return tuple(kernel_hw) == (3, 3) and tuple(strides) == (1, 1) and tuple(dilation) == (1, 1) and \
        in_channels * V_MAX * U_MAX < 2 ** 31


def pack_weight(w: np.ndarray, ib: int, lanes: int) -> np.ndarray:
    """OIHW int8 3x3 (I a multiple of ib) -> U4 as int16 pairs, (O/L, 16, I/ib, ib/4, 2, L, 2)."""
    o, c = w.shape[:2]
    u = np.einsum("ai,kcij,bj->abkc", G2, w.astype(np.int64), G2).reshape(16, o, c)
    assert np.abs(u).max(initial=0) <= U_MAX
    u = u.reshape(16, o // lanes, lanes, c // ib, ib // 4, 2, 2)  # e, kb, l, cb, q, p, r
    return np.ascontiguousarray(u.transpose(1, 0, 3, 4, 5, 2, 6)).astype(np.int16)


def unpack_weight(u: np.ndarray) -> np.ndarray:
    """``pack_weight``'s input back (OIHW int64): g = (2G)^+ U4 (2G)^+T, rounded (exact)."""
    kb, _, cb, q, _, lanes, _ = u.shape
    u4 = np.asarray(u, np.int64).transpose(1, 0, 5, 2, 3, 4, 6).reshape(4, 4, kb * lanes, cb * q * 4)
    inv = np.linalg.pinv(G2.astype(np.float64))
    g = np.einsum("ia,abkc,jb->kcij", inv, u4.astype(np.float64), inv)
    return np.rint(g).astype(np.int64)


SMALL_IMAGE = 16


def register_tile(count: int, out_blocks: int, lanes: int) -> tuple:
    """(tiles, output blocks) of the product's register tile for ``count`` 2x2 tiles: ``tiles``
    consecutive tiles (row-major over the image, across tile rows) x ``blocks`` output blocks of L
    lanes as accumulators; each data pair's broadcast feeds every block, each weight vector every
    tile. With 16 vector registers (AVX2): 4 tiles x 2 blocks (8 accumulators, 2 weight vectors, a
    broadcast) where 4 divides the tiles, else 7 x 1 where 7 does (a count padded to 4s did worse),
    else 4 x 2 on a padded count. Measured (one Sapphire Rapids core, znver3 code, ResNet-50's
    convs alone, medians of interleaved runs; 7 tiles of one tile row x 1 block before, 7 x 2
    accumulators spill): 64@56 1.19-1.25 -> 1.04-1.10 ms, 128@28 1.00-1.03 -> 0.84, 256@14 (49
    tiles) 0.90-0.93 -> 0.80-0.83 (4 x 2 padded to 52: 0.83), 512@7 1.32-1.37 -> 1.10; 6 x 2,
    7 x 2, 2 x 4, 3 x 4 and 4 x 1 were slower on all four. With 32 registers (AVX-512,
    skylake-avx512 code) the same rule with 8 tiles x 2 blocks: 0.58-0.62, 0.55-0.57, 0.58 (7 x 1)
    and 0.79-0.81 ms (8 x 1 on 512@7: 0.87; 7 x 1 on rows before: 0.67, 0.58, 0.59, 0.96)."""
    blocks = 2 if out_blocks % 2 == 0 else 1
    if count % 4 and count % 7 == 0:
        return 7, 1
    return (8 if lanes >= 16 else 4), blocks


def conv2d_int8_winograd_acc(data, u, padding, pad_value: int, out_hw, tile=None):
    """int32 NCHW[L]c sums of u8/int16 NCHW[ib]c ``data`` and ``pack_weight``'s ``u``.
    ``tile``: (tiles, output blocks) of the product's register tile (default ``register_tile``);
    the transformed input and the product cover the 2x2 tiles rounded up to a multiple of
    ``tiles`` (the extra tiles read only padding), so no register tile needs a bounds check."""
    n, cc, h, w, ib = (int(d) for d in data.shape)
    kb, _, ucb, icq, _, lanes, _ = (int(d) for d in u.shape)
    oh, ow = out_hw
    pt, pl = padding[0], padding[1]
    th, tw = -(-oh // 2), -(-ow // 2)
    tiles, blocks = tile or register_tile(th * tw, kb, lanes)
    if kb % blocks:
        raise ValueError(f"int8 Winograd: {blocks} output blocks per register tile do not divide {kb}")
    nt = -(-th * tw // tiles) * tiles
    # a small image (at most SMALL_IMAGE tiles) is one task per output block pair: per frequency
    # the product walks its register tiles over the weights' slice of that frequency, read from L2
    # once and then from L1, where a task per group read all 16 frequencies' slices per group
    # (512@7, 16 tiles: 1.13-1.15 -> 1.09-1.11 ms, znver3 code, one core)
    groups = nt // tiles if th * tw <= SMALL_IMAGE else 1
    ph, pw = 2 * th + 2, 2 * tw + 2
    pv = tir.const(pad_value, "int16")

    def fpad(b, c, y, x, i):
        inside = tir.all(y >= pt, y < pt + h, x >= pl, x < pl + w)
        return tir.if_then_else(inside, data[b, c, y - pt, x - pl, i].astype("int16"), pv)
    padded = te.compute((n, cc, ph, pw, ib), fpad, name="data_pad_wino", tag="int8_pad")

    def fv(b, g, e, cb, tp, ci):
        t = g * tiles + tp
        y, x = (t // tw) * 2, (t % tw) * 2
        d = [[padded[b, cb, y + i, x + j, ci] for j in range(4)] for i in range(4)]
        cases = []
        for e1 in range(4):
            rows = [_terms(BT[e1], [d[i][j] for i in range(4)]) for j in range(4)]
            for e2 in range(4):
                cases.append(_terms(BT[e2], rows))
        return _select(e, cases)

    # V group-major: (batch, tile group, frequency, channel block, tile, channel): a task's product
    # reads one contiguous block (the channel loop walks lines in order) where V[e, c, t] strided by
    # all the tiles per channel block (64@56 1.09-1.15 -> 0.88 ms, 128@28 0.90 -> 0.79, 256@14
    # 0.87 -> 0.79, 512@7 unchanged; znver3 code, one Sapphire Rapids core)
    v = te.compute((n, nt // tiles, 16, cc, tiles, ib), fv, name="winograd_int16_input",
                   tag="int8_winograd_input")
    rco = te.reduce_axis((0, cc), name="rco")
    rcq = te.reduce_axis((0, icq), name="rcq")
    rp = te.reduce_axis((0, 2), name="rp")
    r2 = te.reduce_axis((0, 2), name="r2")
    m = te.compute((n, 16, kb, nt, lanes),
                   lambda b, e, o, t, l: te.sum(v[b, t // tiles, e, rco, t % tiles, rcq * 4 + rp * 2 + r2]
                                                .astype("int32") * u[o, e, rco, rcq, rp, l, r2].astype("int32"),
                                                axis=[rco, rcq, rp, r2]),
                   name="winograd_int16_product", tag=PRODUCT_TAG,
                   attrs={"lanes": lanes, "tiles": tiles, "blocks": blocks, "groups": groups})

    # A^T M4 A sums 9 of the M4 (|M4| <= C * V_MAX * U_MAX): in int32 where that cannot overflow
    # (C < 202), else in int64 (the result, 4x the conv's int32 sum, always fits)
    wide = "int32" if 9 * cc * ib * V_MAX * U_MAX < 2 ** 31 else "int64"

    def fout(b, o, y, x, l):
        t = (y // 2) * tw + x // 2
        cases = []
        for a in range(2):
            for c2 in range(2):
                total = _terms([AT[a][e1] * AT[c2][e2] for e1 in range(4) for e2 in range(4)],
                               [m[b, e, o, t, l].astype(wide) for e in range(16)])
                cases.append((total >> tir.const(2, wide)).astype("int32"))
        return _select((y % 2) * 2 + x % 2, cases)

    return te.compute((n, kb, oh, ow, lanes), fout, name="conv2d_int8_winograd", tag=OUTPUT_TAG)


_PMADDWD = {16: "llvm.x86.avx512.pmaddw.d.512", 8: "llvm.x86.avx2.pmadd.wd", 4: "llvm.x86.sse2.pmadd.wd"}


def pair_intrin(lanes: int):
    """``c[l] += a[0] * b[l, 0] + a[1] * b[l, 1]`` on int16: one ``vpmaddwd`` of the data pair (a
    32-bit broadcast) and the weights' vector, one add. The product's unit (x86/int8_intrin.py's
    4-channel pmaddwd dot is two of them): with the pair loop outside the tiles and blocks only
    one weight vector per block is live in the register tile."""
    from kiln.ir import expr as E
    from kiln.ir.dtype import dtype
    from kiln.ir.stmt import decl_buffer

    a = te.placeholder((2,), "int16", name="a")
    b = te.placeholder((lanes, 2), "int16", name="b")
    k = te.reduce_axis((0, 2), name="k")
    c = te.compute((lanes,), lambda i: te.sum(a[k].astype("int32") * b[i, k].astype("int32"), axis=k), name="c")
    binds = {t: decl_buffer(t.shape, t.dtype, name=t.name.upper(), offset_factor=1) for t in (a, b, c)}
    acc, halves = dtype(f"int32x{lanes}"), f"int16x{2 * lanes}"

    def fintrin(ins, outs):
        (a_buf, b_buf), (c_buf,) = ins, outs
        pair = tir.reinterpret(halves, E.Broadcast(tir.reinterpret("int32", a_buf.vload((0,), "int16x2")), lanes, acc))
        prod = E.Call(acc, "tir.call_llvm_pure_intrin", (E.StringImm(_PMADDWD[lanes]), pair,
                                                          b_buf.vload((0, 0), halves)))
        zero = E.Broadcast(E.const(0, "int32"), lanes, acc)
        return (c_buf.vstore((0,), prod), c_buf.vstore((0,), zero),
                c_buf.vstore((0,), c_buf.vload((0,), f"int32x{lanes}") + prod))

    return te.decl_tensor_intrin(c.op, fintrin, name=f"x86_int16_pair_{lanes}", binds=binds)


def schedule_conv2d_int8_winograd(outs, cfg=None):
    """Output tasks of ``tiles`` consecutive 2x2 tiles (row-major over the image, across tile rows)
    x ``blocks`` output blocks, in parallel; in each, per frequency, the product's register tile
    (tiles x blocks accumulators of L lanes) over the channels, one data pair broadcast per tile
    feeding every block, then A^T M A and the requantize epilogue for those tiles. The input
    transform is one parallel pass before, in tile groups (each group's V contiguous)."""
    del cfg
    s, out, m = epilogue_schedule(outs, PRODUCT_TAG)
    tiles, blocks = m.op.attrs["tiles"], m.op.attrs["blocks"]
    n, kb, y, x, kk = s[out].op.axis
    kbo, kbi = s[out].split(kb, factor=blocks)
    yo, yi = s[out].split(y, factor=2)
    xt, xi = s[out].split(x, factor=2)
    s[out].reorder(n, kbo, yo, xt, kbi, yi, xi, kk)
    per_task = m.op.attrs["groups"]
    group, tile = s[out].split(s[out].fuse(yo, xt), factor=tiles * per_task)
    s[out].reorder(n, kbo, group, kbi, tile, yi, xi, kk)
    task = s[out].fuse(n, kbo, group)
    s[out].parallel(task)
    s[out].unroll(yi)
    s[out].unroll(xi)
    s[out].vectorize(kk)
    s[m].compute_at(s[out], task)
    mm = s.cache_write(m, "local")
    _, e, mkb, mtt, mk = s[m].op.axis
    s[m].vectorize(mk)
    if per_task > 1:
        mto, mti = s[m].split(mtt, factor=tiles)
        s[m].reorder(e, mto, mkb, mti, mk)
        s[mm].compute_at(s[m], mto)
    else:
        s[mm].compute_at(s[m], e)
    _, _, mb, mt, mkk = s[mm].op.axis
    rco, rcq, rp, r2 = s[mm].op.reduce_axis
    s[mm].reorder(rco, rcq, rp, mt, mb, mkk, r2)
    # the channel-block loop unrolled by up to 8 (a divisor of it): 64@56 (8 blocks: the whole
    # loop of a frequency) 0.86 -> 0.82 ms and 1.37 -> 1.27 (loaded), the others within the noise
    # (0-2%; znver3 code, one core, both builds in one process in turns)
    unroll = max(d for d in range(1, 9) if int(rco.dom.extent) % d == 0)
    _, rci = s[mm].split(rco, factor=unroll)
    for axis in (rci, rp, mt, mb):
        s[mm].unroll(axis)
    s[mm].tensorize(mkk, pair_intrin(int(m.op.attrs["lanes"])))
    v = m.op.input_tensors[0]  # the input transform: one parallel pass over the tile groups
    vb, vg, ve, vcb, vt, vci = s[v].op.axis
    s[v].reorder(vb, vg, vcb, vt, ve, vci)
    s[v].unroll(ve)
    s[v].vectorize(vci)
    s[v].parallel(s[v].fuse(vb, vg))
    s[v.op.input_tensors[0]].compute_inline()
    return s


__all__ = ["applies", "pack_weight", "unpack_weight", "register_tile", "conv2d_int8_winograd_acc",
           "schedule_conv2d_int8_winograd"]
