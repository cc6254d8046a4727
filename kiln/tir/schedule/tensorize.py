"""tensorize: replace a tile of loops by a tensor intrinsic's implementation.

A ``TensorIntrin`` pairs two PrimFuncs with the same buffer parameters: ``desc`` (loops around one
block: what the intrinsic computes) and ``impl`` (the statements that compute it). ``tensorize``
checks that the loops under the given loop have desc's extents and that the block under them
has desc's expression, each buffer access at a fixed offset (the tile's base) plus desc's index.
It then puts impl in the tile's place, in a block ``<name>_o``: impl's accesses become accesses
of the real buffers at the base, ``X.data`` the real data, ``X.elem_offset`` the base's flat
offset and ``X.strides`` the real strides.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace as _with
from typing import ClassVar

from kiln.errors import ScheduleError
from kiln.ir import expr as E
from kiln.ir.block import Block, BlockRealize
from kiln.ir.functor import Mutator, substitute, uses_var
from kiln.ir.stmt import Buffer, For, PrimFunc
from kiln.ir.structural import structural_equal
from kiln.tir.simplify import simplify

from . import tree
from .access import infer_regions


@dataclasses.dataclass(frozen=True, eq=False)
class TensorIntrin:
    """``TensorIntrin.register("name", desc, impl)`` then ``sch.tensorize(loop, "name")``."""

    desc: PrimFunc
    impl: PrimFunc
    name: str = ""

    # TVM 0.13's API names intrinsics by string across modules; the table holds only what the
    # program registered itself, nothing is registered at import.
    _table: ClassVar[dict] = {}

    @staticmethod
    def register(name: str, desc: PrimFunc, impl: PrimFunc, override: bool = False) -> "TensorIntrin":
        if not (isinstance(desc, PrimFunc) and isinstance(impl, PrimFunc)):
            raise ScheduleError(f"TensorIntrin.register({name!r}): desc and impl must be @T.prim_func functions")
        if len(desc.params) != len(impl.params):
            raise ScheduleError(f"TensorIntrin.register({name!r}): desc has {len(desc.params)} parameters, impl "
                                f"{len(impl.params)}; they must take the same buffers")
        if name in TensorIntrin._table and not override:
            raise ScheduleError(f"TensorIntrin.register: {name!r} is already registered; pass override=True")
        intrin = TensorIntrin(desc, impl, name)
        TensorIntrin._table[name] = intrin
        return intrin

    @staticmethod
    def get(name: str, allow_missing: bool = False):
        hit = TensorIntrin._table.get(name)
        if hit is None and not allow_missing:
            raise ScheduleError(f"TensorIntrin.get: no intrinsic named {name!r}; register it with "
                                f"tir.TensorIntrin.register({name!r}, desc, impl) (registered: {sorted(TensorIntrin._table)})")
        return hit


def _inner(func: PrimFunc):
    """A function's body without its root block (a block with no iteration variables)."""
    body = func.body
    while isinstance(body, BlockRealize) and not body.block.iter_vars and body.block.init is None:
        body = body.block.body
    return body


def _chain(top, what: str) -> tuple:
    """The perfectly nested loops from top down to the one block under them."""
    loops, s = [], top
    while isinstance(s, For):
        loops.append(s)
        s = s.body
    if not isinstance(s, BlockRealize):
        names = [n.block.name_hint for n, _ in tree.find_all(top, lambda n: isinstance(n, BlockRealize))]
        raise ScheduleError(f"{what}: the loops must hold exactly one block and nothing else; they hold blocks "
                            f"{names} and other statements")
    return loops, s


class _Pair:
    """Walk desc's and the real block's expressions in step, collecting the buffer accesses."""

    def __init__(self, where: str):
        self.where, self.accesses = where, []

    def fail(self, a, b):
        raise ScheduleError(f"{self.where}: the block computes {b}, the intrinsic {a}; they differ")

    def walk(self, a, b) -> None:
        if type(a) is not type(b):
            self.fail(a, b)
        if isinstance(a, (E.BufferLoad,)) or hasattr(a, "buffer") and hasattr(a, "indices"):
            self.accesses.append((a.buffer, a.indices, b.buffer, b.indices))
            if a.buffer.dtype != b.buffer.dtype:
                self.fail(a, b)
            if hasattr(a, "value") and not isinstance(a, E.BufferLoad):
                self.walk(a.value, b.value)
            return
        if isinstance(a, E.Var):
            return
        if not dataclasses.is_dataclass(a):
            if a != b:
                self.fail(a, b)
            return
        for f in dataclasses.fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y):
                for p, q in zip(x, y):
                    self.walk(p, q)
            elif isinstance(x, tuple) or isinstance(y, tuple):
                self.fail(a, b)
            elif f.name == "dtype":
                if str(x) != str(y):
                    self.fail(a, b)
            else:
                self.walk(x, y)


def _bases(where, accesses, desc_map, real_map, tile_vars) -> dict:
    """For each desc buffer: (real buffer, base index per real dimension)."""
    out: dict = {}
    for dbuf, didx, rbuf, ridx in accesses:
        didx = [substitute(i, desc_map) for i in didx]
        ridx = [substitute(i, real_map) for i in ridx]
        lead = len(ridx) - len(didx)
        if lead < 0:
            raise ScheduleError(f"{where}: buffer {rbuf.name} has fewer dimensions than the intrinsic's {dbuf.name}")
        base = list(ridx[:lead]) + [simplify(r - d) for r, d in zip(ridx[lead:], didx)]
        for b in base:
            if uses_var(b, lambda v: id(v) in tile_vars):
                raise ScheduleError(f"{where}: {rbuf.name}[{', '.join(map(str, ridx))}] does not match the "
                                    f"intrinsic's {dbuf.name}[{', '.join(map(str, didx))}] at a fixed offset")
        old = out.get(id(dbuf))
        if old is not None and (old[0] is not rbuf or not all(structural_equal(x, y) for x, y in zip(old[1], base))):
            raise ScheduleError(f"{where}: the intrinsic's {dbuf.name} would stand for two different regions")
        out[id(dbuf)] = (rbuf, base)
    return out


def _strides(buf: Buffer) -> list:
    if buf.strides:
        return list(buf.strides)
    out, acc = [], E.const(1, buf.shape[-1].dtype) if buf.shape else E.const(1)
    for d in reversed(buf.shape):
        out.append(acc)
        acc = simplify(acc * d)
    return list(reversed(out))


class _Instantiate(Mutator):
    """impl's buffers become the real buffers at the tile's base."""

    def __init__(self, binds: dict, scalars: dict):
        super().__init__()
        self.binds, self.scalars = binds, scalars  # id(impl buffer) -> (real, base); Var -> expr

    def visit_Var(self, v):
        hit = self.scalars.get(id(v))
        return v if hit is None else hit

    def rehome(self, buf):
        """A buffer impl declared over an intrinsic buffer's data (``T.Buffer(..., data=C.data)``)."""
        hit = self.scalars.get(id(buf.data))
        if hit is None:
            return buf
        key = ("buffer", id(buf))
        if key not in self.scalars:
            self.scalars[key] = _with(buf, data=hit, shape=tuple(self.visit(d) for d in buf.shape),
                                      strides=tuple(self.visit(d) for d in buf.strides),
                                      elem_offset=self.visit(buf.elem_offset) if buf.elem_offset is not None else None)
        return self.scalars[key]

    def _index(self, buf, indices):
        rbuf, base = self.binds[id(buf)]
        lead = len(base) - len(indices)
        return rbuf, tuple(base[:lead]) + tuple(simplify(b + self.visit(i)) for b, i in zip(base[lead:], indices))

    def visit_BufferLoad(self, op):
        if id(op.buffer) not in self.binds:
            op = self.generic_visit(op)
            return _with(op, buffer=self.rehome(op.buffer))
        rbuf, idx = self._index(op.buffer, op.indices)
        return E.BufferLoad(rbuf, idx, op.dtype)

    def visit_BufferStore(self, op):
        if id(op.buffer) not in self.binds:
            op = self.generic_visit(op)
            return _with(op, buffer=self.rehome(op.buffer))
        rbuf, idx = self._index(op.buffer, op.indices)
        return _with(op, buffer=rbuf, value=self.visit(op.value), indices=idx)


def tensorize_loop(body, var, intrin: TensorIntrin):
    loop, _ = tree.loop(body, var, "tensorize: loop")
    loops, realize = _chain(loop, f"tensorize with {intrin.name}: loop {var.name}")
    blk = realize.block
    where = f"tensorize: block {blk.name_hint!r} with {intrin.name}"
    if blk.init is not None:
        raise ScheduleError(f"{where}: the block has an init; run sch.decompose_reduction(block, loop) first")
    dloops, drealize = _chain(_inner(intrin.desc), f"{where}: the intrinsic's desc")
    if len(dloops) != len(loops):
        raise ScheduleError(f"{where}: {len(loops)} loops from {var.name} inwards, the intrinsic has {len(dloops)}")
    for lp, dl in zip(loops, dloops):
        ext, dext = simplify(lp.extent), simplify(dl.extent)
        if not structural_equal(ext, dext):
            raise ScheduleError(f"{where}: loop {lp.loop_var.name} has extent {ext}, the intrinsic's loop {dext}")
    pair = _Pair(where)
    pair.walk(drealize.block.body, blk.body)
    desc_map = {iv.var: v for iv, v in zip(drealize.block.iter_vars, drealize.iter_values)}
    desc_map.update({dl.loop_var: lp.loop_var for dl, lp in zip(dloops, loops)})
    desc_map = {k: substitute(v, {dl.loop_var: lp.loop_var for dl, lp in zip(dloops, loops)}) for k, v in desc_map.items()}
    real_map = {iv.var: v for iv, v in zip(blk.iter_vars, realize.iter_values)}
    tile_vars = {id(lp.loop_var) for lp in loops}
    bases = _bases(where, pair.accesses, desc_map, real_map, tile_vars)
    binds, scalars = {}, {}
    for dparam, iparam in zip(intrin.desc.params, intrin.impl.params):
        dbuf, ibuf = intrin.desc.buffer_map.get(dparam), intrin.impl.buffer_map.get(iparam)
        if dbuf is None or ibuf is None or id(dbuf) not in bases:
            continue
        rbuf, base = bases[id(dbuf)]
        binds[id(ibuf)] = (rbuf, base)
        strides = _strides(rbuf)
        scalars[id(ibuf.data)] = rbuf.data
        if isinstance(ibuf.elem_offset, E.Var):
            off = rbuf.elem_offset if rbuf.elem_offset is not None else E.const(0, base[0].dtype)
            for b, s in zip(base, strides):
                off = off + b * s
            scalars[id(ibuf.elem_offset)] = simplify(off)
        for s_var, s in zip(ibuf.strides, strides[len(strides) - len(ibuf.strides):]):
            if isinstance(s_var, E.Var):
                scalars[id(s_var)] = s
    impl = _Instantiate(binds, scalars).visit(_inner(intrin.impl))
    reads, writes = infer_regions(impl)
    new = BlockRealize((), E.const(True, E.BOOL_T), Block(f"{blk.name_hint}_o", (), reads, writes, impl,
                                                           annotations={"tensorized": intrin.name}))
    return tree.replace(body, loop, new)


def tensorize_block(body, name: str, intrin: TensorIntrin):
    """Tensorize the loops of block name that the intrinsic's desc has (its innermost ones)."""
    _, anc = tree.block_realize(body, name)
    loops = tree.loops_of(anc)
    dloops, _ = _chain(_inner(intrin.desc), f"tensorize: {intrin.name}'s desc")
    if len(loops) < len(dloops) or not dloops:
        raise ScheduleError(f"tensorize: block {name!r} has {len(loops)} loops, the intrinsic {len(dloops)}")
    return tensorize_loop(body, loops[len(loops) - len(dloops)].loop_var, intrin)
