"""Lowering of ``s[C].tensorize(axis, intrin)``: the loops under axis become the intrinsic's TIR.

The loops from ``axis`` inwards (the inner leaves) must cover a tile whose shape equals the
intrinsic's: for each root axis of the stage, the span of its value over the inner leaves is its
extent there. Leading axes may span 1 where the intrinsic has fewer dimensions (a batch axis of
batch_matmul under a 2-D intrinsic). The stage's expression must have the intrinsic's structure
(same operators, constants, reducer and dtypes; each intrinsic input reads one stage tensor).
An index may load from another tensor where no tiled axis reaches that load (a table of offsets,
``data[t[j] + k]`` tiled over k): the load is part of the tile's base.

Each intrinsic buffer is then bound to the region its tensor covers in the real buffer: the data
handle, the symbolic elem_offset and strides become the real ones, and loads or stores through the
intrinsic buffer become accesses of the real buffer at the region's base. A buffer in a
``wmma.*`` scope is an array of fragments, one per tile, so its elem_offset counts whole tiles:
``elem_offset // (tile elements)`` is the fragment's index.
"""

from __future__ import annotations

from kiln.errors import ScheduleError
from kiln.ir import expr as E
from kiln.ir.expr import IterType, ProducerLoad, Reduce
from kiln.ir.functor import Mutator, child_fields, substitute, uses_var
from kiln.ir.stmt import BufferStore, seq
from kiln.tir.simplify import guard_with as _guarded, simplify

from .schedule import Attach, attach_leaf



def tensorize_stmt(low, st, info, bufs, store_idx, guards):
    """The stage's loop nest with the tensorized inner loops replaced by the intrinsic's TIR."""
    axis, intrin = st.tensorized
    leaves = list(st.leaf_iter_vars)
    p = leaves.index(axis)
    tile = _Tile(f"tensorize {st.name} with {intrin.name}", st, info, leaves[p:])
    _check_nothing_attached(low, st, leaves[p:], tile.where)
    op = st.op
    values = {id(iv.var): simplify(low.domains[iv].min + info.offsets[iv]) for iv in list(op.axis) + list(op.reduce_axis)}
    data = [tile.span(values[id(iv.var)], f"axis {iv.var.name}")[1] for iv in op.axis]
    red = [tile.span(values[id(iv.var)], f"reduce axis {iv.var.name}")[1] for iv in op.reduce_axis]
    _match_extents(tile.where, "axis", [iv.var.name for iv in op.axis], data, intrin.op.axis)
    _match_extents(tile.where, "reduce axis", [iv.var.name for iv in op.reduce_axis], red, intrin.op.reduce_axis)
    loads, pairs = _match_body(tile.where, low.bodies[st][0], intrin.op.body[0])
    _match_indices(tile.where, op, intrin.op, pairs)
    rebind = _bind_buffers(low, tile, intrin, loads, values, bufs[0], store_idx)
    body, init, update = (rebind.visit(x) if x is not None else None for x in intrin.build())
    return _assemble(low, st, info, tile, leaves[:p], p, body, init, update, guards)


class _Tile:
    """The inner leaves of a tensorized stage: spans of expressions over them."""

    def __init__(self, where, st, info, inner):
        self.where = where
        self.zero, self.top = {}, {}
        for iv in inner:
            ext = simplify(info.extents[iv])
            if not isinstance(ext, E.IntImm):
                raise ScheduleError(f"{where}: loop {iv.var.name} under the tensorize axis has symbolic extent {ext}")
            if iv in st.bindings:
                raise ScheduleError(f"{where}: loop {iv.var.name} under the tensorize axis is bound to a thread")
            self.zero[id(iv.var)] = E.const(0, iv.var.dtype)
            self.top[id(iv.var)] = E.const(ext.value - 1, iv.var.dtype)

    def base(self, e):
        """e at the tile's first iteration."""
        return simplify(substitute(e, lambda v: self.zero.get(id(v))))

    def span(self, e, what):
        """(base, number of values) of e over the tile."""
        base = self.base(e)
        n = simplify(substitute(e, lambda v: self.top.get(id(v))) - base + 1)
        if not isinstance(n, E.IntImm):
            raise ScheduleError(f"{self.where}: {what} spans {n} iterations under the tensorize axis, not a constant")
        return base, n.value


def _bind_buffers(low, tile, intrin, loads, values, out_buf, store_idx):
    """A _Rebind of the intrinsic's buffers to the regions the tile reads and writes."""
    binds: dict = {}
    vmap: dict = {}
    for t, ibuf in zip(intrin.inputs, intrin.buffers):
        load = loads.get(id(t))
        if load is None:
            raise ScheduleError(f"{tile.where}: the stage never reads the intrinsic's input {t.name}")
        spans = [tile.span(simplify(substitute(i, lambda v: values.get(id(v)))), f"index {k} of {load.producer.name}")
                 for k, i in enumerate(load.indices)]
        _match_region(tile.where, load.producer.name, [n for _, n in spans], t)
        real = _Loads(low).visit(ProducerLoad(load.producer, tuple(b for b, _ in spans), load.dtype))
        _bind(tile.where, ibuf, real.buffer, real.indices, binds, vmap)
    _bind(tile.where, intrin.buffers[len(intrin.inputs)], out_buf, [tile.base(i) for i in store_idx], binds, vmap)
    return _Rebind(binds, vmap)


def _assemble(low, st, info, tile, outer, p, body, init, update, guards):
    """The outer loops around body, or around reduce_update with reduce_init before the
    reduction loops when some of them stay outside the tile."""
    base_guards = [tile.base(g) for g in list(guards) + list(info.reduce_guards)]
    reduce_outer = [iv for iv in outer if iv.iter_type == IterType.COMM_REDUCE]
    if not reduce_outer or not st.op.reduce_axis:
        if body is None:
            body = seq(init, update)
        return low._nest(st, outer, info, _guarded(body, base_guards))
    if init is None or update is None:
        raise ScheduleError(f"{tile.where}: the reduction continues outside the tensorize axis "
                            f"({', '.join(iv.var.name for iv in reduce_outer)}), so the intrinsic must return "
                            "(body, reduce_init, reduce_update)")
    leaves = list(st.leaf_iter_vars)
    first = leaves.index(reduce_outer[0])
    init_loops = [iv for iv in leaves[first:p] if iv.iter_type != IterType.COMM_REDUCE]
    init_guards = [g for g in base_guards if not _uses_any(g, reduce_outer)]
    init_nest = low._nest(st, init_loops, info, _guarded(init, init_guards), attach=False)
    return low._nest(st, outer, info, _guarded(update, base_guards), before={first: init_nest})


def _check_nothing_attached(low, st, inner, where):

    ids = {id(iv) for iv in inner}
    for c in low.active:
        if c.attach == Attach.SCOPE and c.attach_stage is st and id(attach_leaf(st, c.attach_ivar)) in ids:
            raise ScheduleError(f"{where}: stage {c.name} is computed inside the tensorized loops; "
                                "compute it at the tensorize axis or further out")


def _match_extents(where, what, names, got, intrin_axes):
    want = [iv.dom.extent.value if isinstance(iv.dom.extent, E.IntImm) else None for iv in intrin_axes]
    lead = len(got) - len(want)
    if lead < 0 or any(n != 1 for n in got[:lead]):
        raise ScheduleError(f"{where}: the loops under the axis cover {what} extents {got} "
                            f"({', '.join(names)}), the intrinsic has {want}")
    for name, n, w in zip(names[lead:], got[lead:], want):
        if n != w:
            raise ScheduleError(f"{where}: {what} {name} covers {n} iterations under the tensorize axis, "
                                f"the intrinsic expects {w}; split it by {w}")


def _match_region(where, name, extents, t):
    want = [s.value if isinstance(s, E.IntImm) else None for s in t.shape]
    lead = len(extents) - len(want)
    if lead < 0 or any(n != 1 for n in extents[:lead]) or list(extents[lead:]) != want:
        raise ScheduleError(f"{where}: the tile reads a {extents} region of {name}, the intrinsic's input "
                            f"{t.name} has shape {want}")


def _match_indices(where, op, iop, pairs) -> None:
    """Each load indexes its tile as the intrinsic's does (a[i, k] is not b[k, i]): the stage's
    axes that the intrinsic covers become the intrinsic's, the others (tile bases) drop out."""
    from kiln.ir.structural import structural_equal

    vmap = {}
    for mine, theirs in ((op.axis, iop.axis), (op.reduce_axis, iop.reduce_axis)):
        lead = len(mine) - len(theirs)
        for k, iv in enumerate(mine):
            vmap[id(iv.var)] = theirs[k - lead].var if k >= lead else E.const(0, iv.var.dtype)
    # structural_equal matches free Vars by first appearance: list the intrinsic's axes first.
    pin = tuple(iv.var for iv in list(iop.axis) + list(iop.reduce_axis))

    def same(u, v):
        return structural_equal(E.Call(E.const(0).dtype, "pin", pin + (u,)), E.Call(E.const(0).dtype, "pin", pin + (v,)))

    covered = {id(v) for v, t in ((iv.var, vmap.get(id(iv.var))) for iv in list(op.axis) + list(op.reduce_axis))
               if isinstance(t, E.Var)}

    class _Bases(Mutator):  # a load in an index (a table of offsets) that no covered axis reads is a base too
        def visit_ProducerLoad(self, ld):
            if uses_var(ld, lambda v: id(v) in covered):
                return self.generic_visit(ld)
            return E.const(0, ld.dtype)

    for x, y in pairs:
        lead = len(x.indices) - len(y.indices)
        for d, (i, j) in enumerate(zip(x.indices[lead:], y.indices)):
            got = simplify(substitute(_Bases().visit(i),
                                      lambda v: vmap.get(id(v), E.const(0, v.dtype) if v.dtype.is_int else None)))
            if not same(got, simplify(j)):
                raise ScheduleError(f"{where}: {x.producer.name} is read at index {i} (dim {lead + d}), which in the "
                                    f"tile is {got}; the intrinsic reads {y.producer.name} at {j}")


def _match_body(where, a, b) -> tuple:
    """({id(intrinsic input tensor): a stage load of the tensor it stands for}, (stage load,
    intrinsic load) pairs), or a ScheduleError."""
    loads: dict = {}
    mapped: dict = {}
    pairs: list = []

    def fail(msg):
        raise ScheduleError(f"{where}: the stage's expression does not match the intrinsic's: {msg}")

    def same(x, y):
        if type(x) is not type(y):
            fail(f"{x} where the intrinsic has {y}")
        if isinstance(x, E.PrimExpr) and x.dtype != y.dtype:
            fail(f"{x} is {x.dtype} where the intrinsic's {y} is {y.dtype}")
        if isinstance(x, ProducerLoad):
            prev = mapped.setdefault(id(y.producer), x.producer)
            if prev is not x.producer:
                fail(f"the intrinsic's input {y.producer.name} stands for both {prev.name} and {x.producer.name}")
            loads.setdefault(id(y.producer), x)
            pairs.append((x, y))
            return
        if isinstance(x, Reduce):
            if x.combiner.name != y.combiner.name:
                fail(f"reducer {x.combiner.name} where the intrinsic has {y.combiner.name}")
            if len(x.source) != len(y.source):
                fail("a different number of reduced values")
            for s, t in zip(x.source, y.source):
                same(s, t)
            return
        if isinstance(x, (E.IntImm, E.FloatImm)):
            if x.value != y.value:
                fail(f"constant {x.value} where the intrinsic has {y.value}")
            return
        if isinstance(x, E.Var):
            return
        for f in child_fields(x):
            u, v = getattr(x, f), getattr(y, f)
            if isinstance(u, tuple):
                if len(u) != len(v):
                    fail(f"{x} where the intrinsic has {y}")
                for p, q in zip(u, v):
                    if isinstance(p, E.PrimExpr):
                        same(p, q)
            elif isinstance(u, E.PrimExpr):
                same(u, v)

    same(a, b)
    return loads, pairs


def _bind(where, ibuf, real, base, binds, vmap):
    """Bind intrinsic buffer ibuf to the region of real starting at base (one index per real dim)."""
    base = [simplify(b) for b in base]
    n = len(ibuf.shape)
    lead = len(base) - n
    if lead < 0:
        raise ScheduleError(f"{where}: buffer {ibuf.name} has {n} dims, more than {real.name} ({len(base)})")
    if ibuf.dtype != real.dtype:
        raise ScheduleError(f"{where}: buffer {ibuf.name} is {ibuf.dtype} but {real.name} is {real.dtype}")
    if ibuf.scope != "global" and ibuf.scope != real.scope:
        raise ScheduleError(f"{where}: buffer {ibuf.name} is declared in scope {ibuf.scope!r} but {real.name} "
                            f"is in {real.scope!r}; give the stage that scope (cache_read/cache_write/set_scope)")
    strides = list(real.strides) if real.strides else _compact_strides(real.shape)
    vmap[id(ibuf.data)] = real.data
    if isinstance(ibuf.elem_offset, E.Var):
        vmap[id(ibuf.elem_offset)] = _offset(real, base, ibuf, lead, strides)
    if ibuf.strides:
        for s, r in zip(ibuf.strides, strides[lead:]):
            if isinstance(s, E.Var):
                vmap[id(s)] = r
    else:
        # A compact intrinsic buffer needs a compact region: the real rows must be as long.
        for d in range(1, n):
            real_dim, want = simplify(real.shape[lead + d]), simplify(ibuf.shape[d])
            if not (isinstance(real_dim, E.IntImm) and isinstance(want, E.IntImm) and real_dim.value == want.value):
                raise ScheduleError(f"{where}: buffer {ibuf.name} is compact but its region of {real.name} is not "
                                    f"(dim {lead + d}: {real_dim} vs {want}); declare it with "
                                    "strides=[te.var(...), ..., 1]")
    binds[id(ibuf)] = (real, base, lead)


class _Loads(Mutator):
    """Tensor loads -> buffer loads, those in the indices too (a region based at a table's entry)."""

    def __init__(self, low):
        super().__init__()
        self.low = low

    def visit_ProducerLoad(self, ld):
        return self.low.load(self.generic_visit(ld))


def _offset(real, base, ibuf, lead, strides):
    if real.scope.startswith(("wmma.", "wgmma.")):
        # Fragments are whole tiles: number the tile, then count in tile-sized elements.
        tile = 1
        for s in ibuf.shape:
            tile *= s.value
        index = E.const(0, base[0].dtype)
        for d, b in enumerate(base):
            t = ibuf.shape[d - lead].value if d >= lead else 1
            index = index * simplify(E.FloorDiv(real.shape[d], E.const(t, real.shape[d].dtype), real.shape[d].dtype)) \
                + E.FloorDiv(b, E.const(t, b.dtype), b.dtype)
        return simplify(index * tile)
    out = E.const(0, base[0].dtype)
    for b, s in zip(base, strides):
        out = out + b * s
    return simplify(out)


def _compact_strides(shape):
    out, stride = [], E.const(1, shape[-1].dtype)
    for d in reversed(shape):
        out.append(stride)
        stride = simplify(stride * d)
    return out[::-1]


class _Rebind(Mutator):
    """Intrinsic buffers -> the real buffers at their regions; their Vars -> the real values."""

    def __init__(self, binds, vmap):
        super().__init__()
        self.binds, self.vmap = binds, vmap

    def visit_Var(self, v):
        return self.vmap.get(id(v), v)

    def _indices(self, buf, indices):
        real, base, lead = self.binds[id(buf)]
        return real, tuple(base[:lead]) + tuple(simplify(b + i) for b, i in zip(base[lead:], indices))

    def visit_BufferLoad(self, e):
        e = self.generic_visit(e)
        if id(e.buffer) not in self.binds:
            return e
        real, idx = self._indices(e.buffer, e.indices)
        return E.BufferLoad(real, idx, e.dtype)

    def visit_BufferStore(self, s):
        s = self.generic_visit(s)
        if id(s.buffer) not in self.binds:
            return s
        real, idx = self._indices(s.buffer, s.indices)
        return BufferStore(real, s.value, idx)


def _uses_any(e, ivs) -> bool:
    from kiln.ir.functor import uses_var

    ids = {id(iv.var) for iv in ivs}
    return uses_var(e, lambda v: id(v) in ids)
