"""Dependency tokens: the load, compute and store modules run ahead of each other only as far
as the SRAM hazards between them allow.

Ops come in program order. For each op and each neighbouring module, the latest op of that
module it conflicts with (read-after-write, write-after-read or write-after-write on the same
SRAM blocks: inp/wgt between load and compute, acc between compute and store) must finish
first. That op pushes a token and this one pops it, unless an earlier pair already orders them
(a later-or-equal producer already pushed to an earlier consumer of this module). Tokens are
matched first-in first-out, and the edges chosen this way never cross, so the k-th pop of each
queue waits for exactly the producer it needs.
"""

from __future__ import annotations

import numpy as np

from . import isa

# (from module, to module) -> (flag the producer sets, flag the consumer sets)
_FLAGS = {(0, 1): ("push_next", "pop_prev"), (1, 0): ("push_prev", "pop_next"),
          (1, 2): ("push_next", "pop_prev"), (2, 1): ("push_prev", "pop_next")}


def insert_tokens(ops, env) -> list:
    """Set the dependency flags of ops (emit.Op) and append FINISH; returns the instructions."""
    depth = {isa.MEM_INP: env.INP_DEPTH, isa.MEM_WGT: env.WGT_DEPTH, isa.MEM_ACC: env.ACC_DEPTH}
    # last op index per module that wrote / read each block
    last_w = {m: np.full((3, d), -1, dtype=np.int64) for m, d in depth.items()}
    last_r = {m: np.full((3, d), -1, dtype=np.int64) for m, d in depth.items()}
    covered = {pair: -1 for pair in _FLAGS}
    for k, op in enumerate(ops):
        need = {}
        for mem, lo, hi in op.reads:
            for other in (0, 1, 2):
                if other != op.module:
                    w = int(last_w[mem][other, lo:hi].max(initial=-1))
                    need[other] = max(need.get(other, -1), w)
        for mem, lo, hi in op.writes:
            for other in (0, 1, 2):
                if other != op.module:
                    w = int(max(last_w[mem][other, lo:hi].max(initial=-1), last_r[mem][other, lo:hi].max(initial=-1)))
                    need[other] = max(need.get(other, -1), w)
        for other, src in need.items():
            if src < 0:
                continue
            pair = (other, op.module)
            if pair not in _FLAGS:
                raise AssertionError(f"SRAM hazard between modules {pair} that share no queue (op {k})")
            if src <= covered[pair]:
                continue
            push, pop = _FLAGS[pair]
            ops[src].insn[push] = 1
            op.insn[pop] = 1
            covered[pair] = src
        for mem, lo, hi in op.reads:
            last_r[mem][op.module, lo:hi] = k
        for mem, lo, hi in op.writes:
            last_w[mem][op.module, lo:hi] = k
    insns = [op.insn for op in ops]
    finish = isa.Insn(isa.FINISH)
    stores = [k for k, op in enumerate(ops) if op.module == 2]
    if stores and stores[-1] > covered[(2, 1)]:
        ops[stores[-1]].insn["push_prev"] = 1
        finish["pop_next"] = 1
    return insns + [finish]
