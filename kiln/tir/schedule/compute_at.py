"""compute_at and reverse_compute_at: move a block's loop nest under a loop of another block.

A producer moved under a loop computes, per iteration of that loop, the region of its output
that the consumers under the loop read there; a consumer moved under a producer's loop consumes
the region the producer wrote there. The moved block keeps its iteration variables and domains;
new loops ``ax0, ax1, ...`` cover the region (extent-1 loops dropped unless
preserve_unit_loops), with a ``T.where`` when the region may leave the block's domain.
"""

from __future__ import annotations

from dataclasses import replace as _with

from kiln.errors import ScheduleError
from kiln.ir import expr as E
from kiln.ir.block import BlockRealize
from kiln.ir.functor import substitute
from kiln.ir.stmt import For, ForKind, SeqStmt, seq
from kiln.tir.simplify import simplify

from . import tree
from .access import Unbounded, bound, union_bounds


def _movable(body, name: str, what: str) -> tuple:
    realize, anc = tree.block_realize(body, name)
    root, parents = tree.subtree_root(realize, anc)
    if not parents or not isinstance(parents[-1], SeqStmt):
        raise ScheduleError(f"{what}: block {name!r} is the only statement of its scope; there is no other block "
                            "to move it next to")
    return realize, root


def _region_under(loop: For, anc_of: dict, realizes: list, buffer, which: str) -> list:
    """Bounds, per dimension of buffer, of what the blocks access in one iteration of loop."""
    out = None
    for realize in realizes:
        blk = realize.block
        regions = [r for r in (blk.reads if which == "reads" else blk.writes) if r.buffer is buffer]
        inner = []
        for a in anc_of[id(realize)]:
            if a is loop:
                inner = []
            elif isinstance(a, For):
                inner.append(a)
        doms = {id(f.loop_var): E.Range(f.min, f.extent) for f in inner}
        binding = {iv.var: v for iv, v in zip(blk.iter_vars, realize.iter_values)}
        for r in regions:
            try:
                bounds = [(bound(substitute(x.min, binding), doms)[0],
                           bound(substitute(x.min + x.extent - 1, binding), doms)[1]) for x in r.region]
            except Unbounded as exc:
                raise ScheduleError(f"block {blk.name_hint!r}: cannot bound its access {exc} of {buffer.name}") from None
            out = bounds if out is None else union_bounds(buffer, out, bounds)
    return out


def _point_vars(blk, region, buffer, what: str) -> list:
    """The iteration variable each dimension of the block's access to buffer is (a point access)."""
    out = []
    by_id = {id(iv.var): iv for iv in blk.iter_vars}
    for x in region.region:
        iv = by_id.get(id(x.min)) if isinstance(x.min, E.Var) else None
        if iv is None or not (isinstance(x.extent, E.IntImm) and x.extent.value == 1) or any(iv is o for o in out):
            raise ScheduleError(f"{what}: block {blk.name_hint!r} accesses {buffer.name} at "
                                f"{[str(r.min) for r in region.region]}; each dimension must be one of its own "
                                "iteration variables")
        if iv.iter_type != E.IterType.DATA_PAR:
            raise ScheduleError(f"{what}: block {blk.name_hint!r}: {buffer.name} is indexed by reduction axis "
                                f"{iv.var.name}")
        out.append(iv)
    return out


def _nest_for(realize: BlockRealize, covered: dict, preserve_unit_loops: bool, outer: list) -> object:
    """Loops ax0.. over the block's iteration variables: covered ones over their bounds, others their domain.

    outer are the loops the nest goes under: their ranges decide which domain checks are needed."""
    blk = realize.block
    loops, values, conds = [], [], []
    ranges = {lp.loop_var: E.Range(lp.min, lp.extent) for lp in outer}
    for iv in blk.iter_vars:
        lo, hi = covered.get(id(iv), (iv.dom.min, simplify(iv.dom.min + iv.dom.extent - 1)))
        extent = simplify(hi - lo + 1)
        if isinstance(extent, E.IntImm) and extent.value == 1 and not preserve_unit_loops:
            values.append(simplify(lo))
        else:
            v = E.Var(f"ax{len(loops)}", iv.var.dtype)
            loops.append((v, extent))
            ranges[v] = E.Range(E.const(0, v.dtype), extent)
            values.append(simplify(lo + v) if not _zero(lo) else v)
        if id(iv) in covered:
            for c in (E.GE(values[-1], iv.dom.min, E.BOOL_T), E.LT(values[-1], iv.dom.min + iv.dom.extent, E.BOOL_T)):
                c2 = simplify(c, ranges)
                if not (isinstance(c2, E.IntImm) and c2.value):
                    conds.append(c2)
    pred = realize.predicate
    for c in conds:
        pred = c if isinstance(pred, E.IntImm) and pred.value else E.And(pred, c, E.BOOL_T)
    stmt = _with(realize, iter_values=tuple(values), predicate=pred)
    for v, ext in reversed(loops):
        stmt = For(v, E.const(0, v.dtype), ext, ForKind.SERIAL, stmt)
    return stmt


def _zero(e) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0


def compute_at(body, name: str, loop_var, preserve_unit_loops: bool = False, reverse: bool = False) -> object:
    what = "reverse_compute_at" if reverse else "compute_at"
    realize, root = _movable(body, name, what)
    blk = realize.block
    loop, loop_anc = tree.loop(body, loop_var, f"{what}: loop")
    if any(a is root for a in loop_anc) or loop is root:
        raise ScheduleError(f"{what}: loop {loop_var.name} is one of block {name!r}'s own loops")
    under = tree.find_all(loop, lambda n: isinstance(n, BlockRealize))
    anc_of = {id(n): anc for n, anc in under}
    others = [n for n, _ in under]
    if reverse:
        buffer = _produced_buffer(blk, others, what, loop_var)
        access = next(r for r in blk.reads if r.buffer is buffer)
        partners = [n for n in others if any(r.buffer is buffer for r in n.block.writes)]
        bounds = _region_under(loop, anc_of, partners, buffer, "writes")
    else:
        if len(blk.writes) != 1:
            raise ScheduleError(f"{what}: block {name!r} writes {len(blk.writes)} buffers; it must write exactly one")
        buffer = blk.writes[0].buffer
        access = blk.writes[0]
        partners = [n for n in others if any(r.buffer is buffer for r in n.block.reads)]
        if not partners:
            raise ScheduleError(f"{what}: block {name!r} writes {buffer.name}, which no block under loop "
                                f"{loop_var.name} reads")
        bounds = _region_under(loop, anc_of, partners, buffer, "reads")
    ivs = _point_vars(blk, access, buffer, what)
    covered = {id(iv): b for iv, b in zip(ivs, bounds)}
    body = tree.replace(body, root, None)
    loop, anc = tree.loop(body, loop_var)
    nest = _nest_for(realize, covered, preserve_unit_loops, tree.loops_of(anc) + [loop])
    new_body = seq(loop.body, nest) if reverse else seq(nest, loop.body)
    return tree.replace(body, loop, _with(loop, body=new_body))


def _produced_buffer(blk, others: list, what: str, loop_var):
    written = {id(r.buffer) for n in others for r in n.block.writes}
    hits = [r.buffer for r in blk.reads if id(r.buffer) in written]
    if len(hits) != 1:
        raise ScheduleError(f"{what}: block {blk.name_hint!r} reads {len(hits)} buffers that blocks under loop "
                            f"{loop_var.name} write; it must read exactly one")
    return hits[0]
