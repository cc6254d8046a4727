"""dense and batch_matmul for x86 without packing: both operands are read along K.

``data (M, K)`` and ``weight (N, K)`` are both contiguous in K, so the kernel keeps an
``mr x nr`` tile of vector accumulators, each holding ``lanes`` partial sums over K:

    partial[.., i, j, v] = sum_ko data[i, ko*lanes + v] * weight[j, ko*lanes + v]
    dot[.., i, j]        = sum_v partial[.., i, j, v]   (+ a scalar tail when lanes does not divide K)

Per step it loads mr + nr vectors for mr*nr FMAs. The weight block (nr rows) stays in L1 while
the tile walks down M, so the weight matrix streams from memory once. No per-call repacking,
so the weights need no constant folding to be fast.

For M >= 16 the work is large enough to pay for regrouping the weights once per call, and the
register-tiled GEMM of ``matmul_nn.py`` (vectors along N) is used instead.

Knobs: ``kernel`` ("dot" or "gemm"; default gemm when M >= 16), ``tile_m`` (mr), ``tile_n``
(nr), ``lanes`` (vector width along K; dot only).
"""

from __future__ import annotations

from kiln import te

from ..cpu import vector_lanes
from ..nn.dense import add_bias
from ..utils import check_ndim, const_int, knob, with_default
from .conv2d import find_tagged
from . import matmul_nn
from .injective import tile_root

TAG = "dense_dot"


def default_config(m: int, n: int, k: int) -> dict:
    lanes = vector_lanes()
    if m == 1:
        return {"tile_m": 1, "tile_n": 8 if n % 8 == 0 or n > 64 else max(1, min(n, 8)), "lanes": lanes}
    return {"tile_m": 4 if m >= 4 else m, "tile_n": 4, "lanes": lanes}


def config_space(m: int, n: int, k: int) -> dict:
    space = {"tile_m": [t for t in (1, 2, 3, 4, 6, 8) if t <= max(m, 1)], "tile_n": [1, 2, 4, 6, 8, 12, 16],
             "lanes": [8, 16, 32]}
    return with_default(space, default_config(m, n, k))


def dot_nt(batch: tuple, m, n, k, fa, fb, out_dtype: str, cfg=None, name="dense"):
    """out[*b, i, j] = sum_k fa(*b, i, k) * fb(*b, j, k): the vector dot tile, or for M >= 16
    the panel-packed GEMM (knob ``kernel``)."""
    mi, ni, ki = const_int(m), const_int(n), const_int(k)
    kernel = knob(cfg, "kernel", "gemm" if mi >= 16 else "dot")
    if kernel == "gemm":
        conf = matmul_nn.default_config(mi, ni, ki)
        conf.update({key: knob(cfg, key, v) for key, v in conf.items()})
        conf.update(kernel="gemm", tile_k=knob(cfg, "tile_k", 0))
        conf["prefetch"] = knob(cfg, "prefetch", matmul_nn.prefetch_default(mi, ki, conf["tile_n"], bool(batch),
                                                                         tile_m=conf["tile_m"]))
        return matmul_nn.dot_nt_packed(batch, m, n, k, fa, fb, out_dtype, conf, name)
    conf = default_config(mi, ni, ki)
    conf.update({key: knob(cfg, key, v) for key, v in conf.items()})
    conf["kernel"] = "dot"
    lanes = conf["lanes"]
    main = ki // lanes
    nb = len(batch)
    shape = tuple(batch) + (m, n)
    if main:
        ko = te.reduce_axis((0, main), name="ko")

        def fpartial(*idx):
            *b, i, j, v = idx
            kk = ko * lanes + v
            return te.sum(fa(*b, i, kk).astype(out_dtype) * fb(*b, j, kk).astype(out_dtype), axis=ko)

        partial = te.compute(shape + (lanes,), fpartial, name=f"{name}_partial", tag=f"{TAG}_partial")
        rv = te.reduce_axis((0, lanes), name="v")
        parts = [te.compute(shape, lambda *idx: te.sum(partial(*idx, rv), axis=rv), name=f"{name}_hsum",
                            tag=f"{TAG}_hsum")]
    else:
        parts = []
    if ki % lanes:
        kt = te.reduce_axis((main * lanes, ki), name="kt")
        parts.append(te.compute(shape, lambda *idx: te.sum(fa(*idx[:nb], idx[nb], kt).astype(out_dtype)
                                                           * fb(*idx[:nb], idx[nb + 1], kt).astype(out_dtype), axis=kt),
                                name=f"{name}_tail", tag=f"{TAG}_tail"))
    first = parts[0]
    if len(parts) == 1:
        return te.compute(shape, lambda *idx: first(*idx), name=f"T_{name}", tag=TAG, attrs={"config": conf})
    second = parts[1]
    return te.compute(shape, lambda *idx: first(*idx) + second(*idx), name=f"T_{name}", tag=TAG, attrs={"config": conf})


def accumulation_dtype(out_dtype: str) -> str:
    """float16 products are summed in float32 and rounded once at the end (a float16 sum of K
    terms loses about K/2 roundings: 5e-3 relative for K = 256); other types sum in their own."""
    return "float32" if str(out_dtype) == "float16" else str(out_dtype)


def narrowed(t, out_dtype: str):
    """t as out_dtype: t itself, or an elementwise cast that the schedules inline as an epilogue."""
    if str(t.dtype) == str(out_dtype):
        return t
    return te.compute(t.shape, lambda *i: t(*i).astype(out_dtype), name=f"{t.op.name}_narrow", tag="elemwise")


def dense(data, weight, bias=None, out_dtype=None, cfg=None, units=None):
    """Same result as topi.nn.dense; schedule with ``schedule_dense``.

    ``weight`` may be pre-packed by ``prepack_weight`` (3 dims: N/tile_n, K, tile_n; pass
    ``units`` = N when tile_n does not divide it): the GEMM path then skips its per-call copy.
    """
    check_ndim("dense", "data", data, 2, "M, K")
    out_dtype = out_dtype or str(data.dtype)
    if len(weight.shape) == 3:
        out = _dense_prepacked(data, weight, accumulation_dtype(out_dtype), cfg, units)
        return add_bias(narrowed(out, out_dtype), bias, 1)
    check_ndim("dense", "weight", weight, 2, "N, K, or 3 dims when pre-packed")
    m, k = data.shape
    n, k2 = weight.shape
    if const_int(k) != const_int(k2):
        from kiln.errors import ShapeError

        raise ShapeError(f"dense: input 'data' has K={k} but 'weight' has K={k2} (weight is (units, K))")
    out = dot_nt((), m, n, k, lambda i, kk: data[i, kk], lambda j, kk: weight[j, kk], accumulation_dtype(out_dtype),
                 cfg)
    return add_bias(narrowed(out, out_dtype), bias, 1)


def _dense_prepacked(data, panels, out_dtype, cfg, units):
    chunks, k, nr = (const_int(d) for d in panels.shape)
    n = units or chunks * nr
    m = const_int(data.shape[0])
    if const_int(data.shape[1]) != k:
        from kiln.errors import ShapeError

        raise ShapeError(f"dense: input 'data' has K={data.shape[1]} but the packed 'weight' has K={k}")
    conf = matmul_nn.default_config(m, n, k)
    conf.update({key: knob(cfg, key, v) for key, v in conf.items()})
    conf.update(kernel="gemm", tile_n=nr, tile_k=knob(cfg, "tile_k", 0))
    conf["prefetch"] = knob(cfg, "prefetch", matmul_nn.prefetch_default(m, k, nr, tile_m=conf["tile_m"]))
    return matmul_nn.dot_nn((), m, n, k, lambda i, kk: data[i, kk],
                            lambda kk, j: panels[j // nr, kk, j % nr], out_dtype, conf, "dense")


def config_for(m: int, n: int, k: int, cfg=None) -> dict:
    """The knobs dense will use for (M, N, K); ``kernel == "gemm"`` means pre-packing pays."""
    kernel = knob(cfg, "kernel", "gemm" if m >= 16 else "dot")
    conf = matmul_nn.default_config(m, n, k) if kernel == "gemm" else default_config(m, n, k)
    conf.update({key: knob(cfg, key, v) for key, v in conf.items()})
    conf["kernel"] = kernel
    return conf


def prepack_weight(weight, tile_n: int):
    """numpy: (N, K) weight -> panels (ceil(N/tile_n), K, tile_n), zero past N."""
    import numpy as np

    n, k = weight.shape
    chunks = -(-n // tile_n)
    padded = np.zeros((chunks * tile_n, k), dtype=weight.dtype)
    padded[:n] = weight
    return np.ascontiguousarray(padded.reshape(chunks, tile_n, k).transpose(0, 2, 1))


def schedule_dense(outs, cfg=None):
    """Tile the output (N blocks outer, M inner), compute the vector partial sums in the tile."""
    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    schedule_any_dot(s, out)
    return s


def schedule_any_dot(s, out):
    """Schedule whichever kernel (dot tile or GEMM) the compute chose."""
    try:
        mm = find_tagged(out, matmul_nn.NN_TAG)
    except ValueError:
        schedule_dot_tile(s, find_tagged(out, TAG), out)
        return
    # Padded rows (matmul_nn docstring): the (M, N) copy of mm is the shape the epilogue sees.
    shaped = find_tagged(out, matmul_nn.UNPAD_TAG) if mm.op.attrs.get("padded_rows") else mm
    matmul_nn.schedule_nn_tile(s, mm, tile_root(s, out, shaped, mm))


def schedule_dot_tile(s, dot, out):
    """out: the output stage (dot itself or an epilogue on it), tiled (batch, N block, M block)."""
    conf = dot.op.attrs["config"]
    mr, nr = conf["tile_m"], conf["tile_n"]
    out = tile_root(s, out, dot, dot)
    if dot.op is not out.op:
        s[dot].compute_inline()
    *batch, i, j = s[out].op.axis
    jo, ji = s[out].split(j, factor=nr)
    io, ii = s[out].split(i, factor=mr)
    s[out].reorder(*batch, jo, io, ii, ji)
    # The N blocks are the parallel unit (each thread owns its weight rows); batch joins them.
    s[out].parallel(s[out].fuse(*batch, jo) if batch else jo)
    s[out].unroll(ii)
    s[out].unroll(ji)
    sums = dot.op.input_tensors
    partials = [u for t in sums for u in t.op.input_tensors if u.op.tag == f"{TAG}_partial"]
    for t in sums + partials:
        s[t].compute_at(s[out], io)
    for t in partials:
        st = s[t]
        *pb, pi, pj, pv = st.op.axis
        (ko,) = st.op.reduce_axis
        st.reorder(*pb, ko, pi, pj, pv)
        st.unroll(pi)
        st.unroll(pj)
        st.vectorize(pv)
