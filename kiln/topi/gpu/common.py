"""What every GPU schedule shares: the thread budget of the target, binding a stage's data loops
to blocks and threads, and the unroll pragmas.

Schedules here are written for the target key ``gpu`` (OpenCL today, CUDA later): they use only
thread binding, storage scopes (``shared`` / ``local``) and barriers, which the GPU lowering
provides for every backend.
"""

from __future__ import annotations

from kiln import te
from kiln.te.tensor import ComputeOp

from ..generic.default import inline_injective, is_injective  # noqa: F401  (re-exported)
from ..utils import const_int


def as_list(outs) -> list:
    return [outs] if isinstance(outs, te.Tensor) else list(outs)


def max_threads(target=None) -> int:
    """Work-items per work-group the target allows (``-max_num_threads``; 256 by default)."""
    from kiln.target import Target

    target = target or Target.current(allow_none=True)
    attrs = getattr(target, "attrs", None) or {}
    return int(attrs.get("max_num_threads", 256) or 256)


def block(axis: str = "x"):
    return te.thread_axis(f"blockIdx.{axis}")


def thread(axis: str = "x"):
    return te.thread_axis(f"threadIdx.{axis}")


def extent(iv) -> int:
    return const_int(iv.dom.extent)


def bind_flat(s, t, threads: int | None = None):
    """Fuse t's data loops, split them into work-groups of ``threads`` work-items and bind them.
    Returns the thread loop (stages computed per work-item attach there), or None for a scalar."""
    st = s[t]
    axes = list(st.op.axis)
    if not axes:
        return None
    total = 1
    for a in axes:
        total *= extent(a)
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    threads = threads or max_threads()
    # A divisor avoids a ragged last group (no bounds check in the kernel); a prime-ish total
    # falls back to the full width with a guard.
    n = _divisor_near(total, threads)
    bx, tx = st.split(fused, factor=n)
    st.bind(bx, block("x"))
    st.bind(tx, thread("x"))
    return tx


def flat_kernel(s, t, threads: int = 256) -> None:
    """t as a kernel of its own over its elements (an epilogue reading a product back): its data
    loops fused into blocks of ``threads`` work-items, fewer where the target allows fewer
    (``max_threads``); the last block guarded where they do not divide (bind_flat picks a divisor)."""
    st = s[t]
    axes = list(st.op.axis)
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, tx = st.split(fused, factor=min(threads, max_threads()))
    st.bind(bx, block("x"))
    st.bind(tx, thread("x"))


def _divisor_near(total: int, limit: int) -> int:
    if total <= limit:
        return total
    for d in range(limit, max(limit // 4, 1) - 1, -1):
        if total % d == 0:
            return d
    return limit


def producers(t) -> list:
    """Compute stages t reads, transitively, stopping at placeholders (each once, consumers first)."""
    out, seen, stack = [], set(), list(t.op.input_tensors)
    while stack:
        u = stack.pop()
        if id(u.op) in seen or not isinstance(u.op, ComputeOp):
            continue
        seen.add(id(u.op))
        out.append(u)
        stack.extend(u.op.input_tensors)
    return out


def attach_remaining(s, out, at, skip=()) -> None:
    """Stages that are neither inlined nor placed yet are computed where ``out`` needs them: at
    loop ``at`` of ``out`` (bound inference computes only the region one iteration reads)."""
    skip_ops = {id(t.op) for t in skip}
    for u in producers(out):
        st = s[u]
        if id(u.op) in skip_ops or st.attach.value != "root":
            continue
        st.compute_at(s[out], at)
        st.set_scope("local")


def unroll_pragmas(st, axis, cfg=None, default_step: int = 512, default_explicit: bool = True) -> None:
    """TVM's ``auto_unroll_max_step`` / ``unroll_explicit`` on the loop nest below ``axis``."""
    from ..utils import knob

    step = knob(cfg, "auto_unroll_max_step", default_step)
    explicit = knob(cfg, "unroll_explicit", default_explicit)
    if step:
        st.pragma(axis, "auto_unroll_max_step", int(step))
        st.pragma(axis, "unroll_explicit", bool(explicit))


def schedule_per_item(outs, cfg=None):
    """Any operator graph, correct on every GPU: injective stages inlined; each output's data
    loops bound to work-groups x work-items; every other stage (reductions) computed inside the
    work-item of the first output that needs it (serial in the work-item)."""
    del cfg
    outs = as_list(outs)
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)
    placed = set()
    for out in outs:
        if not isinstance(out.op, ComputeOp) or id(out.op) in placed:
            continue
        placed.add(id(out.op))
        tx = bind_flat(s, out)
        if tx is None:
            continue
        others = [o for o in outs if id(o.op) != id(out.op)]
        attach_remaining(s, out, tx, skip=others)
    # A scalar output or stages shared by several outputs: one work-item computes them.
    for st in list(s.stages):
        if isinstance(st.op, ComputeOp) and st.attach.value == "root" and not st.bindings:
            if not any(st.kinds.get(iv) for iv in st.leaf_iter_vars):
                _bind_single(s, st)
    return s


def _bind_single(s, st) -> None:
    if st.op.axis:
        bind_flat(s, st.op.output(0))
