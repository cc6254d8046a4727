"""The recurrence of LSTM, GRU and vanilla RNN layers as one ``te.extern`` kernel.

The input projection ``X·Wᵀ + Wb`` of every time step is one matmul before this kernel (it has
no dependence between steps). What is left is sequential: per step, gates = projection +
``H·Rᵀ`` + ``Rb``, activations, the state update. The kernel loops over time, so its size does
not depend on the sequence length.

Inputs (``D`` directions, ``G`` gates, hidden size ``H``):
  xproj (T, B, D, G*H)   X·Wᵀ + Wb per step, batch and direction
  rt    (D, H, G*H)      Rᵀ (rows of H, so the inner loop over gates reads contiguously)
  rb    (D, G*H)         recurrent bias
  h0, c0 (D, B, H)       initial states (c0 read by LSTM only)
  seq_lens (B,) int32    steps of each batch entry; later steps output 0 and keep the state
                         (an entry of 0 steps ends with zero states, as in onnxruntime)
  peep  (D, 3*H)         LSTM peepholes [i, o, f]
Output (T + S, D, B, H): rows 0..T-1 are Y, row T the final hidden state, row T+1 (LSTM) the
final cell state. Gate orders follow ONNX: LSTM i, o, f, c; GRU z, r, h; RNN one gate.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import CompileError
from kiln.ir import expr as E

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
# How many activation functions each direction takes (f, g, h for LSTM; f, g for GRU; f for RNN).
NUM_ACTIVATIONS = {"lstm": 3, "gru": 2, "rnn": 1}
# Activations of ONNX recurrent layers; alpha/beta defaults as the ONNX operator docs give them.
ACTIVATION_DEFAULTS = {
    "relu": (None, None), "tanh": (None, None), "sigmoid": (None, None), "affine": (1.0, 0.0),
    "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None), "scaledtanh": (1.0, 1.0),
    "hardsigmoid": (0.2, 0.5), "elu": (1.0, None), "softsign": (None, None), "softplus": (None, None),
}


def activation(name: str, x, alpha=None, beta=None):
    """One ONNX recurrent activation applied to expression x."""
    key = name.lower()
    if key not in ACTIVATION_DEFAULTS:
        raise CompileError(f"rnn activation {name!r} is not one of {sorted(ACTIVATION_DEFAULTS)}")
    da, db = ACTIVATION_DEFAULTS[key]
    a = E.const(float(da if alpha is None else alpha), x.dtype) if da is not None or alpha is not None else None
    b = E.const(float(db if beta is None else beta), x.dtype) if db is not None or beta is not None else None
    zero, one = E.const(0.0, x.dtype), E.const(1.0, x.dtype)
    if key == "relu":
        return tir.max(x, zero)
    if key == "tanh":
        return te.tanh(x)
    if key == "sigmoid":
        return one / (one + te.exp(zero - x))
    if key == "affine":
        return a * x + b
    if key == "leakyrelu":
        return tir.Select(x >= zero, x, a * x)
    if key == "thresholdedrelu":
        return tir.Select(x > a, x, zero)
    if key == "scaledtanh":
        return a * te.tanh(b * x)
    if key == "hardsigmoid":
        return tir.max(zero, tir.min(one, a * x + b))
    if key == "elu":
        return tir.Select(x >= zero, x, a * (te.exp(x) - one))
    if key == "softsign":
        return x / (one + te.abs(x))
    return te.log(one + te.exp(x))  # softplus


def recurrence(xproj, rt, rb, h0, c0, seq_lens, peep, mode: str, directions: int, reverse: tuple,
               activations: tuple, clip=None, linear_before_reset: bool = False, input_forget: bool = False,
               use_peepholes: bool = False, gpu: bool = False):
    """The recurrent part of an RNN layer (see the module doc); ``activations`` holds
    ``(name, alpha, beta)`` per activation, ``NUM_ACTIVATIONS[mode]`` per direction.

    ``gpu``: the kernel runs as one GPU thread (state in thread-local memory, no vectors): correct
    on CUDA and OpenCL targets but sequential, until a kernel that spreads the gates over a block
    is written."""
    if mode not in GATES:
        raise CompileError(f"rnn mode {mode!r} is not one of {sorted(GATES)}")
    T, B, D, GH = (int(s) for s in xproj.shape)
    H = int(rt.shape[1])
    G = GATES[mode]
    if GH != G * H or D != directions or len(reverse) != D:
        raise CompileError(f"rnn {mode}: projections {list(xproj.shape)} do not match hidden size {H}, "
                           f"{G} gates and {directions} directions")
    if len(activations) != NUM_ACTIVATIONS[mode] * D:
        raise CompileError(f"rnn {mode}: {len(activations)} activations given, {NUM_ACTIVATIONS[mode] * D} needed")
    states = 2 if mode == "lstm" else 1
    dtype = xproj.dtype

    def body(ins, outs):
        ib = tir.ir_builder.create()
        x, r, rbias, hin, cin, lens, p = (ib.buffer_ptr(b) for b in ins)
        y = ib.buffer_ptr(outs[0])
        scope = "global"
        if gpu:
            ib.scope_attr(te.thread_axis("blockIdx.x"), "thread_extent", 1)
            ib.scope_attr(te.thread_axis("threadIdx.x"), "thread_extent", 1)
            scope = "local"
        h = ib.allocate(dtype, (B, H), name="h_state", scope=scope)
        c = ib.allocate(dtype, (B, H), name="c_state", scope=scope) if mode == "lstm" else None
        acc = ib.allocate(dtype, (B, GH), name="gates", scope=scope)
        rh = ib.allocate(dtype, (B, H), name="reset_h", scope=scope) \
            if mode == "gru" and not linear_before_reset else None
        mv = _matvec if not gpu else _matvec_scalar
        for d in range(D):
            acts = activations[d * NUM_ACTIVATIONS[mode]:(d + 1) * NUM_ACTIVATIONS[mode]]
            fns = [(lambda v, a=a: activation(a[0], v, a[1], a[2])) for a in acts]
            with ib.for_range(0, B, name="b0") as b:
                with ib.for_range(0, H, name="j0") as j:
                    h[b, j] = hin[d, b, j]
                    if c is not None:
                        c[b, j] = cin[d, b, j]
            with ib.for_range(0, T, name="step") as s:
                t = (T - 1 - s) if reverse[d] else s
                # Gate pre-activations from the previous state: rb + H·Rᵀ.
                rec = 2 * H if rh is not None else GH  # GRU without linear_before_reset: z and r first
                with ib.for_range(0, B, name="b1") as b:
                    with ib.for_range(0, GH, name="g1") as g:
                        acc[b, g] = rbias[d, g]
                    mv(ib, acc, h, r, d, b, 0, rec, H)
                if rh is not None:
                    with ib.for_range(0, B, name="b2") as b:
                        with ib.for_range(0, H, name="j2") as j:
                            rh[b, j] = fns[0](_clip(x[t, b, d, H + j] + acc[b, H + j], clip)) * h[b, j]
                        mv(ib, acc, rh, r, d, b, 2 * H, GH, H)
                # Past its length an entry keeps its state and outputs 0: predicated stores, not
                # a branch (no control flow for GPU barriers to worry about).
                with ib.for_range(0, B, name="b3") as b:
                    live = ib.let("live", t < lens[b])
                    with ib.for_range(0, H, name="j3") as j:
                        _update(ib, mode, fns, clip, x, acc, h, c, p, y, t, b, d, j, H, linear_before_reset,
                                input_forget, use_peepholes, live)
            # Final states; an empty sequence has zero states, as in onnxruntime.
            with ib.for_range(0, B, name="b5") as b:
                some = lens[b] > 0
                with ib.for_range(0, H, name="j5") as j:
                    y[T, d, b, j] = tir.Select(some, h[b, j], E.const(0.0, dtype))
                    if c is not None:
                        y[T + 1, d, b, j] = tir.Select(some, c[b, j], E.const(0.0, dtype))
        return ib.get()

    return te.extern((T + states, D, B, H), [xproj, rt, rb, h0, c0, seq_lens, peep], body,
                     name=f"{mode}_recurrence", dtype=dtype, tag="rnn_recurrence")


def _clip(v, clip):
    if clip is None:
        return v
    return tir.max(tir.min(v, E.const(float(clip), v.dtype)), E.const(-float(clip), v.dtype))


LANES = 8  # 8 float32 lanes: one AVX2 register, two NEON ones
VECTORIZE = True
CHUNK = 128  # columns of one parallel task
# Below this many multiply-adds per step, waking threads costs more than the work saves.
PARALLEL_MIN = 1 << 20
UNROLL_K = 4  # rows of r per pass over acc: a quarter of the acc loads and stores


def _matvec(ib, acc, h, r, d, b, lo: int, hi: int, H: int) -> None:
    """acc[b, lo:hi] += h[b, :] · r[d, :, lo:hi].

    Columns go in blocks of CHUNK, in parallel (each block owns its slice of acc); within a
    block, UNROLL_K rows of r are accumulated per pass (acc is read and written once per
    UNROLL_K rows) and the columns are LANES-wide vectors over contiguous rows of r.
    """
    n = hi - lo
    if n <= 0:
        return
    vec = n // LANES * LANES if VECTORIZE else 0
    chunks = vec // CHUNK
    parallel = H * n >= PARALLEL_MIN

    def rows(k0, count, c0, cols):
        hs = [ib.let(f"h{u}", h[b, k0 + u]) for u in range(count)]

        def add(g):
            total = acc[b, g]
            for u in range(count):
                total = total + hs[u] * r[d, k0 + u, g]
            acc[b, g] = total

        if cols is None:
            with ib.for_range(c0, hi, name="gt") as g:
                add(g)
            return
        with ib.for_range(0, cols // LANES, name="gv") as go:
            with ib.for_range(0, LANES, name="gl", kind="vectorize") as gi:
                add(c0 + go * LANES + gi)

    def all_rows(c0, cols):
        main = H // UNROLL_K * UNROLL_K
        if main:
            with ib.for_range(0, H // UNROLL_K, name="k") as ko:
                with ib.new_scope():
                    rows(ko * UNROLL_K, UNROLL_K, c0, cols)
        for k in range(main, H):
            with ib.new_scope():
                rows(k, 1, c0, cols)

    if chunks > 1:
        with ib.for_range(0, chunks, name="gc", kind="parallel" if parallel else "serial") as gc:
            all_rows(lo + gc * CHUNK, CHUNK)
    elif chunks == 1:
        all_rows(lo, CHUNK)
    if chunks * CHUNK < vec:
        all_rows(lo + chunks * CHUNK, vec - chunks * CHUNK)
    if vec < n:
        all_rows(lo + vec, None)


def _matvec_scalar(ib, acc, h, r, d, b, lo: int, hi: int, H: int) -> None:
    """acc[b, lo:hi] += h[b, :] · r[d, :, lo:hi], plain loops (the one-thread GPU kernel)."""
    with ib.for_range(0, H, name="k") as k:
        hk = ib.let("hk", h[b, k])
        with ib.for_range(lo, hi, name="g") as g:
            acc[b, g] = acc[b, g] + hk * r[d, k, g]


def _update(ib, mode, fns, clip, x, acc, h, c, p, y, t, b, d, j, H, lbr, input_forget, peepholes, live) -> None:
    """The state update of element (b, j) at step t; clip bounds every gate's pre-activation."""
    def pre(gate):
        return x[t, b, d, gate * H + j] + acc[b, gate * H + j]

    if mode == "rnn":
        hn = fns[0](_clip(pre(0), clip))
    elif mode == "gru":
        z = fns[0](_clip(pre(0), clip))
        if lbr:
            r = fns[0](_clip(pre(1), clip))
            hh = fns[1](_clip(x[t, b, d, 2 * H + j] + r * acc[b, 2 * H + j], clip))
        else:
            hh = fns[1](_clip(pre(2), clip))
        zv = ib.let("z", z)
        hn = (E.const(1.0, zv.dtype) - zv) * hh + zv * h[b, j]
    else:
        cp = c[b, j]
        ipre, fpre = pre(0), pre(2)
        if peepholes:
            ipre = ipre + p[d, j] * cp
            fpre = fpre + p[d, 2 * H + j] * cp
        iv = ib.let("ig", fns[0](_clip(ipre, clip)))
        fv = E.const(1.0, iv.dtype) - iv if input_forget else fns[0](_clip(fpre, clip))
        cn = ib.let("cn", fv * cp + iv * fns[1](_clip(pre(3), clip)))
        opre = pre(1)
        if peepholes:
            opre = opre + p[d, H + j] * cn
        hn = fns[0](_clip(opre, clip)) * fns[2](cn)
        c[b, j] = tir.Select(live, cn, cp)
    hv = ib.let("hn", hn)
    h[b, j] = tir.Select(live, hv, h[b, j])
    y[t, d, b, j] = tir.Select(live, hv, E.const(0.0, hv.dtype))
