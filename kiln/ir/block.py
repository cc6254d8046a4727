"""Blocks: the unit of computation that ``tvm.tir.Schedule`` works on (TVMScript's ``T.block``).

A ``Block`` is a computation over its own iteration variables, independent of the loops around
it: each iteration variable has a domain and a kind (spatial ``DATA_PAR`` or reduction
``COMM_REDUCE``), ``reads``/``writes`` say which buffer regions one instance touches, and
``init`` (reductions) runs before the first reduction step of each spatial point. A
``BlockRealize`` places a block in a loop nest: ``iter_values`` give each iteration variable its
value in terms of the enclosing loops, and the block runs only where ``predicate`` holds.
``kiln/tir/transform/lower_blocks.py`` turns blocks into plain loops before the TIR pipeline.
"""

from __future__ import annotations

from dataclasses import field

from .expr import Node, PrimExpr, node
from .stmt import Buffer, Stmt


@node
class BufferRegion(Node):
    """The rectangle of buffer given by one Range per dimension (block-variable expressions)."""

    buffer: Buffer
    region: tuple


@node
class Block(Stmt):
    """One instance per point of iter_vars' domains: init (if any) on the first reduction step, then body.

    alloc_buffers are scratch buffers that live for one execution of the block's whole body;
    annotations are free-form (``T.block_attr``)."""

    name_hint: str
    iter_vars: tuple
    reads: tuple
    writes: tuple
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple = ()
    annotations: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.name_hint


@node
class BlockRealize(Stmt):
    """Run block with its iteration variables bound to iter_values where predicate holds."""

    iter_values: tuple
    predicate: PrimExpr
    block: Block
