"""Fused attention for x86 (relay ``nn.attention``): a block of a head's query rows at a time,
its score rows kept in cache between the two products.

    s[b, i, j]  = sum_d q[b, i, d] * kt[b, d, j]                 (kt: key as (B, D, N))
    z[b, i, j]  = scale * s + mask                               (inlined where read)
    mx[b, i]    = max_j z        e = exp(z - mx) (0 past N)      l[b, i] = sum_j e
    out[b, i, :] = (sum_j e[b, i, j] * v[b, j, :]) / l[b, i]

The parallel loop runs over (head, block of ``tile_m`` rows). For one block every stage above is
computed into buffers of ``tile_m`` x N (N = 128 for BERT: 16 KiB with 8 rows; 1500 for Whisper:
48 KiB), so the scores never go to memory: the unfused graph wrote and read back B x M x N floats
three times (product, softmax, product), 54 MB per Whisper layer. Both products are register
tiles like matmul_nn's: ``tile_m`` rows x two vectors of columns, the reduction outermost.

Sizes the tiles do not divide are padded, as in matmul_nn: rows past M repeat row M-1 and are
dropped; columns past N repeat column N-1 for the maximum and are taken out of the row sum, so
every tile loop has constant extents; the second product sums over the N real keys only (ViT's
197 keys: 224 before, the attention 1.24 -> 1.11 ms a layer on one core). The key is copied
(``B x D x N``, cheap next to ``B x M x N x D``) when N is padded or it arrives as (B, N, D);
the value only when it arrives as (B, E, N).
Row maxima and sums use ``lanes`` partial results per row (softmax.py) so they vectorize.

With ``heads = H`` (relay's rows form: query (M, H*D), key (N, H*D), value (N, H*E)) the blocks
read a head's columns in place, the key is copied as (H, D, N') in blocks of ``lanes`` keys, and
each block writes its rows of the (M, H*E) output directly (no head-join copy after).

Knobs: ``tile_m`` (rows per block), ``tile_n`` (score columns per register tile), ``tile_e``
(output columns per register tile); defaults from the target's vector registers (topi.cpu).
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import const

from ..cpu import accumulator_rows, vector_lanes, vector_registers
from ..fast_math import fast_exp_expr
from ..utils import const_int, knob
from .matmul_nn import _rows_for
from .softmax import select_max

TAG = "attention_x86"

# Row maxima with softmax's select reducer (te.max's NaN handling was 12% of Whisper's attention).
_fast_max = select_max


def default_config(m: int, n: int, e: int) -> dict:
    lanes, regs = vector_lanes(), vector_registers()
    tile_n = 2 * lanes if n >= 2 * lanes else lanes
    tile_e = 2 * lanes if e % (2 * lanes) == 0 else lanes
    rows = min(accumulator_rows(tile_n // lanes, regs), accumulator_rows(tile_e // lanes, regs), 12)
    return {"tile_m": _rows_for(m, max(1, rows)), "tile_n": tile_n, "tile_e": tile_e}


def attention(query, key, value, mask, scale: float, key_transposed: bool = False, value_transposed: bool = False,
              heads: int = 0, cfg=None):
    """Same result as relay's nn.attention reference; schedule with ``schedule_attention``.
    ``heads > 0``: query (M, H*D), key (N, H*D), value (N, H*E) and the output (M, H*E) keep the
    heads side by side in rows (relay/op/attention.py); the blocks read them there."""
    if heads:
        b, m, d = heads, const_int(query.shape[0]), const_int(query.shape[1]) // heads
        n, e = const_int(key.shape[0]), const_int(value.shape[1]) // heads
        key_transposed = value_transposed = False
    else:
        b, m, d = (const_int(x) for x in query.shape)
        n = const_int(key.shape[2] if key_transposed else key.shape[1])
        e = const_int(value.shape[1] if value_transposed else value.shape[2])
    dtype = str(query.dtype)
    conf = default_config(m, n, e)
    conf.update({k: int(knob(cfg, k, v)) for k, v in conf.items()})
    tm, tn, lanes = conf["tile_m"], conf["tile_n"], vector_lanes()
    mp, np_ = -(-m // tm) * tm, -(-n // tn) * tn

    def col(j):
        return j if np_ == n else tir.min(j, n - 1)

    def row(i):
        return i if mp == m else tir.min(i, m - 1)

    def q_at(bb, i, dd):
        return query[i, bb * d + dd] if heads else query[bb, i, dd]

    def k_at(bb, dd, j):
        if heads:
            return key[j, bb * d + dd]
        return key[bb, dd, j] if key_transposed else key[bb, j, dd]

    if key_transposed and np_ == n:
        kt = key
    else:
        kt = te.compute((b, d, np_), lambda bb, dd, j: k_at(bb, dd, col(j)), name="T_attn_key", tag=f"{TAG}_pack",
                        attrs={"key_rows": int(not key_transposed)})
    # The second product sums over the N real keys only (the padded columns' weights are never
    # read), so the value needs no padding: copied only from the transposed layout.
    if heads and not knob(cfg, "value_pack", True):
        def v_at(bb, j, ee):
            return value[j, bb * e + ee]
    elif heads:  # a head's value rows contiguous: read in place they are E of every H*E floats,
        # which the prefetchers follow poorly over Whisper's 1500 keys (its attention 1.27x slower)
        vh = te.compute((b, n, e), lambda bb, j, ee: value[j, bb * e + ee], name="T_attn_value", tag=f"{TAG}_pack",
                        attrs={"contiguous": 1})

        def v_at(bb, j, ee):
            return vh[bb, j, ee]
    else:
        vv = value if not value_transposed else te.compute(
            (b, n, e), lambda bb, j, ee: value[bb, ee, j], name="T_attn_value", tag=f"{TAG}_pack")

        def v_at(bb, j, ee):
            return vv[bb, j, ee]
    rd = te.reduce_axis((0, d), name="d")
    s = te.compute((b, mp, np_), lambda bb, i, j: te.sum(q_at(bb, row(i), rd) * kt[bb, rd, j], axis=rd),
                   name="T_attn_scores", tag=f"{TAG}_scores")
    sc = const(scale, dtype)
    mshape = [const_int(x) for x in mask.shape]

    def z(bb, i, j):
        v = s[bb, i, j] * sc
        if mshape:
            mb = bb if mshape[0] > 1 else 0
            mi = row(i) if mshape[1] > 1 else 0
            v = v + mask[mb, mi, col(j)].astype(dtype)
        return v

    ko = te.reduce_axis((0, np_ // lanes), name="ko")
    pmax = te.compute((b, mp, lanes), lambda bb, i, v: _fast_max(z(bb, i, ko * lanes + v), axis=ko),
                      name="T_attn_pmax", tag=f"{TAG}_part")
    rv = te.reduce_axis((0, lanes), name="rv")
    mx = te.compute((b, mp), lambda bb, i: _fast_max(pmax[bb, i, rv], axis=rv), name="T_attn_max", tag=f"{TAG}_fold")

    ex = te.compute((b, mp, np_), lambda bb, i, j: fast_exp_expr(z(bb, i, j) - mx[bb, i]), name="T_attn_exp",
                    tag=f"{TAG}_exp")
    ks = te.reduce_axis((0, np_ // lanes), name="ks")
    psum = te.compute((b, mp, lanes), lambda bb, i, v: te.sum(ex[bb, i, ks * lanes + v], axis=ks),
                      name="T_attn_psum", tag=f"{TAG}_part")
    rs = te.reduce_axis((0, lanes), name="rs")
    # Columns past N repeat column N-1, so exactly its term: taken out again (no branch per element).
    extra = const(float(np_ - n), dtype)

    def fsum(bb, i):
        return te.sum(psum[bb, i, rs], axis=rs)

    total0 = te.compute((b, mp), fsum, name="T_attn_sum0", tag=f"{TAG}_fold")
    total = total0 if np_ == n else te.compute(
        (b, mp), lambda bb, i: total0[bb, i] - extra * ex[bb, i, np_ - 1], name="T_attn_sum", tag=f"{TAG}_fold")
    rj = te.reduce_axis((0, n), name="j")
    o = te.compute((b, mp, e), lambda bb, i, ee: te.sum(ex[bb, i, rj] * v_at(bb, rj, ee), axis=rj),
                   name="T_attn_pv", tag=f"{TAG}_pv")
    one = const(1.0, dtype)
    if heads:  # written in place: heads side by side, the last block's rows past M not stored
        return te.compute((m, b * e), lambda i, c: o[c // e, i, c % e] * (one / total[c // e, i]), name="T_attention",
                          tag=TAG, attrs={"config": conf, "head_width": e})
    res = te.compute((b, mp, e), lambda bb, i, ee: o[bb, i, ee] * (one / total[bb, i]), name="T_attention",
                     tag=TAG, attrs={"config": conf})
    if mp == m:
        return res
    return te.compute((b, m, e), lambda bb, i, ee: res[bb, i, ee], name="T_attention_rows", tag="injective")


def schedule_attention(outs, cfg=None):
    """The block schedule of the module docstring; an epilogue (the row unpadding) gets plain loops."""
    from ..generic.default import schedule_stage
    from .conv2d import find_tagged
    from .injective import inline_injective_between

    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    res = find_tagged(outs[0], TAG)
    if res.op is not outs[0].op:
        inline_injective_between(s, outs[0], res)
        schedule_stage(s, outs[0])
    conf = res.op.attrs["config"]
    lanes = vector_lanes()
    st = s[res]
    if "head_width" in st.op.attrs:  # (M, H*E): head h's block of rows is columns h*E ...
        i, c = st.op.axis
        bb, ee = st.split(c, factor=int(st.op.attrs["head_width"]))
        io, ii = st.split(i, factor=conf["tile_m"])
        st.reorder(bb, io, ii, ee)
    else:
        bb, i, ee = st.op.axis
        io, ii = st.split(i, factor=conf["tile_m"])
    block = st.fuse(bb, io)
    st.parallel(block)
    st.vectorize(st.split(ee, factor=lanes)[1])
    stages = _stages(res)
    for role, ts in stages.items():
        for t in ts:
            if role != "pack":
                s[t].compute_at(st, block)
    for t in stages["scores"]:
        _register_tile(s, t, conf["tile_n"], lanes)
    for t in stages["pv"]:
        _register_tile(s, t, conf["tile_e"], lanes)
    for t in stages["part"]:
        stp = s[t]
        *_, v = stp.op.axis
        (k,) = stp.op.reduce_axis
        stp.reorder(k, v)
        stp.vectorize(v)
    for t in stages["exp"]:
        *_, j = s[t].op.axis
        s[t].vectorize(s[t].split(j, factor=lanes)[1])
    for t in stages["pack"]:  # once per call, before the blocks: parallel over heads
        s[t].parallel(s[t].op.axis[0])
        if t.op.attrs.get("contiguous"):
            s[t].vectorize(s[t].split(s[t].op.axis[-1], factor=lanes)[1])
        if t.op.attrs.get("key_rows"):  # read along D: blocks of `lanes` keys, so a block's rows stay in L1
            _, dd, j = s[t].op.axis
            jo, ji = s[t].split(j, factor=lanes)
            s[t].reorder(jo, dd, ji)
    return s


def _stages(res) -> dict:
    """The compute stages of the attention, by role (the tag's suffix)."""
    found: dict = {"scores": [], "pv": [], "part": [], "fold": [], "exp": [], "pack": []}
    seen, stack = set(), list(res.op.input_tensors)
    while stack:
        t = stack.pop()
        if id(t.op) in seen or not t.op.tag.startswith(f"{TAG}_"):
            continue
        seen.add(id(t.op))
        found[t.op.tag[len(TAG) + 1:]].append(t)
        stack.extend(t.op.input_tensors)
    return found


def _register_tile(s, t, width: int, lanes: int) -> None:
    """rows x ``width`` columns of accumulators in registers (a local cache of t's block), the
    reduction outside them (matmul_nn's tile); then copied to t's buffer."""
    local = s.cache_write(t, "local")
    st = s[t]
    bb, ci_, cj = st.op.axis
    jo, ji = st.split(cj, factor=width)
    st.reorder(bb, jo, ci_, ji)
    st.vectorize(st.split(ji, factor=lanes)[1])
    lt = s[local]
    lt.compute_at(st, jo)
    _, ci, lj = lt.op.axis
    (rk,) = lt.op.reduce_axis
    ljo, lji = lt.split(lj, factor=lanes)
    lt.reorder(rk, ci, ljo, lji)
    lt.unroll(ci)
    lt.unroll(ljo)
    lt.vectorize(lji)
