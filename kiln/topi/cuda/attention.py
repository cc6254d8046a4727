"""Fused attention on GPUs (relay ``nn.attention``): one kernel, the score rows kept in shared memory.

    s[b, i, j]   = scale * sum_d q[b, i, d] * k[b, j, d] + mask[b, i, j]   (float32 sums)
    mx[b, i]     = max_j s                 l[b, i] = sum_j exp(s - mx)
    out[b, i, e] = sum_j exp(s[b, i, j] - mx[b, i]) * v[b, j, e] / l[b, i]

A block takes ``tile_m`` query rows of one head (blocks: heads x ceil(M / tile_m)) with
``threads`` threads: all of them compute the tile_m x N scores into shared memory (a thread per
score, the head width reduced in a register; key as (B, D, N), what exporters feed the first
product, reads coalesced), one thread per row takes its maximum, all threads the exponentials
(a second shared tile), one thread per row their sum, and all threads the tile_m x E outputs,
each reducing a row of exponentials against a column of v. The scores never reach device memory: the unfused graph writes
and reads back B x M x N values three times (product, softmax, product) in three or more
kernels. tile_m is 16 rows where the two tiles fit in 40 KiB of shared memory (N up to
320), fewer for longer sequences (N up to 5120). No tensor cores: at BERT's sizes (12 heads x 128 x 128 x 64) the
products are 50 MFLOP a layer; the gain is the launches and the round trips.

Opt-in on CUDA (PassContext config ``relay.FuseAttention.cuda``): right on the H200 (BERT-base
fp32 within 7.3e-6 of onnxruntime) but slower than the unfused chain there (3.51 ms against
3.20 ms for the whole model): the one-thread-per-row max and sum and the per-score dot products
from global memory serialize what the chain's kernels spread over the GPU.

Knobs: ``tile_m``, ``threads``.
"""

from __future__ import annotations

from kiln import te
from kiln.ir.expr import const

from ..gpu.common import block
from ..utils import const_int, knob

TAG = "attention_gpu"
SCORE_BYTES = 20 * 1024  # a tile of scores and one of their exponentials: 40 KiB


def default_config(m: int, n: int) -> dict:
    rows = max(1, min(16, SCORE_BYTES // (4 * n)))
    return {"tile_m": min(rows, m), "threads": 128}


def fits(n: int) -> bool:
    """Whether one row of N float scores fits the shared-memory budget (else the unfused chain)."""
    return 4 * n <= SCORE_BYTES


def attention(query, key, value, mask, scale: float, key_transposed: bool = False, value_transposed: bool = False,
              cfg=None):
    """Same result as relay's nn.attention reference; schedule with ``schedule_attention``."""
    b, m, d = (const_int(x) for x in query.shape)
    n = const_int(key.shape[2] if key_transposed else key.shape[1])
    e = const_int(value.shape[1] if value_transposed else value.shape[2])
    if not fits(n):
        raise ValueError(f"GPU attention keeps a row of {n} float scores in shared memory; at most "
                         f"{SCORE_BYTES // 4} keys")
    dtype, acc = str(query.dtype), "float32"
    conf = default_config(m, n)
    conf.update({k: int(knob(cfg, k, v)) for k, v in conf.items()})

    def kval(bb, j, dd):
        return key[bb, dd, j] if key_transposed else key[bb, j, dd]

    def vval(bb, j, ee):
        return value[bb, ee, j] if value_transposed else value[bb, j, ee]

    mshape = [const_int(x) for x in mask.shape]
    sc = const(scale, acc)
    rd = te.reduce_axis((0, d), name="d")

    dot = te.compute((b, m, n), lambda bb, i, j: te.sum(query[bb, i, rd].astype(acc) * kval(bb, j, rd).astype(acc),
                                                         axis=rd), name="T_attn_scores", tag=f"{TAG}_scores")

    def z(bb, i, j):  # scaled and masked where read
        v = dot[bb, i, j] * sc
        if mshape:
            v = v + mask[bb if mshape[0] > 1 else 0, i if mshape[1] > 1 else 0, j].astype(acc)
        return v

    rj = te.reduce_axis((0, n), name="j")
    mx = te.compute((b, m), lambda bb, i: te.max(z(bb, i, rj), axis=rj), name="T_attn_max", tag=f"{TAG}_max")
    ex = te.compute((b, m, n), lambda bb, i, j: te.exp(z(bb, i, j) - mx[bb, i]), name="T_attn_exp", tag=f"{TAG}_exp")
    rl = te.reduce_axis((0, n), name="jl")
    total = te.compute((b, m), lambda bb, i: te.sum(ex[bb, i, rl], axis=rl), name="T_attn_sum", tag=f"{TAG}_sum")
    ro = te.reduce_axis((0, n), name="jo")
    pv = te.compute((b, m, e), lambda bb, i, ee: te.sum(ex[bb, i, ro] * vval(bb, ro, ee).astype(acc), axis=ro),
                    name="T_attn_pv", tag=f"{TAG}_pv")
    return te.compute((b, m, e), lambda bb, i, ee: (pv[bb, i, ee] / total[bb, i]).astype(dtype), name="T_attention",
                      tag=TAG, attrs={"config": conf})


def schedule_attention(outs, cfg=None):
    """The block schedule of the module docstring (module doc)."""
    from ..utils import find_stage

    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([o.op for o in outs])
    res = find_stage(outs[0], lambda op: getattr(op, "tag", "") == TAG, "GPU attention stage")
    conf = dict(res.op.attrs["config"])
    conf.update({k: int(knob(cfg, k, v)) for k, v in conf.items()})
    tm, threads = conf["tile_m"], conf["threads"]
    pv, total = res.op.input_tensors[:2]
    (ex,) = total.op.input_tensors
    tagged = {getattr(t.op, "tag", ""): t for t in ex.op.input_tensors}
    dot, mx = tagged[f"{TAG}_scores"], tagged[f"{TAG}_max"]
    tx = te.thread_axis((0, threads), "threadIdx.x")
    st = s[res]
    bb, i, ee = st.op.axis
    io, ii = st.split(i, factor=tm)
    blk = st.fuse(bb, io)
    st.bind(blk, block("x"))
    fused = st.fuse(ii, ee)
    _, t = st.split(fused, factor=threads)
    st.bind(t, tx)

    s[pv].set_scope("local")
    s[pv].compute_at(st, t)
    for stage in (dot, mx, ex, total):
        s[stage].set_scope("shared")
        s[stage].compute_at(st, blk)
    dot_local = s.cache_write(dot, "local")  # each score summed in a register
    for stage in (dot, ex):  # a thread per score
        sst = s[stage]
        _, si, sj = sst.op.axis
        f = sst.fuse(si, sj)
        _, ft = sst.split(f, factor=threads)
        sst.bind(ft, tx)
        if stage is dot:
            s[dot_local].compute_at(sst, ft)
    for stage in (mx, total):  # one thread per row, summing in a register
        local = s.cache_write(stage, "local")
        rst = s[stage]
        _, ri = rst.op.axis
        rst.bind(ri, tx)
        s[local].compute_at(rst, ri)
    return s
