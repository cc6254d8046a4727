"""Injective (elementwise, broadcast, reshape-like) schedules for x86."""

from __future__ import annotations

from kiln import te

from ..utils import const_int


def is_injective(op) -> bool:
    return "injective" in op.tag or "elemwise" in op.tag or "broadcast" in op.tag


def inline_injective_between(s, out, anchor):
    """Inline every injective stage that lies between anchor and out (exclusive)."""
    stack, seen = [out], set()
    while stack:
        t = stack.pop()
        if id(t.op) in seen or t.op is anchor.op:
            continue
        seen.add(id(t.op))
        if t is not out and isinstance(t.op, te.ComputeOp) and is_injective(t.op) and _depends_on(t, anchor):
            s[t].compute_inline()
        stack.extend(t.op.input_tensors)


def _depends_on(t, anchor) -> bool:
    stack, seen = [t], set()
    while stack:
        u = stack.pop()
        if u.op is anchor.op:
            return True
        if id(u.op) in seen:
            continue
        seen.add(id(u.op))
        stack.extend(getattr(u.op, "input_tensors", []))
    return False


def schedule_injective_stage(s, t, lanes: int = 16, min_parallel: int = 1024) -> None:
    """Vectorize the innermost axis (split to a vector width), parallelize the outer ones."""
    st = s[t]
    axes = list(st.op.axis)
    if not axes:
        return
    shape = [const_int(a.dom.extent) for a in axes]
    total = 1
    for d in shape:
        total *= d
    inner = axes[-1]
    if shape[-1] >= lanes:
        outer_x, inner = st.split(inner, factor=lanes)
        st.vectorize(inner)
        outer = axes[:-1] + [outer_x]
    elif len(axes) > 1:
        outer = axes[:-1]
        if shape[-1] in (2, 4, 8):
            st.vectorize(inner)
    else:
        return
    if total >= min_parallel and outer:
        fused = st.fuse(*outer) if len(outer) > 1 else outer[0]
        st.parallel(fused)


def _same_shape(a, b) -> bool:
    try:
        return [const_int(x) for x in a.shape] == [const_int(x) for x in b.shape]
    except Exception:  # noqa: BLE001 - symbolic shapes: be conservative
        return False


def tile_root(s, out, shaped, anchor):
    """The tensor whose loops get the anchor's register tile.

    ``shaped`` is the anchor's output in the op's public shape (e.g. the NCHW unpack of a blocked
    conv). If ``out`` has that shape, the epilogue between them is elementwise: inline it and tile
    ``out``. Otherwise (a fused reshape, flatten, ...) tile ``shaped`` itself and give ``out``
    the default parallel/vectorized loops.
    """
    if out.op is shaped.op or _same_shape(out, shaped):
        inline_injective_between(s, out, anchor)
        return out
    from ..generic.default import schedule_stage

    inline_injective_between(s, out, shaped)
    inline_injective_between(s, shaped, anchor)
    schedule_stage(s, out)
    return shaped
