"""Warp shuffles for the last levels of cross-thread reductions (GPU pipeline step tir.WarpReduction,
run for devices whose kernel language has warp shuffles: GPUCaps.warp_shuffle).

kiln/te/cross_thread.py combines the partial results of a reduction bound to threadIdx by a
tree in shared memory, one barrier per level. Within a warp the threads run in lockstep and can
read each other's registers, so on CUDA the levels whose stride is below 32 become
``__shfl_down_sync`` steps with no shared memory and no barrier between them::

    red[slot] = acc; sync; (if t < s: red[slot] = red[slot] (+) red[slot + s]; sync) for s = R/2 .. 1

becomes, when the R threads of each group are threadIdx.x (extent R, a power of two):

    R <= 32:  v = acc; v = v (+) shfl_down(v, s, width=R) for s = R/2 .. 1; if t == 0: red[slot] = v; sync
    R > 32:   the levels s >= 32 as before, then
              if t < 32 { v = red[slot]; v = v (+) shfl_down(v, s) for s = 16 .. 1; if t == 0: red[slot] = v }; sync

Every thread of the block reaches the tree (it sits outside all guards), so each shuffle is done
by whole warps: all 32 lanes, or all the block's threads when the block has fewer than 32. Any
other shape keeps the shared-memory tree.
"""

from __future__ import annotations

import dataclasses

from kiln.ir import expr as E
from kiln.ir.dtype import BOOL_T
from kiln.ir.functor import Mutator, post_order_visit
from kiln.ir.stmt import BufferStore, Evaluate, IfThenElse, LetStmt, SeqStmt
from kiln.ir.structural import structural_equal
from kiln.tir.simplify import simplify

SHFL_OP = "kiln.cuda_shfl_down"  # args: value, delta, width, mask
_DTYPES = {"float32", "float64", "int32", "int64", "uint32"}


def warp_reductions(kernel):
    """kernel with its cross-thread reduction trees ending in warp shuffles where they can."""
    ext = kernel.attrs.get("thread_extent", {})
    tx = kernel.attrs.get("thread_vars", {}).get("threadIdx.x")
    threads = 1
    for tag in ("threadIdx.x", "threadIdx.y", "threadIdx.z"):
        x = ext.get(tag)
        if x is not None and not isinstance(x, E.IntImm):
            return kernel
        threads *= x.value if x is not None else 1
    tx_extent = ext.get("threadIdx.x")
    if tx is None or tx_extent is None:
        return kernel
    body = _Warp(tx, tx_extent.value, threads).visit(kernel.body)
    return kernel if body is kernel.body else dataclasses.replace(kernel, body=body)


def _is_barrier(s) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, E.Call) and s.value.op == "tir.tvm_storage_sync"


class _Warp(Mutator):
    def __init__(self, tx, tx_extent: int, threads: int):
        super().__init__()
        self.tx_extent = tx_extent
        self.threads = threads
        self.alias = {id(tx)}  # Vars that are threadIdx.x

    def visit_LetStmt(self, s):
        if isinstance(s.value, E.Var) and id(s.value) in self.alias:
            self.alias.add(id(s.var))
        return self.generic_visit(s)

    def visit_SeqStmt(self, s):
        items = [self.visit(x) for x in s.seq]
        out, i, changed = [], 0, any(a is not b for a, b in zip(items, s.seq))
        while i < len(items):
            got = self._match(items, i)
            if got is None:
                out.append(items[i])
                i += 1
            else:
                stmts, used = got
                out += stmts
                i += used
                changed = True
        return SeqStmt(tuple(out)) if changed else s

    def _match(self, items, i):
        first = items[i]
        if not (isinstance(first, BufferStore) and first.buffer.scope == "shared"
                and first.buffer.name.endswith(".red_shared") and str(first.buffer.dtype) in _DTYPES
                and i + 1 < len(items) and _is_barrier(items[i + 1])):
            return None
        S, slot = first.buffer, first.indices[0]
        levels, t, j = [], None, i + 2
        while j + 1 < len(items) and _is_barrier(items[j + 1]):
            level = items[j]
            if not (isinstance(level, IfThenElse) and level.else_case is None
                    and isinstance(level.then_case, BufferStore) and level.then_case.buffer is S
                    and structural_equal(level.then_case.indices[0], slot)):
                break
            cond = level.condition
            if not (isinstance(cond, E.LT) and isinstance(cond.a, E.Var) and id(cond.a) in self.alias
                    and isinstance(cond.b, E.IntImm)):
                break  # ragged groups (t + s < R) keep the tree
            stride = _stride(level.then_case.value, S, slot)
            if stride is None or stride != cond.b.value:
                break
            t = cond.a
            levels.append((stride, level))
            j += 2
        if not levels:
            return None
        R = 2 * levels[0][0]
        if [s for s, _ in levels] != [R >> k for k in range(1, len(levels) + 1)] or levels[-1][0] != 1:
            return None
        if R != self.tx_extent:
            return None  # threadIdx.x is wider than the groups: lanes would mix groups
        if R <= 32:
            if self.threads % 32 and self.threads > 32:
                return None  # a partial warp in the middle of the block
            mask = 0xFFFFFFFF if self.threads >= 32 else (1 << self.threads) - 1
            width, start = R, first.value
            kept = []
        else:
            mask, width, start = 0xFFFFFFFF, 32, E.BufferLoad(S, (slot,), S.dtype)
            kept = [first, items[i + 1]]
            for stride, level in levels:
                if stride >= 32:
                    kept += [level, _barrier_after(items, level)]
        warp_levels = [(s, lv) for s, lv in levels if s < 32]
        vals = [E.Var(f"{S.name}_w{k}", S.dtype) for k in range(len(warp_levels) + 1)]
        zero = E.const(0, t.dtype)
        stmt = IfThenElse(E.EQ(t, zero, BOOL_T), BufferStore(S, vals[-1], (slot,)))
        for k in reversed(range(len(warp_levels))):
            stride, level = warp_levels[k]
            shfl = E.Call(S.dtype, SHFL_OP, (vals[k], E.const(stride), E.const(width), E.const(mask, "int64")))
            value = _Swap(S, slot, vals[k], shfl).visit(level.then_case.value)
            stmt = LetStmt(vals[k + 1], value, stmt)
        stmt = LetStmt(vals[0], E.cast(start, S.dtype), stmt)
        if R > 32:
            stmt = IfThenElse(E.LT(t, E.const(32, t.dtype), BOOL_T), stmt)
        return kept + [stmt, items[j - 1]], j - i


def _barrier_after(items, level):
    for k, x in enumerate(items):
        if x is level:
            return items[k + 1]
    raise AssertionError("level not in the sequence")


def _stride(value, S, slot):
    """The s of a level's value S[slot] (+) S[slot + s], or None."""
    loads = []
    post_order_visit(value, lambda n: loads.append(n) if isinstance(n, E.BufferLoad) and n.buffer is S else None)
    there = [ld for ld in loads if not structural_equal(ld.indices[0], slot)]
    if len(there) != 1 or len(loads) != 2:
        return None
    d = simplify(E.Sub(there[0].indices[0], slot, slot.dtype))
    return d.value if isinstance(d, E.IntImm) and d.value > 0 else None


class _Swap(Mutator):
    """S[slot] -> here, S[slot + s] -> there."""

    def __init__(self, S, slot, here, there):
        super().__init__()
        self.S, self.slot, self.here, self.there = S, slot, here, there

    def visit_BufferLoad(self, e):
        if e.buffer is not self.S:
            return self.generic_visit(e)
        return self.here if structural_equal(e.indices[0], self.slot) else self.there
