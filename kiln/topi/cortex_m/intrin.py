"""Dot-product tensor intrinsics of Cortex-M cores, declared in TE.

The pattern is ``c[j] += sum_k a[k] * b[j, k]`` (int8 x int8 -> int32) for ``j < rows``: one
slice of the data (``a``, ``width`` contiguous bytes) against ``rows`` weight rows, so the data is
loaded (and, for the DSP, sign-extended) once per ``rows`` accumulators.

- ``dsp`` (Cortex-M4/M7/M33/M55, Armv7E-M DSP extension): width 4. A 32-bit word of 4 int8 splits
  into two pairs of int16 with ``__sxtb16`` (bytes 0, 2) and ``__sxtb16`` of ``x`` rotated by 8 (bytes
  1, 3); ``__smlad`` adds both products of a pair to the accumulator: 4 MACs in 2 instructions
  plus the unpacking, against 4 ``mla`` plus 8 byte loads in plain C.
- ``mve`` (Cortex-M55/M85, Helium): width 16, ``vmladavaq_s8(acc, vldrbq_s8(a), vldrbq_s8(b))``
  (16 MACs summed into a scalar accumulator).

``dot16_intrin`` is the DSP tier's form for operands widened to int16 before the loop (weights at
build time, data in the conv's pixel copy): a whole reduction of ``k`` int16 for a tile of ``cols``
pixels x ``rows`` channels, each 4-element step one ``LDRD`` (two int16 pairs) per pixel and per
channel and two ``__smlad`` per (pixel, channel): 16 MACs in 12 instructions for a 2 x 2 tile,
no unpacking in the loop.

The C printer (kiln/codegen/c.py) includes ``arm_acle.h`` / ``arm_mve.h`` when a function calls
these and provides ``kiln_read_s32`` (an unaligned 32-bit load, which these cores allow),
``kiln_ld64`` (an aligned 8-byte load as one ``LDRD``: GCC splits 64-bit loads into two ``LDR``
when tuning for the M4) and ``kiln_base`` (a tile's row address, opaque to GCC, so it addresses
the row's words from one register instead of keeping one induction variable per word).
"""

from __future__ import annotations

from kiln import te
from kiln.ir import expr as E
from kiln.ir.dtype import dtype as _dt
from kiln.ir.stmt import Evaluate, For, ForKind, LetStmt, SeqStmt, decl_buffer

# -mcpu -> the best int8 tier of the core (Arm's Technical Reference Manuals: the DSP extension
# is part of the M4/M7, optional on the M33/M35P (enabled by the compilers' default for -mcpu),
# and MVE integer on the M55/M85).
_TIERS = {"cortex-m4": "dsp", "cortex-m7": "dsp", "cortex-m33": "dsp", "cortex-m35p": "dsp",
          "cortex-m55": "mve", "cortex-m85": "mve"}
WIDTH = {"dsp": 4, "mve": 16}


def isa_tier(target) -> str | None:
    """"mve", "dsp" or None (plain C loops) for a target's ``-mcpu``."""
    if target is None:
        return None
    mcpu = getattr(target, "mcpu", None) or ""
    if not mcpu:
        attrs = getattr(target, "attrs", {}) or {}
        mcpu = attrs.get("mcpu", "") or ""
    return _TIERS.get(str(mcpu).lower())


def _pure(dtype: str, name: str, *args):
    return E.Call(_dt(dtype), "tir.call_pure_extern", (E.StringImm(name), *args))


def _addr(buf, *idx):
    return E.Call(_dt("handle"), "tir.address_of", (buf.vload(tuple(idx)),))


def dot_intrin(tier: str, rows: int = 1, cols: int = 1):
    """``c[j] += sum_k a[k] * b[j, k]``, ``j < rows``, ``k < WIDTH[tier]``, for the ``tier``; with
    ``cols > 1`` a tile of ``cols`` data slices: ``c[i, j] += sum_k a[i, k] * b[j, k]`` (each weight
    word is loaded, and for the DSP unpacked, once per ``cols`` pixels)."""
    if tier not in WIDTH:
        raise ValueError(f"cortex-m dot intrinsic: tier {tier!r} is not one of {sorted(WIDTH)}")
    width = WIDTH[tier]
    k = te.reduce_axis((0, width), name="k")
    b = te.placeholder((rows, width), "int8", name="b")
    if cols == 1:
        a = te.placeholder((width,), "int8", name="a")
        c = te.compute((rows,), lambda j: te.sum(a[k].astype("int32") * b[j, k].astype("int32"), axis=k), name="c")
        a_buf = decl_buffer(a.shape, a.dtype, name="A", offset_factor=1)
        c_buf = decl_buffer(c.shape, c.dtype, name="C", offset_factor=1)
    else:
        a = te.placeholder((cols, width), "int8", name="a")
        c = te.compute((cols, rows), lambda i, j: te.sum(a[i, k].astype("int32") * b[j, k].astype("int32"), axis=k),
                       name="c")
        a_buf = decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[te.var("lda"), 1])
        c_buf = decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[te.var("ldc"), 1])
    # rows of b and the data are strided as the real tensors are; only the innermost is contiguous
    binds = {a: a_buf, b: decl_buffer(b.shape, b.dtype, name="B", offset_factor=1, strides=[te.var("ldb"), 1]),
             c: c_buf}
    tile = [(i, j) for i in range(cols) for j in range(rows)]

    def cidx(i, j):
        return (j,) if cols == 1 else (i, j)

    def aaddr(A, i):
        return _addr(A, 0) if cols == 1 else _addr(A, i, 0)

    def fintrin(ins, outs):
        A, B = ins
        (C,) = outs
        zero = E.const(0, "int32")
        if tier == "dsp":
            # the data words of the tile's pixels, unpacked once: (bytes 0, 2) and (bytes 1, 3) as int16 pairs
            lo = [E.Var(f"a_lo{i}" if cols > 1 else "a_lo", _dt("int32")) for i in range(cols)]
            hi = [E.Var(f"a_hi{i}" if cols > 1 else "a_hi", _dt("int32")) for i in range(cols)]

            def rows_of(acc_of):
                stmts = []
                for j in range(rows):
                    w = E.Var("w", _dt("int32"))
                    wl, wh = E.Var("w_lo", _dt("int32")), E.Var("w_hi", _dt("int32"))
                    upd = [C.vstore(cidx(i, j), _pure("int32", "__smlad", hi[i], wh,
                                                      _pure("int32", "__smlad", lo[i], wl, acc_of(i, j))))
                           for i in range(cols)]
                    body = SeqStmt(tuple(upd)) if cols > 1 else upd[0]
                    if cols > 1:  # the weight word unpacked once for the tile's pixels
                        body = LetStmt(wl, _pure("int32", "__sxtb16", w),
                                       LetStmt(wh, _pure("int32", "__sxtb16", _pure("int32", "kiln_ror32", w,
                                                                                    E.const(8, "int32"))), body))
                    else:
                        body = C.vstore(cidx(0, j), _pure("int32", "__smlad", hi[0], _pure(
                            "int32", "__sxtb16", _pure("int32", "kiln_ror32", w, E.const(8, "int32"))),
                            _pure("int32", "__smlad", lo[0], _pure("int32", "__sxtb16", w), acc_of(0, j))))
                    stmts.append(LetStmt(w, _pure("int32", "kiln_read_s32", _addr(B, j, 0)), body))
                body = SeqStmt(tuple(stmts)) if rows > 1 else stmts[0]
                for i in reversed(range(cols)):
                    word = _pure("int32", "kiln_read_s32", aaddr(A, i))
                    body = LetStmt(lo[i], _pure("int32", "__sxtb16", word),
                                   LetStmt(hi[i], _pure("int32", "__sxtb16", _pure("int32", "kiln_ror32", word,
                                                                                   E.const(8, "int32"))), body))
                return body
        else:
            def rows_of(acc_of):
                stmts = []
                for i in range(cols):
                    va = _pure("handle", "vldrbq_s8", aaddr(A, i))
                    stmts += [C.vstore(cidx(i, j), _pure("int32", "vmladavaq_s8", acc_of(i, j), va,
                                                         _pure("handle", "vldrbq_s8", _addr(B, j, 0))))
                              for j in range(rows)]
                return SeqStmt(tuple(stmts)) if len(stmts) > 1 else stmts[0]

        reset = SeqStmt(tuple(C.vstore(cidx(i, j), zero) for i, j in tile)) if len(tile) > 1 else \
            C.vstore(cidx(0, 0), zero)
        return rows_of(lambda i, j: zero), reset, rows_of(lambda i, j: C.vload(cidx(i, j)))

    name = f"cortex_m_{tier}_dot_{rows}" + (f"x{cols}" if cols > 1 else "")
    return te.decl_tensor_intrin(c.op, fintrin, name=name, binds=binds)


def dot16_intrin(rows: int, cols: int, k: int, unroll: bool = True):
    """``c[i, j] += sum_{r < k} a[i, r] * b[j, r]`` for int16 ``a`` (``cols`` rows) and ``b``
    (``rows`` rows), int32 ``c``, ``k`` a multiple of 4 (the DSP tier with operands widened to int16;
    rows 4-byte aligned: ``LDRD``). ``unroll``: the ``k / 4`` steps in straight code (immediate
    offsets), else a loop."""
    if k % 4:
        raise ValueError(f"cortex-m dot16 intrinsic: the reduction ({k}) must be a multiple of 4")
    r = te.reduce_axis((0, k), name="k")
    a = te.placeholder((cols, k), "int16", name="a")
    b = te.placeholder((rows, k), "int16", name="b")
    c = te.compute((cols, rows), lambda i, j: te.sum(a[i, r].astype("int32") * b[j, r].astype("int32"), axis=r),
                   name="c")
    binds = {a: decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[te.var("lda"), 1]),
             b: decl_buffer(b.shape, b.dtype, name="B", offset_factor=1, strides=[te.var("ldb"), 1]),
             c: decl_buffer(c.shape, c.dtype, name="C", offset_factor=1, strides=[te.var("ldc"), 1])}
    tile = [(i, j) for i in range(cols) for j in range(rows)]
    i32 = _dt("int32")

    def fintrin(ins, outs):
        A, B = ins
        (C,) = outs
        zero = E.const(0, "int32")
        # one base register per operand: rows at constant offsets (the strides are known once bound)
        pa, pb = E.Var("pa", _dt("handle")), E.Var("pb", _dt("handle"))

        def at(base, buf, row, off):
            return _pure("int64", "kiln_ld64", base, off + buf.strides[0] * (2 * row) if row else off)

        def step(off, acc_of):
            """One 4-element step at byte offset ``off``: the channels' words, then per pixel its
            words and the tile's dual MACs."""
            wv = [E.Var(f"wv{j}", _dt("int64")) for j in range(rows)]
            body = []
            for i in range(cols):
                dv = E.Var(f"dv{i}", _dt("int64"))
                upd = [C.vstore((i, j), _pure("int32", "__smlad", _pure("int32", "kiln_hi32", dv),
                                              _pure("int32", "kiln_hi32", wv[j]),
                                              _pure("int32", "__smlad", _pure("int32", "kiln_lo32", dv),
                                                    _pure("int32", "kiln_lo32", wv[j]), acc_of(i, j))))
                       for j in range(rows)]
                body.append(LetStmt(dv, at(pa, A, i, off),
                                    SeqStmt(tuple(upd)) if len(upd) > 1 else upd[0]))
            s = SeqStmt(tuple(body)) if len(body) > 1 else body[0]
            for j in reversed(range(rows)):
                s = LetStmt(wv[j], at(pb, B, j, off), s)
            return s

        def update(first):
            def acc_of(i, j, first_step):
                return zero if first_step else C.vload((i, j))
            steps = k // 4
            if unroll or steps == 1:
                seq = [step(E.const(8 * s, "int32"), lambda i, j, s=s: acc_of(i, j, first and s == 0))
                       for s in range(steps)]
                body = SeqStmt(tuple(seq)) if len(seq) > 1 else seq[0]
            else:
                sv = E.Var("s", i32)
                rest = For(sv, E.const(1 if first else 0, "int32"), E.const(steps - (1 if first else 0), "int32"),
                           ForKind.SERIAL, step(sv * 8, lambda i, j: C.vload((i, j))))
                body = SeqStmt((step(E.const(0, "int32"), lambda i, j: acc_of(i, j, True)), rest)) if first else rest
            body = LetStmt(pb, _pure("handle", "kiln_base", _addr(B, 0, 0)), body)
            return LetStmt(pa, _pure("handle", "kiln_base", _addr(A, 0, 0)), body)

        reset = SeqStmt(tuple(C.vstore((i, j), zero) for i, j in tile)) if len(tile) > 1 else C.vstore((0, 0), zero)
        return update(True), reset, update(False)

    name = f"cortex_m_dsp16_dot_{rows}x{cols}_k{k}" + ("" if unroll else "_loop")
    return te.decl_tensor_intrin(c.op, fintrin, name=name, binds=binds)


def _dw_row(ow: int, kh: int, kw: int, stride: int, kdtype: str):
    """The TE statement of one depthwise output row both row intrinsics implement:
    ``c[x] = sum_{ry, rx} a[ry, x * stride + rx] * b[ry * kw + rx]``, int8 ``a`` (``kh`` input
    rows of a strided buffer), ``b`` the channel's taps in ``kdtype``, int32 ``c``; and the binds."""
    width = (ow - 1) * stride + kw
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    a = te.placeholder((kh, width), "int8", name="a")
    b = te.placeholder((kh * kw,), kdtype, name="b")
    c = te.compute((ow,), lambda x: te.sum(a[ry, x * stride + rx].astype("int32") * b[ry * kw + rx].astype("int32"),
                                           axis=[ry, rx]), name="c")
    binds = {a: decl_buffer(a.shape, a.dtype, name="A", offset_factor=1, strides=[te.var("lda"), 1]),
             b: decl_buffer(b.shape, b.dtype, name="B", offset_factor=1),
             c: decl_buffer(c.shape, c.dtype, name="C", offset_factor=1)}
    return c, binds


def dw_row_intrin(ow: int, kh: int, kw: int, stride: int, unroll: bool = True):
    """A row of a depthwise conv for the DSP tier: ``c[x] += sum_{ry, rx} a[ry, x * stride + rx] *
    b[ry * kw + rx]`` for ``x < ow``, int8 ``a`` (``kh`` input rows), ``b`` the channel's taps as
    int16 pairs (``prepack_depthwise``: tap ``t`` in the bottom (even ``t``) or top half of word
    ``t // 2``), int32 ``c``. Each tap is one ``__smlabb`` / ``__smlabt`` (16 x 16 + 32, the
    half chosen by the instruction), so a channel's window is ``ceil(kh * kw / 2)`` words in
    registers instead of ``kh * kw`` bytes; the ``x`` loop is unrolled (``unroll``) or a loop."""
    taps = kh * kw
    c, binds = _dw_row(ow, kh, kw, stride, "int16")  # the pairs' rows are taps + taps % 2 long
    i32 = _dt("int32")

    def fintrin(ins, outs):
        A, B = ins
        (C,) = outs
        words = [E.Var(f"wp{k}", i32) for k in range((taps + 1) // 2)]

        def row(x, first):
            acc = E.const(0, "int32") if first else C.vload((x,))
            for t in range(taps):
                v = E.Cast(i32, A.vload((E.const(t // kw, "int32"), x * stride + t % kw)))
                acc = _pure("int32", "__smlabb" if t % 2 == 0 else "__smlabt", v, words[t // 2], acc)
            return C.vstore((x,), acc)

        def update(first):
            if unroll or ow == 1:
                body = SeqStmt(tuple(row(E.const(x, "int32"), first) for x in range(ow))) if ow > 1 else \
                    row(E.const(0, "int32"), first)
            else:
                xv = E.Var("x", i32)
                body = For(xv, E.const(0, "int32"), E.const(ow, "int32"), ForKind.SERIAL, row(xv, first))
            for k in reversed(range(len(words))):
                body = LetStmt(words[k], _pure("int32", "kiln_read_s32", _addr(B, 2 * k)), body)
            return body

        zero = E.const(0, "int32")
        reset = SeqStmt(tuple(C.vstore((x,), zero) for x in range(ow))) if ow > 1 else C.vstore((0,), zero)
        return update(True), reset, update(False)

    name = f"cortex_m_dsp_dw_row_{ow}_{kh}x{kw}_s{stride}" + ("" if unroll else "_loop")
    return te.decl_tensor_intrin(c.op, fintrin, name=name, binds=binds)


MVE_LANES = 4  # int32 lanes of a 128-bit Q register


def dw_row_mve_intrin(ow: int, kh: int, kw: int, kdtype: str = "int16"):
    """A stride-1 row of a depthwise conv for MVE (Helium), vectorized over neighbouring output
    pixels: ``c[x] += sum_{ry, rx} a[ry, x + rx] * b[ry * kw + rx]`` for ``x < ow``. Lane ``i`` of
    tap ``(ry, rx)`` is input byte ``x + i + rx`` of row ``ry``, so per 4 outputs each tap is one
    widening load of 4 contiguous bytes (``vldrbq_s32``: ``VLDRB.S32``) and one multiply-accumulate
    by the scalar tap weight (``vmlaq_n_s32``: ``VMLA.S32 Q, Q, R``); a row of ``ow`` not a multiple
    of 4 ends in a vector that overlaps the one before (whose loads it shares: DS-CNN's 5-wide rows
    of 3 taps are 4 loads per kernel row, not 6), or, for rows under 4 and in the accumulating
    form, a predicated vector (``vctp32q``: the loads and the store touch only its lanes).
    ``b`` holds the channel's taps in ``kdtype`` (int16: ``prepack_depthwise``'s rows, the DSP's
    layout; int8: the OIHW kernel), each loaded once per row into a register."""
    taps = kh * kw
    c, binds = _dw_row(ow, kh, kw, 1, kdtype)
    i32 = _dt("int32")

    def fintrin(ins, outs):
        A, B = ins
        (C,) = outs
        w = [E.Var(f"w{t}", i32) for t in range(taps)]

        def vec(start, first):
            lanes = min(MVE_LANES, ow - start)
            x0 = E.const(start, "int32")
            pred = _pure("handle", "vctp32q", E.const(lanes, "int32")) if lanes < MVE_LANES else None

            def load(t):
                at = _addr(A, E.const(t // kw, "int32"), x0 + E.const(t % kw, "int32"))
                return _pure("handle", "vldrbq_z_s32", at, pred) if pred is not None else \
                    _pure("handle", "vldrbq_s32", at)
            if first:
                acc = _pure("handle", "vmulq_n_s32", load(0), w[0])
            else:
                acc = _pure("handle", "vmlaq_n_s32", _pure("handle", "vldrwq_z_s32", _addr(C, x0), pred)
                            if pred is not None else _pure("handle", "vldrwq_s32", _addr(C, x0)), load(0), w[0])
            for t in range(1, taps):
                acc = _pure("handle", "vmlaq_n_s32", acc, load(t), w[t])
            store = E.Call(_dt("int32"), "tir.call_extern",
                           (E.StringImm("vstrwq_p_s32" if pred is not None else "vstrwq_s32"), _addr(C, x0), acc)
                           + ((pred,) if pred is not None else ()))
            return Evaluate(store)

        def update(first):
            starts = list(range(0, ow, MVE_LANES))
            if first and ow > MVE_LANES and ow % MVE_LANES:
                # the last vector overlaps the one before instead of a predicated tail: its loads are
                # that vector's loads of later taps (one load serves both), its stores rewrite equal sums
                starts[-1] = ow - MVE_LANES
            body = SeqStmt(tuple(vec(x, first) for x in starts)) if len(starts) > 1 else vec(0, first)
            for t in reversed(range(taps)):
                body = LetStmt(w[t], E.Cast(i32, B.vload((E.const(t, "int32"),))), body)
            return body

        zero = E.const(0, "int32")
        reset = SeqStmt(tuple(C.vstore((x,), zero) for x in range(ow))) if ow > 1 else C.vstore((0,), zero)
        return update(True), reset, update(False)

    return te.decl_tensor_intrin(c.op, fintrin, name=f"cortex_m_mve_dw_row_{ow}_{kh}x{kw}_{kdtype}", binds=binds)


__all__ = ["dot_intrin", "dot16_intrin", "dw_row_intrin", "dw_row_mve_intrin", "isa_tier", "MVE_LANES", "WIDTH"]
