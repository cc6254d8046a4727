"""decompose_reduction: a reduction block's init becomes a block of its own, before a given loop.

The init block ``<name>_init`` has the block's spatial iteration variables only; it runs under
copies (``<loop>_init``) of the loops from the given loop inwards that feed spatial axes only,
placed just before the given loop. The reduction block keeps its update and loses its init.
"""

from __future__ import annotations

from dataclasses import replace as _with

from kiln.errors import ScheduleError
from kiln.ir import expr as E
from kiln.ir.block import Block, BlockRealize, BufferRegion
from kiln.ir.functor import substitute, uses_var
from kiln.ir.stmt import For, ForKind, seq
from kiln.tir.simplify import simplify

from . import tree


def decompose_reduction(body, name: str, loop_var) -> tuple:
    realize, anc = tree.block_realize(body, name)
    blk = realize.block
    if blk.init is None:
        raise ScheduleError(f"decompose_reduction: block {name!r} has no T.init(); only a reduction block with an "
                            "init can be decomposed")
    loops = tree.loops_of(anc)
    pos = next((k for k, lp in enumerate(loops) if lp.loop_var is loop_var), None)
    if pos is None:
        raise ScheduleError(f"decompose_reduction: loop {loop_var.name} is not one of block {name!r}'s loops")
    pairs = list(zip(blk.iter_vars, realize.iter_values))
    spatial = [(iv, v) for iv, v in pairs if iv.iter_type == E.IterType.DATA_PAR]
    reduce = [v for iv, v in pairs if iv.iter_type != E.IterType.DATA_PAR]

    def feeds(lp, values):
        return any(uses_var(v, lambda x: x is lp.loop_var) for v in values)

    copies = [lp for lp in loops[pos:] if feeds(lp, [v for _, v in spatial]) and not feeds(lp, reduce)]
    loop_map = {lp.loop_var: E.Var(lp.loop_var.name + "_init", lp.loop_var.dtype) for lp in copies}
    var_map = {iv.var: E.Var(iv.var.name + "_init", iv.var.dtype) for iv, _ in spatial}
    ivs = tuple(_with(iv, var=var_map[iv.var]) for iv, _ in spatial)
    values = tuple(simplify(substitute(v, loop_map)) for _, v in spatial)
    writes = tuple(BufferRegion(r.buffer, tuple(substitute(x, var_map) for x in r.region)) for r in blk.writes)
    init_blk = Block(f"{name}_init", ivs, (), writes, substitute(blk.init, var_map))
    copied = {id(lp) for lp in copies}
    skipped = {id(lp.loop_var) for lp in loops[pos:] if id(lp) not in copied}
    pred = substitute(realize.predicate, loop_map)
    if uses_var(pred, lambda x: id(x) in skipped):
        raise ScheduleError(f"decompose_reduction: block {name!r}'s T.where({realize.predicate}) depends on a "
                            "reduction loop; split the reduction loop evenly first")
    stmt = BlockRealize(values, pred, init_blk)
    for lp in reversed(copies):
        stmt = For(loop_map[lp.loop_var], lp.min, lp.extent, ForKind.SERIAL if lp.kind == ForKind.THREAD_BINDING
                   else lp.kind, stmt, None, dict(lp.annotations))
    body = tree.replace(body, realize, _with(realize, block=_with(blk, init=None)))
    target, _ = tree.loop(body, loop_var)
    return tree.replace(body, target, seq(stmt, target)), init_blk.name_hint
