"""Reductions whose reduce axis is bound to a GPU thread axis (``s[B].bind(ki, threadIdx.x)``).

Each thread of the bound axis accumulates its share of the reduction (the unbound reduce
loops) in private memory, then the threads combine their partial results by a tree in shared
memory, with a barrier after each level::

    acc = identity; for ko: acc = combine(acc, src)       # every thread
    red[g*R + t] = acc; barrier
    for s in R/2, R/4, ..: if t < s and t + s < R: red[g*R+t] = combine(red[g*R+t], red[g*R+t+s]); barrier
    out = red[g*R]  (thread t == 0 only, unless out is private: then every thread keeps a copy)
    barrier                                                # red may be reused by the next iteration

g numbers the groups of threads that reduce separately: the stage's data axes bound to other
thread axes (rows of a block). Barriers sit outside every guard, so all threads reach them.
"""

from __future__ import annotations

from kiln.errors import ScheduleError
from kiln.ir import expr as E
from kiln.ir.dtype import BOOL_T, HANDLE_T
from kiln.ir.expr import IterType, Var, const
from kiln.ir.stmt import Allocate, Buffer, BufferStore, Evaluate, IfThenElse, LetStmt, seq
from kiln.tir.simplify import guard_with as _guard, simplify

from .schedule import attach_leaf

BARRIER_OP = "tir.tvm_storage_sync"


def barrier(scope: str = "shared"):
    """The statement that makes every thread of a block wait for the others (and see their writes)."""
    return Evaluate(E.Call(E.const(0).dtype, BARRIER_OP, (E.StringImm(scope),)))


def cross_thread_reduce(low, st, info, bufs, store_idx, guards, expr, leaf_expr):
    red = low.bodies[st][0]
    leaves = st.leaf_iter_vars
    reduce_leaves = [iv for iv in leaves if iv.iter_type == IterType.COMM_REDUCE]
    first = leaves.index(reduce_leaves[0])
    if any(iv.iter_type != IterType.COMM_REDUCE for iv in leaves[first:]):
        raise ScheduleError(f"stage {st.name}: a reduction bound to threads needs every data axis outside "
                            "the reduction axes; reorder the data axes first")
    bound = [iv for iv in reduce_leaves if iv in st.bindings]
    if len(bound) != 1 or not st.bindings[bound[0]].thread_tag.startswith("threadIdx"):
        raise ScheduleError(f"stage {st.name}: bind exactly one reduction axis, to a threadIdx axis "
                            "(fuse the reduction axes first)")
    tiv = bound[0]
    extent = simplify(info.extents[tiv])
    if not isinstance(extent, E.IntImm):
        raise ScheduleError(f"stage {st.name}: the reduction axis {tiv.var.name} bound to "
                            f"{st.bindings[tiv].thread_tag} needs a constant extent, got {extent}")
    R = extent.value
    groups, group_idx = _thread_groups(st, info, leaves[:first], low)
    t = tiv.var
    dtypes = [b.dtype for b in bufs]
    accs = [Buffer(f"{b.name}.red_local", Var(f"{b.name}.red_local", HANDLE_T), b.dtype, (const(1),), scope="local")
            for b in bufs]
    shared = [Buffer(f"{b.name}.red_shared", Var(f"{b.name}.red_shared", HANDLE_T), b.dtype, (const(groups * R),),
                     scope="shared") for b in bufs]
    zero = (const(0),)

    # 1. Each thread's partial result over the unbound reduce loops.
    init = seq(*[BufferStore(a, E.cast(v, a.dtype), zero) for a, v in zip(accs, red.combiner.identity(dtypes))])
    lhs = [E.BufferLoad(a, zero, a.dtype) for a in accs]
    combined = red.combiner.combine(lhs, [expr(s) for s in red.source])
    update = _stores(accs, combined, zero)
    conds = list(guards) + [leaf_expr(g) for g in info.reduce_guards]
    cond = expr(red.condition)
    if not (isinstance(cond, E.IntImm) and cond.value):
        conds.append(cond)
    update = _guard(update, conds)
    serial = [iv for iv in reduce_leaves if iv is not tiv]
    partial = seq(init, low._nest(st, serial, info, update))

    # 2. The tree over the threads of each group.
    slot = simplify(group_idx * R + t)
    steps = [seq(*[BufferStore(s, E.BufferLoad(a, zero, a.dtype), (slot,)) for s, a in zip(shared, accs)]),
             barrier()]
    stride = 1
    while stride < R:
        stride *= 2
    stride //= 2
    while stride >= 1:
        here = [E.BufferLoad(s, (slot,), s.dtype) for s in shared]
        there = [E.BufferLoad(s, (simplify(slot + stride),), s.dtype) for s in shared]
        level = _stores(shared, red.combiner.combine(here, there), (slot,))
        ok = E.LT(t, const(stride, t.dtype), BOOL_T)
        if R % (2 * stride) != 0 or stride * 2 > R:
            ok = E.And(ok, E.LT(t + stride, const(R, t.dtype), BOOL_T), BOOL_T)
        steps += [IfThenElse(simplify(ok), level), barrier()]
        stride //= 2

    # 3. The result: out = red[g*R] (combined with the reduction's init when it has one).
    result = [E.BufferLoad(s, (simplify(group_idx * R),), s.dtype) for s in shared]
    if red.init:
        result = red.combiner.combine([expr(i) for i in red.init], result)
    out_conds = list(guards)
    if st.scope != "local":
        out_conds.append(E.EQ(t, const(0, t.dtype), BOOL_T))
    steps += [_guard(_stores(bufs, result, store_idx), out_conds), barrier()]
    body = seq(partial, *steps)
    for a in reversed(accs):
        body = Allocate(a, (const(1),), body)
    for s in reversed(shared):
        body = Allocate(s, (const(groups * R),), body)
    body = low._with_attached(st, tiv, body)
    body = low._loop(st, tiv, info, body)
    return low._nest(st, leaves[:first], info, body)


def _stores(bufs, values, idx):
    if len(bufs) == 1:
        return BufferStore(bufs[0], E.cast(values[0], bufs[0].dtype), idx)
    temps = [Var(f"{b.name}_v{k}", b.dtype) for k, b in enumerate(bufs)]
    out = seq(*[BufferStore(b, t, idx) for b, t in zip(bufs, temps)])
    for t, v in reversed(list(zip(temps, values))):
        out = LetStmt(t, E.cast(v, t.dtype), out)
    return out


def _thread_groups(st, info, data_leaves, low=None):
    """Number of thread groups that reduce apart, and this thread's group index: the stage's
    data axes bound to threadIdx, and those of the stages it is computed inside (a reduction
    at a consumer's threadIdx.y loop reduces once per threadIdx.y)."""
    levels = [(st, info, data_leaves)]
    child = st
    while low is not None and child.attach_stage is not None and child.attach.value == "scope":
        parent = child.attach_stage
        leaves = parent.leaf_iter_vars
        at = leaves.index(attach_leaf(parent, child.attach_ivar))
        levels.append((parent, low.infos[parent], leaves[:at + 1]))
        child = parent
    groups, index = 1, const(0)
    for stage, stage_info, stage_leaves in reversed(levels):
        groups, index = _groups_of(stage, stage_info, stage_leaves, groups, index)
    return groups, index


def _groups_of(st, info, data_leaves, groups, index):
    for iv in data_leaves:
        thread = st.bindings.get(iv)
        if thread is None or not thread.thread_tag.startswith("threadIdx"):
            continue
        ext = simplify(info.extents[iv])
        if not isinstance(ext, E.IntImm):
            raise ScheduleError(f"stage {st.name}: axis {iv.var.name} bound to {thread.thread_tag} next to a "
                                f"cross-thread reduction needs a constant extent, got {ext}")
        index = simplify(index * ext.value + iv.var)
        groups *= ext.value
    return groups, index
