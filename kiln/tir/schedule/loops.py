"""Loop primitives: split, fuse, reorder, and the loop kinds (parallel, vectorize, unroll, bind).

Each takes a function body and returns the new one; blocks under a changed loop get their
iteration values rewritten in terms of the new loops (simplified), and a split whose factors
overshoot the extent adds ``T.where`` predicates to those blocks.
"""

from __future__ import annotations

from dataclasses import replace as _with

from kiln.errors import ScheduleError
from kiln.ir import expr as E
from kiln.ir.block import BlockRealize
from kiln.ir.functor import Mutator, substitute, uses_var
from kiln.ir.stmt import For, ForKind, IfThenElse
from kiln.tir.simplify import simplify

from . import tree


class _Rebind(Mutator):
    """Substitute loop variables in block bindings and loop bounds; AND a predicate into each block."""

    def __init__(self, mapping: dict, predicate=None):
        super().__init__()
        self.mapping, self.predicate = mapping, predicate

    def visit_Var(self, v):
        return self.mapping.get(v, v)

    def visit_BlockRealize(self, op: BlockRealize):
        values = tuple(simplify(substitute(v, self.mapping)) for v in op.iter_values)
        pred = simplify(substitute(op.predicate, self.mapping))
        if self.predicate is not None:
            pred = self.predicate if _true(pred) else E.And(pred, self.predicate, E.BOOL_T)
        return _with(op, iter_values=values, predicate=pred)


def _true(e) -> bool:
    return isinstance(e, E.IntImm) and bool(e.value)


def _blocks_under(stmt) -> list:
    return [n for n, _ in tree.find_all(stmt, lambda n: isinstance(n, BlockRealize))]


def split(body, var, factors) -> tuple:
    loop, _ = tree.loop(body, var)
    name = var.name
    if not factors or sum(f is None for f in factors) > 1:
        raise ScheduleError(f"split: loop {name}: give the factors as a list with at most one None, e.g. [None, 32]")
    dt = var.dtype
    known = E.const(1, dt)
    for f in factors:
        if f is not None:
            f = E.convert(f) if not isinstance(f, E.PrimExpr) else f
            if isinstance(f, E.IntImm) and f.value <= 0:
                raise ScheduleError(f"split: loop {name}: factor {f.value} must be positive")
            known = known * E.cast(f, dt)
    known = simplify(known)
    extent = loop.extent
    sizes = [simplify(E.cast(E.convert(f), dt)) if f is not None else
             simplify(E.FloorDiv(extent + known - 1, known, dt)) for f in factors]
    total = E.const(1, dt)
    for s in sizes:
        total = total * s
    total = simplify(total)
    short = simplify(total - extent)
    if isinstance(short, E.IntImm) and short.value < 0:
        raise ScheduleError(f"split: loop {name}: the factors multiply to {total}, less than its extent {extent}")
    new_vars = [E.Var(f"{name}_{k}", dt) for k in range(len(sizes))]
    value = None
    for k, v in enumerate(new_vars):
        stride = E.const(1, dt)
        for s in sizes[k + 1:]:
            stride = stride * s
        stride = simplify(stride)
        term = v if isinstance(stride, E.IntImm) and stride.value == 1 else v * stride
        value = term if value is None else value + term
    if not (isinstance(loop.min, E.IntImm) and loop.min.value == 0):
        value = loop.min + value
    exact = isinstance(short, E.IntImm) and short.value == 0
    pred = None if exact else E.LT(value, simplify(loop.min + extent), E.BOOL_T)
    inner = _Rebind({var: value}, pred).visit(loop.body)
    if pred is not None and not _blocks_under(loop.body):
        inner = IfThenElse(pred, inner)
    for v, s in reversed(list(zip(new_vars, sizes))):
        inner = For(v, E.const(0, dt), s, ForKind.SERIAL, inner)
    return tree.replace(body, loop, inner), new_vars


def fuse(body, vars_) -> tuple:
    if len(vars_) < 2:
        raise ScheduleError("fuse: give at least two loops")
    loops = [tree.loop(body, v)[0] for v in vars_]
    for outer, inner in zip(loops, loops[1:]):
        if outer.body is not inner:
            raise ScheduleError(f"fuse: loop {inner.loop_var.name} is not directly inside loop {outer.loop_var.name} "
                                "(only perfectly nested loops, outermost first, can be fused)")
    for lp in loops:
        if not (isinstance(lp.min, E.IntImm) and lp.min.value == 0):
            raise ScheduleError(f"fuse: loop {lp.loop_var.name} starts at {lp.min}; fuse loops that start at 0")
        if lp.kind != ForKind.SERIAL:
            raise ScheduleError(f"fuse: loop {lp.loop_var.name} is already {lp.kind.name.lower()}; fuse before "
                                "annotating loops")
    dt = loops[0].loop_var.dtype
    fused = E.Var("_".join(lp.loop_var.name for lp in loops) + "_fused", dt)
    mapping, stride = {}, E.const(1, dt)
    for k in range(len(loops) - 1, -1, -1):
        lp = loops[k]
        value = fused if k == len(loops) - 1 or _one(stride) else E.FloorDiv(fused, stride, dt)
        if k > 0:
            value = E.FloorMod(value, lp.extent, dt)
        mapping[lp.loop_var] = value
        stride = simplify(stride * lp.extent)
    inner = _Rebind(mapping).visit(loops[-1].body)
    return tree.replace(body, loops[0], For(fused, E.const(0, dt), stride, ForKind.SERIAL, inner)), fused


def _one(e) -> bool:
    return isinstance(e, E.IntImm) and e.value == 1


def reorder(body, vars_) -> object:
    loops = [tree.loop(body, v) for v in vars_]
    if len({id(v) for v in vars_}) != len(vars_):
        raise ScheduleError("reorder: a loop appears twice")
    for a, anc_a in loops:
        for b, anc_b in loops:
            if a is not b and not any(x is a for x in anc_b) and not any(x is b for x in anc_a):
                raise ScheduleError(f"reorder: loops {a.loop_var.name} and {b.loop_var.name} are not nested in one "
                                    "another (they belong to different loop nests)")
    outer = min(loops, key=lambda x: len(x[1]))[0]
    deepest = max(loops, key=lambda x: len(x[1]))[0]
    chain = [outer]
    while chain[-1] is not deepest:
        nxt = chain[-1].body
        if not isinstance(nxt, For):
            names = ", ".join(v.name for v in vars_)
            raise ScheduleError(f"reorder: loops {names} are not one chain of perfectly nested loops (loop "
                                f"{chain[-1].loop_var.name} holds more than the next loop)")
        chain.append(nxt)
    ids = [id(lp) for lp in chain]
    slots = sorted(ids.index(id(lp)) for lp, _ in loops)
    new_chain = list(chain)
    for slot, (lp, _) in zip(slots, loops):
        new_chain[slot] = lp
    for k, lp in enumerate(new_chain):
        for earlier in new_chain[k + 1:]:
            if uses_var(lp.min, lambda v: v is earlier.loop_var) or uses_var(lp.extent, lambda v: v is earlier.loop_var):
                raise ScheduleError(f"reorder: the bounds of loop {lp.loop_var.name} use loop {earlier.loop_var.name}, "
                                    "which would move inside it")
    inner = deepest.body
    for lp in reversed(new_chain):
        inner = _with(lp, body=inner)
    return tree.replace(body, outer, inner)


_THREADS = {f"{kind}.{axis}" for kind in ("blockIdx", "threadIdx") for axis in "xyz"}
_KIND_WORDS = {ForKind.PARALLEL: "parallel", ForKind.VECTORIZED: "vectorize", ForKind.UNROLLED: "unroll"}


def set_kind(body, var, kind: ForKind, thread: str | None = None) -> object:
    loop, _ = tree.loop(body, var)
    if kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
        for realize in _blocks_under(loop.body):
            for iv, value in zip(realize.block.iter_vars, realize.iter_values):
                if iv.iter_type != E.IterType.DATA_PAR and uses_var(value, lambda v: v is var):
                    raise ScheduleError(
                        f"{_KIND_WORDS[kind]}: block {realize.block.name_hint!r}: loop {var.name} feeds its "
                        f"reduction axis {iv.var.name}; only loops over spatial axes can run in "
                        f"{'parallel' if kind == ForKind.PARALLEL else 'vector lanes'}")
    binding = None
    if kind == ForKind.THREAD_BINDING:
        ok = isinstance(thread, str) and (thread in _THREADS or thread.startswith("vthread"))
        if not ok:
            raise ScheduleError(f"bind: loop {var.name}: thread {thread!r} is not blockIdx.x/y/z, threadIdx.x/y/z "
                                "or vthread")
        binding = E.IterVar(None, E.Var(thread, E.INT32), E.IterType.THREAD_INDEX, thread)
    return tree.replace(body, loop, _with(loop, kind=kind, thread_binding=binding))
