"""x86 int8 conv2d and dense: u8 data x s8 weights -> s32 through the CPU's 8-bit dot product,
with qnn.requantize (bias, per-channel fixed-point multiplier, zero point, clamp) as the epilogue
of the register tile, so the int32 accumulators never reach memory.

Layouts: data ``NCHW[ib]c`` uint8 (ib a multiple of 4), weights packed at build time by
kiln/topi/int8_pack.py (``(O/L, C/ib, KH, KW, ib/4, L, 4)``), output ``NCHW[L]c`` in the output
dtype; L, the output block, is the vector's int32 lanes (16 zmm, 8 ymm, 4 xmm).

Tiers (``int8_tier``), from LLVM's view of the target (kiln/target/cpu_facts.py): ``vnni``
(``vpdpbusd``; zmm with AVX-512 VNNI, ymm with AVX-VNNI), else ``pmaddubsw`` (AVX2 / AVX-512BW)
where the weights make it exact, else ``pmaddwd`` (16-bit weights, always exact), or both in one
kernel where only some units fit (``conv2d_int8_mixed_acc``). The reduction over 4 input channels
x L output lanes is one tensor intrinsic (x86/int8_intrin.py).

Requantize (UPWARD / TONEAREST rounding, as qnn.requantize): ``acc + bias`` in int64, times the
multiplier q, plus half, arithmetic shift right by s, plus the output zero point, clamped; the
same integers as kiln/relay/qnn/fixed_point.py. ``FLOAT32`` (onnxruntime's) and ``GEMM``
(TFLite's two roundings) are in ``requantize_epilogue``.
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.errors import CompileError

from .conv2d import find_tagged
from .int8_intrin import dot_intrin

CONV_TAG = "conv2d_int8_acc"
DEPTHWISE_TAG = "depthwise_int8_acc"
DENSE_TAG = "dense_int8_acc"
REQUANT_TAG = "int8_requantize"
MIXED_TAG = "conv2d_int8_mixed_acc"
MIXED_PART_TAG = "conv2d_int8_mixed_part"


def int8_tier(target=None) -> tuple[str, int] | None:
    """(tier, widest lanes) of x86 ``target`` (default: the current one), None without AVX2."""
    from kiln.target.cpu_facts import cpu_facts

    facts = cpu_facts(target)
    if "avx512vnni" in facts.features:
        return "vnni", 16
    if "avxvnni" in facts.features:
        return "vnni", 8
    if "avx512bw" in facts.features:
        return "pmaddubsw", 16
    if "avx2" in facts.features:
        return "pmaddubsw", 8
    return None


def block_for(channels: int, lanes: int) -> int:
    """The widest of lanes, lanes/2, ... (down to 4) that divides ``channels``; 0 if none."""
    b = lanes
    while b >= 4:
        if channels % b == 0:
            return b
        b //= 2
    return 0


# -- compute -------------------------------------------------------------------------------------

def conv2d_int8_acc(data, kernel, strides, padding, dilation, pad_value: int, tier: str, tile_ow=None,
                    oc_chunks=None):
    """int32 NCHW[L]c accumulators of a u8 NCHW[ib]c data and a packed kernel (module doc);
    ``tile_ow``: the register tile's pixels (a tuning knob; default ``default_tile_ow``)."""
    n, cc, h, w, ib = (int(d) for d in data.shape)
    if tier == "pmaddwd":
        occ, kcc, kh, kw, icq, _, lanes, _ = (int(d) for d in kernel.shape)
    else:
        occ, kcc, kh, kw, icq, lanes, _ = (int(d) for d in kernel.shape)
    if kcc != cc or icq * 4 != ib:
        raise CompileError(f"conv2d_int8: kernel {tuple(kernel.shape)} does not match data {tuple(data.shape)}")
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if tier == "pmaddwd":
        padded, (sh, sw) = _int16_input(data, (kh, kw), (sh, sw), padding, pad_value, oh, ow)
    else:
        padded = _padded(data, padding, pad_value)
    rco = te.reduce_axis((0, cc), name="rco")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rcq = te.reduce_axis((0, icq), name="rcq")
    if tier == "pmaddwd":
        rp = te.reduce_axis((0, 2), name="rp")
        r2 = te.reduce_axis((0, 2), name="r2")

        def fconv(b, o, y, x, l):
            a = padded[b, rco, y * sh + ry * dh, x * sw + rx * dw, rcq * 4 + rp * 2 + r2]
            return te.sum(a.astype("int32") * kernel[o, rco, ry, rx, rcq, rp, l, r2].astype("int32"),
                          axis=[rco, ry, rx, rcq, rp, r2])
    else:
        r4 = te.reduce_axis((0, 4), name="r4")

        def fconv(b, o, y, x, l):
            a = padded[b, rco, y * sh + ry * dh, x * sw + rx * dw, rcq * 4 + r4]
            return te.sum(a.astype("int32") * kernel[o, rco, ry, rx, rcq, l, r4].astype("int32"),
                          axis=[rco, ry, rx, rcq, r4])
    return te.compute((n, occ, oh, ow, lanes), fconv, name="conv2d_int8", tag=CONV_TAG,
                      attrs={"tier": tier, "lanes": lanes, "dtypes": (str(data.dtype), str(kernel.dtype)),
                             "tile": int(tile_ow or default_tile_ow(ow, lanes, tier, occ)),
                             "chunks": int(oc_chunks or default_chunks(occ, tier, ow, lanes))})


def _strided_1x1(kernel_size, strides, padding) -> bool:
    return tuple(kernel_size) == (1, 1) and not any(padding) and tuple(strides) != (1, 1)


def _int16_input(data, kernel_size, strides, padding, pad_value: int, oh: int, ow: int):
    """(the data widened to int16 for vpmaddwd, the strides to read it with). A strided 1x1 conv
    reads every sh-th row and sw-th column: only those are widened (the whole input is 4x the
    pixels at stride 2), then read with stride 1."""
    if not _strided_1x1(kernel_size, strides, padding):
        return _padded(data, padding, pad_value, "int16"), tuple(strides)
    n, cc, _, _, ib = (int(d) for d in data.shape)
    sh, sw = strides
    widened = te.compute((n, cc, oh, ow, ib), lambda b, c, y, x, i: data[b, c, y * sh, x * sw, i].astype("int16"),
                         name="data_pad_int8", tag="int8_pad")
    return widened, (1, 1)


def mixed_table(units, data_shape, kernel_size, strides, padding, dilation) -> np.ndarray:
    """``plan_mixed_conv_weight``'s unit table ``(O/L, n, 4)`` (input block, ky, kx, 4 * quad) with
    two more columns: each unit's element offset in the padded u8 data and in the int16 data
    (``conv2d_int8_mixed_acc``), from pixel (0, 0) of input block 0; one load per unit then."""
    n, cc, h, w, ib = (int(d) for d in data_shape)
    pt, pl, pb, pr = padding
    hp, wp = h + pt + pb, w + pl + pr
    cb, ky, kx, q4 = (units[..., i].astype(np.int64) for i in range(4))
    off8 = ((cb * hp + ky * dilation[0]) * wp + kx * dilation[1]) * ib + q4
    if _strided_1x1(kernel_size, strides, padding):  # the int16 copy holds only the pixels read
        kh, kw = kernel_size
        oh = (h - kh) // strides[0] + 1
        ow = (w - kw) // strides[1] + 1
        off16 = cb * oh * ow * ib + q4
    else:
        off16 = off8
    if max(int(off8.max(initial=0)), int(off16.max(initial=0))) >= 1 << 31:
        raise CompileError(f"conv2d_int8_mixed: data {tuple(data_shape)} too large for 32-bit offsets")
    return np.ascontiguousarray(np.concatenate([units, off8[..., None], off16[..., None]], -1).astype(np.int32))


def tuning_mixed_table(blocks: int, data_shape, kernel_size, strides, padding, dilation) -> np.ndarray:
    """A ``mixed_table`` for tuning the mixed conv of these shapes without its weights: every
    block's units in the reduction's order (``(C/ib, KH, KW, ib/4)``). A task stands for every conv
    of its workload (weights differ, so do their tables' orders); each row holds both offsets of
    its unit, so any row is in bounds on either path, and the kernel loads the same set of offsets
    per block as with the weights' own table (autotvm/templates/int8_cpu.py)."""
    _, cc, _, _, ib = (int(d) for d in data_shape)
    kh, kw = kernel_size
    n = cc * kh * kw * (ib // 4)
    cb, ky, kx, q = np.unravel_index(np.arange(n), (cc, kh, kw, ib // 4))
    units = np.broadcast_to(np.stack([cb, ky, kx, 4 * q], -1).astype(np.int32), (blocks, n, 4))
    return mixed_table(units, data_shape, kernel_size, strides, padding, dilation)


def conv2d_int8_mixed_acc(data, weight, weight16, table, kernel_size, strides, padding, dilation, pad_value: int,
                          tile_ow=None, oc_chunks=None):
    """int32 NCHW[L]c accumulators of the mixed AVX2 / AVX-512BW conv: each output block's units
    (4 input channels at one tap) that fit ``vpmaddubsw`` on it, the others on ``vpmaddwd``
    (int16 weights, the data widened as for the 16-bit tier); ``table[block, unit]`` is
    ``mixed_table``'s row of a unit, the ``vpmaddubsw`` units first
    (kiln/topi/int8_pack.py ``plan_mixed_conv_weight``). A unit's data is read at its offset from
    the tile's pixel (the last index runs past the block: the offset counts elements of the whole
    image), one table load per unit. Two accumulator stages over the same register tile, summed in
    the epilogue: the same integers as one sum."""
    n, cc, h, w, ib = (int(d) for d in data.shape)
    occ, ns, lanes, _ = (int(d) for d in weight.shape)
    nr = int(weight16.shape[1])
    kh, kw = kernel_size
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if tuple(int(d) for d in table.shape) != (occ, ns + nr, 6) or (ns + nr) * 4 != cc * ib * kh * kw:
        raise CompileError(f"conv2d_int8_mixed: weights {tuple(weight.shape)} + {tuple(weight16.shape)} and table "
                           f"{tuple(table.shape)} do not cover data {tuple(data.shape)} with a {kh}x{kw} kernel")
    p8 = _padded(data, padding, pad_value)
    p16, s16 = _int16_input(data, kernel_size, strides, padding, pad_value, oh, ow)
    u = te.reduce_axis((0, ns), name="u")
    r4 = te.reduce_axis((0, 4), name="r4")
    acc8 = te.compute((n, occ, oh, ow, lanes), lambda b, o, y, x, l: te.sum(
        p8[b, 0, y * sh, x * sw, table[o, u, 4] + r4].astype("int32") * weight[o, u, l, r4].astype("int32"),
        axis=[u, r4]), name="conv2d_int8_u8", tag=MIXED_PART_TAG, attrs={"tier": "pmaddubsw", "lanes": lanes})
    v = te.reduce_axis((0, nr), name="v")
    rp = te.reduce_axis((0, 2), name="rp")
    r2 = te.reduce_axis((0, 2), name="r2")
    acc16 = te.compute((n, occ, oh, ow, lanes), lambda b, o, y, x, l: te.sum(
        p16[b, 0, y * s16[0], x * s16[1], table[o, ns + v, 5] + rp * 2 + r2].astype("int32")
        * weight16[o, v, rp, l, r2].astype("int32"), axis=[v, rp, r2]),
        name="conv2d_int8_s16", tag=MIXED_PART_TAG, attrs={"tier": "pmaddwd", "lanes": lanes})
    tile, chunks = register_tile(ow, occ, "pmaddwd", lanes)
    return te.compute((n, occ, oh, ow, lanes), lambda *i: acc8(*i) + acc16(*i), name="conv2d_int8_mixed",
                      tag=MIXED_TAG, attrs={"tier": "mixed", "lanes": lanes, "tile": int(tile_ow or tile),
                                            "chunks": int(oc_chunks or chunks)})


def default_tile_ow(width: int, lanes: int, tier: str | None = None, blocks: int | None = None) -> int:
    """The untuned register tile: the widest divisor of the row up to 8 pixels (zmm: 8 accumulators
    of 32 registers) or 6 (ymm/xmm: 16 registers); the AVX2 / AVX-512BW tiers (given ``tier`` and
    ``blocks``) take the tile of ``register_tile``."""
    if tier in _REGISTER_MODEL and blocks is not None:
        return register_tile(width, blocks, tier, lanes)[0]
    return tile_width(width, 8 if lanes >= 16 else 6)


def default_chunks(blocks: int, tier: str, width: int | None = None, lanes: int | None = None) -> int:
    """Output blocks per register tile, untuned: 2 for vpdpbusd and the 16-bit vpmaddwd path (each
    broadcast of data then feeds two products; 2 x 8 accumulators fit 32 zmm), else 1 (the
    vpmaddubsw sequence needs its own temporaries); the AVX2 / AVX-512BW tiers (given ``width``
    and ``lanes``) take the chunks of ``register_tile``."""
    if tier in _REGISTER_MODEL and width is not None and lanes is not None:
        return register_tile(width, blocks, tier, lanes)[1]
    return 2 if tier in ("vnni", "pmaddwd") and blocks % 2 == 0 else 1


# vector registers a tile needs besides its accumulators: (per output block, fixed). pmaddwd: two
# int16 weight vectors per block, a broadcast and a product; pmaddubsw: one weight vector per
# block, the broadcast, the pair sums and the ones of vpmaddwd.
_REGISTER_MODEL = {"pmaddwd": (2, 2), "pmaddubsw": (1, 3)}


def register_tile(width: int, blocks: int, tier: str, lanes: int) -> tuple[int, int]:
    """(pixels, output blocks) of the untuned tile of a 16-bit or vpmaddubsw conv: the most
    accumulators that fit the register file (16 ymm / 32 zmm) with the tile's weights and
    temporaries, pixels dividing the row; ties go to 2 blocks (fewer broadcasts per product).
    A 7- or 14-pixel row then takes 7 pixels x 1 block (7 accumulators), not 1 or 2 x 2."""
    per_block, fixed = _REGISTER_MODEL[tier]
    regs = 32 if lanes >= 16 else 16
    best = (0, 0, 1, 1)
    for chunks in ((1, 2) if blocks % 2 == 0 else (1,)):
        for tile in tile_candidates(width, 16):
            if tile * chunks + per_block * chunks + fixed <= regs:
                best = max(best, (tile * chunks, chunks, tile, chunks))
    return best[2], best[3]


def tile_candidates(width: int, most: int = 16) -> list:
    """Every register tile of a row (divisors of its width up to ``most``): the tuning space."""
    return [t for t in range(1, min(most, width) + 1) if width % t == 0]


def depthwise_int8_acc(data, kernel, strides, padding, dilation, pad_value: int, tile_ow=None):
    """int32 NCHW[b]c accumulators of a depthwise conv: u8 NCHW[b]c data, s8 (C/b, KH, KW, b) kernel.

    No dot-product instruction fits (each channel sums only its own taps): the lanes are the
    channels, widened to int32 and multiplied (``vpmovzxbd``/``vpmovsxbd``; LLVM turns the product
    of values that fit 16 bits into ``vpmaddwd`` with zero high halves)."""
    n, cc, h, w, b = (int(d) for d in data.shape)
    kc, kh, kw, kb = (int(d) for d in kernel.shape)
    if (kc, kb) != (cc, b):
        raise CompileError(f"depthwise_int8: kernel {tuple(kernel.shape)} does not match data {tuple(data.shape)}")
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    padded = _padded(data, padding, pad_value)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (n, cc, oh, ow, b),
        lambda i, c, y, x, l: te.sum(padded[i, c, y * sh + ry * dh, x * sw + rx * dw, l].astype("int32")
                                     * kernel[c, ry, rx, l].astype("int32"), axis=[ry, rx]),
        name="depthwise_int8", tag=DEPTHWISE_TAG, attrs={"lanes": b, "tile": int(tile_ow or tile_width(ow, 8))})


def padded_input(data, padding, pad_value: int):
    """``data`` (u8 NCHW[ib]c) padded with ``pad_value`` (the zero point: real zero)."""
    return _padded(data, padding, pad_value)


def _padded(data, padding, pad_value: int, widen=None):
    """``data`` padded with ``pad_value``; ``widen``: as that dtype (the 16-bit path's int16)."""
    n, cc, h, w, ib = (int(d) for d in data.shape)
    pt, pl, pb, pr = padding
    if not any((pt, pl, pb, pr)) and widen is None:
        return data
    dt = widen or str(data.dtype)
    pv = tir.const(pad_value, dt)

    def fpad(b, c, y, x, i):
        inside = tir.all(y >= pt, y < pt + h, x >= pl, x < pl + w)
        value = data[b, c, y - pt, x - pl, i]
        return tir.if_then_else(inside, value.astype(dt) if widen else value, pv)
    return te.compute((n, cc, h + pt + pb, w + pl + pr, ib), fpad, name="data_pad_int8", tag="int8_pad")


def dense_int8_acc(data, kernel, tier: str, tile_m=None):
    """int32 (M, N) accumulators of u8 data (M, K) and a packed kernel (N/L, K/4, L, 4)."""
    m, k = (int(d) for d in data.shape)
    if tier == "pmaddwd":
        nc, kq, _, lanes, _ = (int(d) for d in kernel.shape)
    else:
        nc, kq, lanes, _ = (int(d) for d in kernel.shape)
    if kq * 4 != k:
        raise CompileError(f"dense_int8: kernel {tuple(kernel.shape)} does not match data {tuple(data.shape)}")
    rq = te.reduce_axis((0, kq), name="rq")
    if tier == "pmaddwd":  # the 16-bit path reads int16 data (one widening pass, as the conv's padding)
        narrow = data
        data = te.compute((m, k), lambda i, j: narrow[i, j].astype("int16"), name="dense_int16", tag="int8_widen")
        rp = te.reduce_axis((0, 2), name="rp")
        r2 = te.reduce_axis((0, 2), name="r2")

        def fdense(i, o, l):
            return te.sum(data[i, rq * 4 + rp * 2 + r2].astype("int32") * kernel[o, rq, rp, l, r2].astype("int32"),
                          axis=[rq, rp, r2])
    else:
        r4 = te.reduce_axis((0, 4), name="r4")

        def fdense(i, o, l):
            return te.sum(data[i, rq * 4 + r4].astype("int32") * kernel[o, rq, l, r4].astype("int32"),
                          axis=[rq, r4])
    return te.compute((m, nc, lanes), fdense, name="dense_int8", tag=DENSE_TAG,
                      attrs={"tier": tier, "lanes": lanes, "dtypes": (str(data.dtype), str(kernel.dtype)),
                             "tile": int(tile_m or tile_width(m, 4))})


def requantize_epilogue(acc, bias, mult, shift, out_zp: int, lo: int, hi: int, out_dtype: str,
                        rounding: str = "UPWARD", out_shape=None, index=None, float_clamp: bool = True):
    """``clamp(((acc + bias) * q + half) >> s + zp)`` per output channel, as ``out_dtype``; with
    ``rounding="FLOAT32"`` ``mult`` is float32 and ``clamp(round(float32(acc + bias) * m) + zp)``;
    ``float_clamp=False`` where the caller knows ``|round(...)| < 2**30`` (no float clamp before
    the int32 conversion: the int32 clamp and the narrowing become saturating packs).
    ``rounding="GEMM"``: TFLite's optimized conv / fully connected rescale of a multiplier
    ``q * 2**-shift`` below 1: ``high = (x * q + 2**30) >> 31``, then ``(high + 2**(k-1)) >> k``
    with ``k = shift - 31``, two roundings half up; the caller makes sure ``|high| < 2**30``.
    ``UPWARD_SPLIT`` / ``TONEAREST_SPLIT``: UPWARD / TONEAREST's integers computed the same way
    where every shift is 31..61 and ``|x| < 2**30``: ``floor((p + 2**(s-1)) / 2**s)`` equals
    ``floor((floor(p / 2**31) + 2**(k-1)) / 2**k)`` for ``k >= 1`` (adding a fraction below one
    to an integer cannot cross a multiple of ``2**k``), so only the first shift is 64-bit and it
    is a constant (TONEAREST's ``p`` is one less for negative ``x``); AVX2 has neither a 64-bit
    arithmetic shift nor a 64-bit multiply (a 64 -> 256 channel 1x1 conv at 56x56, UPWARD: 1.33-1.44
    -> 0.97 ms with haswell code, 0.30 -> 0.27 ms with AVX-512; FLOAT32 0.83 / 0.21 ms).

    ``bias``/``mult``/``shift``: 1-D tensors over the channels (int32, int64, int64); ``index``
    maps an output index to (accumulator index, channel); default: blocked NCHW[L]c. A FLOAT32
    requantize to 8 or 16 bits also records its value as an exact float32 (``requantized_float``)
    in the op's ``float_value`` attribute, (output axes, expression), for ``float_operand``."""
    lanes = int(acc.shape[-1])
    shape = tuple(int(d) for d in (out_shape or acc.shape))
    if index is None:
        def index(*i):
            return i, i[1] * lanes + i[-1]

    forms = []

    def f(*i):
        at, ch = index(*i)
        if rounding == "FLOAT32" and max(abs(lo), abs(hi), abs(lo - out_zp), abs(hi - out_zp)) < 1 << 22:
            forms.append((i, requantized_float(acc[at], bias[ch], mult[ch], out_zp, lo, hi)))
        return requantize_value(acc[at], bias[ch], mult[ch], shift[ch], out_zp, lo, hi, out_dtype, rounding,
                                float_clamp)
    out = te.compute(shape, f, name="requantize_int8", tag=REQUANT_TAG)
    if forms:  # read by a fused consumer that wants the value as a float (float_operand)
        out.op.attrs["float_value"] = forms[0]
    return out


def requantize_value(x, bias, mult, shift, out_zp: int, lo: int, hi: int, out_dtype: str,
                     rounding: str = "UPWARD", float_clamp: bool = True):
    """One output of ``requantize_epilogue``: ``x`` the int32 sum, ``bias``/``mult``/``shift`` its
    channel's (int32, int64 or float32, int64) values; the AMX kernel applies it to the sums of
    each tile (amx_int8.py), the other kernels through ``requantize_epilogue``."""
    if rounding == "FLOAT32":  # onnxruntime's: float32(acc + bias) * m (float32), half to even
        y = (x + bias).astype("float32") * mult
        if float_clamp:  # before the rounding: round(clamp(y)) == clamp(round(y)) for integer bounds,
            y = clamp_float(y, lo - out_zp, hi - out_zp)  # and int32(round(y)) stays one cvtps2dq with AVX
        y = tir.round(y).astype("int32") + tir.const(out_zp, "int32")
        return tir.min(tir.max(y, tir.const(lo, "int32")), tir.const(hi, "int32")).astype(out_dtype)

    if rounding in ("GEMM", "UPWARD_SPLIT", "TONEAREST_SPLIT"):  # a 64-bit product shifted by 31, then 32 bits
        x = (x + bias).astype("int64")
        q = mult.astype("int32").astype("int64")  # q < 2**31: a sign-extended 32-bit product
        k = (shift - tir.const(31, "int64")).astype("int32")
        p = x * q
        if rounding == "GEMM":  # TFLite: round half up at 2**31, then again at 2**k
            p = p + tir.const(1 << 30, "int64")
        else:  # one rounding at 2**(31 + k): half up at 2**31 where k = 0, else floor there
            p = p + tir.Select(k == tir.const(0, "int32"), tir.const(1 << 30, "int64"), tir.const(0, "int64"))
            if rounding == "TONEAREST_SPLIT":
                p = p - (x < tir.const(0, "int64")).astype("int64")
        high = (p >> tir.const(31, "int64")).astype("int32")
        half = (tir.const(1, "int32") << k) >> tir.const(1, "int32")
        y = ((high + half) >> k) + tir.const(out_zp, "int32")
        return tir.min(tir.max(y, tir.const(lo, "int32")), tir.const(hi, "int32")).astype(out_dtype)

    x = (x + bias).astype("int64")
    p = x * mult + (tir.const(1, "int64") << (shift - 1))
    if rounding == "TONEAREST":
        p = p - (x < 0).astype("int64")
    y = (p >> shift) + tir.const(out_zp, "int64")
    y = tir.min(tir.max(y, tir.const(lo, "int64")), tir.const(hi, "int64"))
    return y.astype(out_dtype)


def requantized_float(x, bias, mult, out_zp: int, lo: int, hi: int):
    """``requantize_value``'s FLOAT32 output as a float32 (an integer in [lo, hi], exact): what a
    fused float consumer (``nn.contrib_qlinear_add``) reads instead of converting the narrowed
    bytes back (pack, add the zero point, widen, convert: about 8 uops a vector). The clamp comes
    before the rounding: rounding is monotone and keeps the integers ``lo - zp``, ``hi - zp``, so
    ``round(clamp(v)) == clamp(round(v))``; every bound below ``2**22`` in magnitude (8- and
    16-bit outputs; the caller checks) keeps the float add of the zero point exact."""
    y = clamp_float((x + bias).astype("float32") * mult, lo - out_zp, hi - out_zp)
    return tir.round(y) + tir.const(float(out_zp), "float32")


def float_operand(t, idx):
    """``t[idx]`` as float32, read from the float form of ``t``'s requantize where it has one."""
    form = getattr(t.op, "attrs", {}).get("float_value")
    if form is None:
        return t(*idx).astype("float32")
    from kiln.ir.functor import substitute

    axes, value = form
    return substitute(value, dict(zip(axes, idx)))


def clamp_float(y, lo, hi):
    """``y`` clamped to [lo, hi] as comparisons and selects: one vmaxps/vminps each (tir.max/min
    are NaN-propagating, a compare and a blend more on x86); the result converts to an integer
    without overflow. Not NaN-safe, which a product of finite numbers does not need."""
    lo, hi = tir.const(lo, y.dtype), tir.const(hi, y.dtype)
    y = tir.Select(y < lo, lo, y)
    return tir.Select(y > hi, hi, y)


# -- schedules -----------------------------------------------------------------------------------

def _inline_between(s, out, stop):
    """Inline every compute stage strictly between ``out`` and ``stop`` (the fused epilogue)."""
    stack, seen = list(out.op.input_tensors), set()
    while stack:
        t = stack.pop()
        if t.op is stop.op or id(t.op) in seen or not isinstance(t.op, te.ComputeOp):
            continue
        seen.add(id(t.op))
        if t.op.reduce_axis:
            continue
        s[t].compute_inline()
        stack.extend(t.op.input_tensors)


def epilogue_schedule(outs, tag: str):
    """(schedule, first output, its stage tagged ``tag``) of an int8 kernel's outputs, every
    elementwise stage between the two (the requantize epilogue and what is fused after it) inlined
    into the output: the prologue of each int8 schedule (conv, depthwise, dense, AMX, Winograd,
    batch_matmul)."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    acc = find_tagged(out, tag)
    _inline_between(s, out, acc)
    return s, out, acc


def tile_width(width: int, most: int = 8) -> int:
    """The widest register tile of pixels (at most ``most``) that divides ``width``."""
    return next(t for t in range(min(most, width), 0, -1) if width % t == 0)


def _output_tile(s, out, tile: int, chunks: int):
    """The output's register tile (``tile`` pixels of a row x ``chunks`` blocks x a block's
    vector), rows of blocks run in parallel; returns the axis the accumulators are computed at."""
    n, c, y, x, b = s[out].op.axis
    xo, xi = s[out].split(x, factor=tile)
    if chunks > 1:  # the tile spans `chunks` output blocks: each data broadcast feeds all of them
        c, ci = s[out].split(c, factor=chunks)
        s[out].reorder(n, c, y, xo, ci, xi, b)
        s[out].unroll(ci)
    else:
        s[out].reorder(n, c, y, xo, xi, b)
    s[out].vectorize(b)
    s[out].unroll(xi)
    s[out].parallel(s[out].fuse(n, c, y))
    return xo


def schedule_conv2d_int8(outs, cfg=None):
    """Schedule of an int8 conv (accumulators, requantize, any fused elementwise ops)."""
    s, out, acc = epilogue_schedule(outs, CONV_TAG)
    tier, chunks = acc.op.attrs["tier"], acc.op.attrs.get("chunks", 1)
    s[acc].compute_at(s[out], _output_tile(s, out, acc.op.attrs["tile"], chunks))
    an, ac, ay, ax, ab = s[acc].op.axis
    red = s[acc].op.reduce_axis
    rco, ry, rx, rcq, *inner = red
    if chunks > 1 and tier != "neon":
        s[acc].reorder(an, ay, rco, ry, rx, rcq, ax, ac, ab, *inner)
        s[acc].unroll(ax)
        s[acc].unroll(ac)
        s[acc].tensorize(ab, intrin_for(acc))
    elif tier == "neon":  # no dot product: int32 lanes, LLVM widens and multiplies
        s[acc].reorder(an, ac, ay, rco, ry, rx, rcq, ax, *inner, ab)
        s[acc].unroll(ax)
        for r in inner:
            s[acc].unroll(r)
        s[acc].vectorize(ab)
    else:
        s[acc].reorder(an, ac, ay, rco, ry, rx, rcq, ax, ab, *inner)
        s[acc].unroll(ax)
        s[acc].tensorize(ab, intrin_for(acc))
    schedule_pad(s, acc)
    return s


def schedule_conv2d_int8_mixed(outs, cfg=None):
    """Schedule of the mixed conv (``conv2d_int8_mixed_acc``): the tile of ``schedule_conv2d_int8``,
    both accumulator stages computed there (the vpmaddubsw units, then the vpmaddwd ones)."""
    s, out, acc = epilogue_schedule(outs, MIXED_TAG)
    chunks = acc.op.attrs.get("chunks", 1)
    s[acc].compute_inline()
    xo = _output_tile(s, out, acc.op.attrs["tile"], chunks)
    for part in acc.op.input_tensors:
        s[part].compute_at(s[out], xo)
        an, ac, ay, ax, ab = s[part].op.axis
        red, *inner = s[part].op.reduce_axis
        if chunks > 1:
            s[part].reorder(an, ay, red, ax, ac, ab, *inner)
            s[part].unroll(ac)
        else:
            s[part].reorder(an, ac, ay, red, ax, ab, *inner)
        s[part].unroll(ax)
        s[part].tensorize(ab, dot_intrin(part.op.attrs["tier"], part.op.attrs["lanes"]))
        schedule_pad(s, part)
    return s


def intrin_for(acc):
    """The dot-product intrinsic of an accumulator stage's tier (x86 or AArch64)."""
    tier, lanes = acc.op.attrs["tier"], acc.op.attrs["lanes"]
    if tier == "sdot":
        from ..arm_cpu.int8_intrin import dot_intrin as arm_dot
        return arm_dot(*acc.op.attrs["dtypes"])
    return dot_intrin(tier, lanes)


def schedule_depthwise_int8(outs, cfg=None):
    """Schedule of an int8 depthwise conv: a tile of pixels x one channel vector in registers."""
    s, out, acc = epilogue_schedule(outs, DEPTHWISE_TAG)
    n, c, y, x, b = s[out].op.axis
    xo, xi = s[out].split(x, factor=acc.op.attrs["tile"])
    s[out].reorder(n, c, y, xo, xi, b)
    s[out].vectorize(b)
    s[out].unroll(xi)
    s[out].parallel(s[out].fuse(n, c, y))
    s[acc].compute_at(s[out], xo)
    an, ac, ay, ax, ab = s[acc].op.axis
    ry, rx = s[acc].op.reduce_axis
    s[acc].reorder(an, ac, ay, ry, rx, ax, ab)
    s[acc].unroll(ax)
    s[acc].vectorize(ab)
    schedule_pad(s, acc)
    return s


def schedule_pad(s, acc):
    """The padding stage read by ``acc`` (if any) a parallel pass vectorized over the block."""
    for t in acc.op.input_tensors:
        if getattr(t.op, "tag", "") == "int8_pad":
            axes = s[t].op.axis
            s[t].parallel(s[t].fuse(axes[0], axes[1], axes[2]))
            s[t].vectorize(axes[4])


def schedule_dense_int8(outs, cfg=None):
    """Schedule of an int8 dense: rows x one lane block per tile, requantize as epilogue."""
    s, out, acc = epilogue_schedule(outs, DENSE_TAG)
    tier, lanes = acc.op.attrs["tier"], acc.op.attrs["lanes"]
    m = int(out.shape[0])
    i, j = s[out].op.axis
    jo, jb = s[out].split(j, factor=lanes)
    io, ii = s[out].split(i, factor=acc.op.attrs["tile"])
    s[out].reorder(io, jo, ii, jb)
    s[out].vectorize(jb)
    s[out].unroll(ii)
    tile = s[out].fuse(io, jo)
    s[out].parallel(tile)
    s[acc].compute_at(s[out], tile)
    ai, ao, al = s[acc].op.axis
    rq, *inner = s[acc].op.reduce_axis
    if tier == "neon":
        s[acc].reorder(ao, rq, ai, *inner, al)
        s[acc].unroll(ai)
        for r in inner:
            s[acc].unroll(r)
        s[acc].vectorize(al)
    else:
        s[acc].reorder(ao, rq, ai, al, *inner)
        s[acc].unroll(ai)
        s[acc].tensorize(al, intrin_for(acc))
    return s


def _knob(cfg, name, default):
    if cfg is None:
        return default
    try:
        v = cfg[name]
        return getattr(v, "val", v)
    except (KeyError, TypeError, IndexError):
        return default


def pad_value_u8(zp) -> int:
    return int(np.asarray(zp).ravel()[0])


__all__ = ["int8_tier", "block_for", "conv2d_int8_acc", "conv2d_int8_mixed_acc", "mixed_table", "tuning_mixed_table",
           "schedule_conv2d_int8_mixed", "dense_int8_acc", "depthwise_int8_acc", "schedule_depthwise_int8",
           "requantize_epilogue", "requantize_value", "schedule_conv2d_int8", "schedule_dense_int8",
           "epilogue_schedule", "schedule_pad", "tile_width", "CONV_TAG", "DENSE_TAG", "MIXED_TAG"]
