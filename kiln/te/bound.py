"""Bound inference: loop extents of every stage, and the region a compute_at stage must produce.

Each stage's root axes get a Range. Root stages cover their whole shape. A stage attached with
``compute_at(P, axis)`` covers the union of what P reads from it while P's loops at and above
``axis`` are fixed (symbolic) and the loops below range fully: its Ranges are expressions in P's
outer loop variables with (usually) constant extents.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.ir import expr as E
from kiln.ir.expr import IntImm, IterType, IterVar, PrimExpr, ProducerLoad, Range, Var, const
from kiln.ir.functor import Visitor, substitute
from kiln.tir.simplify import Analyzer, simplify

from .schedule import Attach, Fuse, Split, Stage, attach_leaf


@dataclass
class LeafInfo:
    """For one stage: the extent of every axis, the offset expression of every root axis in
    terms of the leaf loop variables, and the guards that non-divisible splits need."""

    extents: dict  # IterVar -> PrimExpr (extent; leaf loops run over [0, extent))
    offsets: dict  # root IterVar -> PrimExpr in leaf vars
    guards: list  # (IterVar root-or-intermediate, condition) ; condition: offset < extent
    reduce_guards: list


def ceildiv(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return simplify(E.FloorDiv(a + (b - 1), b, a.dtype))


def leaf_info(stage: Stage, domains: dict) -> LeafInfo:
    extents: dict = {iv: domains[iv].extent for iv in stage.all_iter_vars if iv in domains}
    splits_exact: dict = {}
    for rel in stage.relations:
        if isinstance(rel, Split):
            ext = extents[rel.parent]
            if rel.factor is not None:
                extents[rel.outer] = ceildiv(ext, rel.factor)
                extents[rel.inner] = rel.factor
            else:
                extents[rel.outer] = rel.nparts
                extents[rel.inner] = ceildiv(ext, rel.nparts)
            prod = simplify(extents[rel.outer] * extents[rel.inner])
            diff = simplify(prod - ext)
            splits_exact[rel] = isinstance(diff, IntImm) and diff.value == 0
        elif isinstance(rel, Fuse):
            extents[rel.fused] = simplify(extents[rel.outer] * extents[rel.inner])
    values: dict = {iv: iv.var for iv in stage.leaf_iter_vars}
    guards = []
    reduce_guards = []
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            value = simplify(values[rel.outer] * extents[rel.inner] + values[rel.inner])
            values[rel.parent] = value
            if not splits_exact[rel]:
                cond = E.LT(value, extents[rel.parent], _bool())
                (reduce_guards if rel.parent.iter_type == IterType.COMM_REDUCE else guards).append(cond)
        elif isinstance(rel, Fuse):
            inner_ext = extents[rel.inner]
            values[rel.outer] = E.FloorDiv(values[rel.fused], inner_ext, values[rel.fused].dtype)
            values[rel.inner] = E.FloorMod(values[rel.fused], inner_ext, values[rel.fused].dtype)
    offsets = {iv: values[iv] for iv in _roots(stage)}
    return LeafInfo(extents, offsets, guards, reduce_guards)


def _bool():
    from kiln.ir.dtype import BOOL_T

    return BOOL_T


def _roots(stage: Stage) -> list[IterVar]:
    op = stage.op
    return list(getattr(op, "axis", [])) + list(getattr(op, "reduce_axis", []))


def root_intervals(stage: Stage, domains: dict, info: LeafInfo, fixed_upto: IterVar | None,
                   relax: frozenset = frozenset()) -> dict:
    """Interval (lo, hi) of each root axis value when leaves up to fixed_upto are fixed.

    Leaves in relax (ids) range fully even above fixed_upto: the GPU thread axes whose
    threads share the attached stage's memory (a shared stage serves its whole block)."""
    leaf_iv = leaf_intervals(stage, info, fixed_upto, relax)
    out = {}
    for root, off in info.offsets.items():
        lo, hi = eval_interval(off, leaf_iv)
        base = domains[root].min
        out[id(root.var)] = (simplify(base + lo), simplify(base + hi))
    return out


def leaf_intervals(stage: Stage, info: LeafInfo, fixed_upto: IterVar | None,
                   relax: frozenset = frozenset()) -> dict:
    """Interval of each leaf loop variable (by id): itself up to fixed_upto, else its range."""
    fixed = fixed_upto is not None
    leaf_iv: dict = {}
    for iv in stage.leaf_iter_vars:
        if fixed and id(iv) not in relax:
            leaf_iv[id(iv.var)] = (iv.var, iv.var)
        else:
            leaf_iv[id(iv.var)] = (const(0, iv.var.dtype), simplify(info.extents[iv] - 1))
        if iv is fixed_upto:  # also when the attach loop itself is a relaxed thread loop
            fixed = False
    return leaf_iv


def _tighter(a: tuple, b: tuple) -> tuple:
    """The narrower of two intervals of one index, judged by constant extents."""
    if b[0] is None or b[1] is None:
        return a
    extent_b = simplify(b[1] - b[0])
    if not isinstance(extent_b, IntImm):
        return a
    if a[0] is None or a[1] is None:
        return b
    extent_a = simplify(a[1] - a[0])
    return b if not isinstance(extent_a, IntImm) or extent_b.value < extent_a.value else a


def eval_interval(e: PrimExpr, iv: dict) -> tuple[PrimExpr, PrimExpr]:
    """Symbolic inclusive bounds of e when each Var v with id in iv ranges over iv[id(v)]."""
    t = type(e)
    if isinstance(e, Var):
        return iv.get(id(e), (e, e))
    if t in (IntImm, E.FloatImm):
        return (e, e)
    if t is E.Add:
        a, b = eval_interval(e.a, iv), eval_interval(e.b, iv)
        return (simplify(a[0] + b[0]), simplify(a[1] + b[1]))
    if t is E.Sub:
        a, b = eval_interval(e.a, iv), eval_interval(e.b, iv)
        return (simplify(a[0] - b[1]), simplify(a[1] - b[0]))
    if t is E.Mul:
        if isinstance(e.b, IntImm):
            a = eval_interval(e.a, iv)
            c = e.b
        elif isinstance(e.a, IntImm):
            a = eval_interval(e.b, iv)
            c = e.a
        else:
            return _unknown(e, iv)
        if c.value >= 0:
            return (simplify(a[0] * c), simplify(a[1] * c))
        return (simplify(a[1] * c), simplify(a[0] * c))
    if t in (E.FloorDiv,) and isinstance(e.b, IntImm) and e.b.value > 0:
        a = eval_interval(e.a, iv)
        return (simplify(E.FloorDiv(a[0], e.b, e.dtype)), simplify(E.FloorDiv(a[1], e.b, e.dtype)))
    if t is E.FloorMod and isinstance(e.b, IntImm) and e.b.value > 0:
        a = eval_interval(e.a, iv)
        if _same(a[0], a[1]):
            return (simplify(E.FloorMod(a[0], e.b, e.dtype)),) * 2
        return (const(0, e.dtype), const(e.b.value - 1, e.dtype))
    if t in (E.Min, E.Max):
        a, b = eval_interval(e.a, iv), eval_interval(e.b, iv)
        return (simplify(t(a[0], b[0], e.dtype)), simplify(t(a[1], b[1], e.dtype)))
    if t is E.Cast:
        a = eval_interval(e.value, iv)
        return (E.cast(a[0], e.dtype), E.cast(a[1], e.dtype))
    return _unknown(e, iv)


def _unknown(e, iv):
    if _depends(e, iv):
        return (None, None)
    return (e, e)


def _depends(e, iv) -> bool:
    from kiln.ir.functor import uses_var

    return uses_var(e, lambda v: id(v) in iv and iv[id(v)][0] is not v)


def _same(a, b) -> bool:
    from kiln.ir.structural import structural_equal

    return a is b or structural_equal(a, b)


class _Reads(Visitor):
    """All ProducerLoads of the given tensors in an expression."""

    def __init__(self, tensors: set):
        super().__init__()
        self.tensors = tensors
        self.found: list[ProducerLoad] = []

    def visit_ProducerLoad(self, load):
        if id(load.producer) in self.tensors:
            self.found.append(load)
        self.generic_visit(load)


def infer_region(stage: Stage, consumers: list, domains: dict, infos: dict, bodies: dict) -> dict:
    """The Ranges of stage's root axes needed by its consumers at stage's attach point."""
    tensors = {id(t) for t in stage.outputs} | {id(t) for t in stage.op.outputs}
    ndim = len(stage.op.outputs[0].shape)
    lows: list[list] = [[] for _ in range(ndim)]
    highs: list[list] = [[] for _ in range(ndim)]
    for cons in consumers:
        fixed = None
        if cons is stage.attach_stage:
            fixed = attach_leaf(cons, stage.attach_ivar)
        relax = shared_thread_leaves(cons, stage.scope)
        intervals = root_intervals(cons, domains, infos[cons], fixed, relax)
        # Through a fused loop each root axis ranges over whole rows, but an index that puts the
        # rows back together (y * W + x) spans only the tile: evaluate it on the leaves as well.
        if any(isinstance(rel, Fuse) for rel in cons.relations):
            leaves = leaf_intervals(cons, infos[cons], fixed, relax)
            in_leaves = {root.var: simplify(domains[root].min + off) for root, off in infos[cons].offsets.items()}
        else:
            leaves = None
        outer = _path_relaxed(cons, stage, infos)
        reader = _Reads(tensors)
        for b in bodies[cons]:
            reader.visit(b)
        for load in reader.found:
            for d, idx in enumerate(load.indices):
                lo, hi = eval_interval(idx, intervals)
                if leaves is not None:
                    lo, hi = _tighter((lo, hi), eval_interval(simplify(substitute(idx, in_leaves)), leaves))
                if outer and lo is not None and hi is not None:
                    lo, hi = eval_interval(lo, outer)[0], eval_interval(hi, outer)[1]
                if lo is None or hi is None:
                    lo, hi = const(0, idx.dtype), simplify(stage.op.outputs[0].shape[d] - 1)
                lows[d].append(lo)
                highs[d].append(hi)
    shape = stage.op.outputs[0].shape
    out = {}
    for d, axis in enumerate(stage.op.axis):
        if not lows[d]:
            out[axis] = Range(const(0, shape[d].dtype), shape[d])
            continue
        lo = lows[d][0]
        for x in lows[d][1:]:
            lo = simplify(E.Min(lo, x, lo.dtype))
        hi = highs[d][0]
        for x in highs[d][1:]:
            hi = simplify(E.Max(hi, x, hi.dtype))
        out[axis] = Range(lo, simplify(hi - lo + 1))
    return out


# A stage in memory of scope rank r is shared by the threads of every thread axis of rank >= r,
# so its region spans those axes (global: all threads; shared: a block's; local: one thread's).
_SCOPE_RANK = {"global": 0, "shared": 1, "warp": 2, "local": 3,
               # tensor-core fragments belong to one warp (its lanes are threadIdx.x, never in their loops)
               "wmma.matrix_a": 2, "wmma.matrix_b": 2, "wmma.accumulator": 2,
               # Hopper's warpgroup accumulators (kiln/codegen/cuda_wgmma.py): the same, 128 lanes
               "wgmma.accumulator": 2}


def thread_rank(tag: str) -> int | None:
    if tag.startswith("blockIdx"):
        return 0
    if tag.startswith("threadIdx") or tag.startswith("vthread"):
        return 1
    return None


def shared_thread_leaves(consumer: Stage, scope: str) -> frozenset:
    """ids of consumer's leaves bound to thread axes whose threads share memory of scope."""
    rank = _SCOPE_RANK.get(scope, 3 if scope.startswith("local.") else 0)
    out = set()
    for iv, thread in consumer.bindings.items():
        r = thread_rank(thread.thread_tag)
        if r is not None and rank <= r:
            out.add(id(iv))
    return frozenset(out)


def _path_relaxed(cons: Stage, stage: Stage, infos: dict) -> dict:
    """Intervals of the loops on cons's attach path that stage's region must span.

    cons's region is written in the loop variables of the stages it is attached under. Those
    loops that run inside stage's attach point (a local cache read from a shared one, attached
    deeper) range fully; those outside it stay fixed, except the GPU thread loops whose threads
    share stage's memory (a shared stage serves its whole block)."""
    if stage.attach != Attach.SCOPE:
        return {}
    target = stage.attach_stage
    target_leaf = attach_leaf(target, stage.attach_ivar)
    out: dict = {}
    reached = cons is target
    p = cons
    while p.attach == Attach.SCOPE and p.attach_stage in infos:
        parent = p.attach_stage
        leaf = attach_leaf(parent, p.attach_ivar)
        path = parent.leaf_iter_vars[:parent.leaf_iter_vars.index(leaf) + 1]
        threads = shared_thread_leaves(parent, stage.scope)
        if reached:
            first_inside = len(path)  # above stage's attach point: only shared thread loops
        elif parent is target:
            first_inside = parent.leaf_iter_vars.index(target_leaf) + 1
        else:
            first_inside = 0  # a stage between cons and stage's attach point: all its loops
        for k, iv in enumerate(path):
            if k >= first_inside or id(iv) in threads:
                out[id(iv.var)] = (const(0, iv.var.dtype), simplify(infos[parent].extents[iv] - 1))
        if parent is target:
            reached = True
        p = parent
    return out


def full_domains(stage: Stage) -> dict:
    op = stage.op
    out = {}
    for iv in getattr(op, "axis", []):
        out[iv] = iv.dom
    for iv in getattr(op, "reduce_axis", []):
        out[iv] = iv.dom
    return out


_ = Attach
