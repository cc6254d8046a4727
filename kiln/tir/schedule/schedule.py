"""``tvm.tir.Schedule``: transform the blocks of a TVMScript module, as TVM 0.13 spells it.

>>> sch = tvm.tir.Schedule(MyModule)
>>> block = sch.get_block("C")
>>> i, j, k = sch.get_loops(block)
>>> i0, i1 = sch.split(i, factors=[None, 32])
>>> sch.reorder(i0, j, i1)
>>> sch.mod.show(); print(sch.trace)
>>> f = tvm.build(sch.mod, target="llvm")

Every call replaces the scheduled function in ``sch.mod`` (IR is immutable) and appends an
instruction to ``sch.trace``. Handles: ``get_block`` returns a BlockRV (a block by name),
loops are LoopRVs (a loop by its variable); a primitive that replaces a loop returns the new ones.
"""

from __future__ import annotations

from dataclasses import replace as _with

from kiln.errors import ScheduleError
from kiln.ir.module import IRModule
from kiln.ir.stmt import ForKind, PrimFunc

from . import cache, compute_at as _at, inline, loops as _loops, reduction, tree
from .trace import BlockRV, Instruction, LoopRV, Trace


class Schedule:
    """A schedule of one function at a time of an IRModule (``work_on`` picks another)."""

    def __init__(self, mod, *, seed=None, debug_mask="none", error_render_level="detail", enable_check=True):
        del seed, debug_mask, error_render_level, enable_check  # accepted for TVM's signature
        if isinstance(mod, PrimFunc):
            mod = IRModule({"main": mod})
        if not isinstance(mod, IRModule):
            raise TypeError(f"tir.Schedule: expected an IRModule or a PrimFunc, got {type(mod).__name__}")
        self._mod = mod
        funcs = [name for name, f in mod.items() if isinstance(f, PrimFunc)]
        if not funcs:
            raise ScheduleError("tir.Schedule: the module has no PrimFunc to schedule")
        self.func_name = "main" if "main" in funcs else funcs[0]
        self._trace = Trace()

    # State ------------------------------------------------------------------------------
    @property
    def mod(self) -> IRModule:
        return self._mod

    @property
    def trace(self) -> Trace:
        return self._trace

    def show(self) -> None:
        self._mod.show()

    def copy(self) -> "Schedule":
        out = Schedule(self._mod)
        out.func_name = self.func_name
        out._trace = Trace(self._trace.insts)
        return out

    def work_on(self, func_name: str) -> None:
        if func_name not in self._mod or not isinstance(self._mod[func_name], PrimFunc):
            raise ScheduleError(f"work_on: the module has no PrimFunc named {func_name!r}")
        self.func_name = func_name

    def _func(self) -> PrimFunc:
        return self._mod[self.func_name]

    def _body(self):
        return self._func().body

    def _set_body(self, body) -> None:
        funcs = {name: f for name, f in self._mod.items()}
        funcs[self.func_name] = _with(self._func(), body=body)
        self._mod = self._mod.with_functions(funcs)

    def _record(self, kind: str, inputs: list, outputs=(), listed: bool = False) -> None:
        self._trace.append(Instruction(kind, tuple(inputs), tuple(outputs), listed))

    def _block_name(self, block, what: str) -> str:
        if isinstance(block, str):
            return block
        if not isinstance(block, BlockRV):
            raise ScheduleError(f"{what}: expected a block (from sch.get_block), got {type(block).__name__}")
        tree.block_realize(self._body(), block.name, self.func_name)
        return block.name

    def _loop_var(self, loop, what: str):
        if not isinstance(loop, LoopRV):
            raise ScheduleError(f"{what}: expected a loop (from sch.get_loops/split/fuse), got {type(loop).__name__}")
        tree.loop(self._body(), loop.var, f"{what}: loop")
        return loop.var

    def get(self, rv):
        """The Block or For a handle stands for now."""
        if isinstance(rv, BlockRV):
            return tree.block_realize(self._body(), rv.name, self.func_name)[0].block
        return tree.loop(self._body(), rv.var)[0]

    # Lookup -----------------------------------------------------------------------------
    def get_block(self, name: str, func_name: str | None = None) -> BlockRV:
        if func_name is not None:
            self.work_on(func_name)
        tree.block_realize(self._body(), name, self.func_name)
        rv = BlockRV(name)
        self._record("get_block", [("name", name), ("func_name", self.func_name)], [rv])
        return rv

    def get_loops(self, block) -> list:
        name = self._block_name(block, "get_loops")
        _, anc = tree.block_realize(self._body(), name)
        rvs = [LoopRV(lp.loop_var) for lp in tree.loops_of(anc)]
        self._record("get_loops", [("block", block)], rvs, listed=True)
        return rvs

    # Loops ------------------------------------------------------------------------------
    def split(self, loop, factors, preserve_unit_iters: bool = True) -> list:
        var = self._loop_var(loop, "split")
        body, new = _loops.split(self._body(), var, list(factors))
        self._set_body(body)
        rvs = [LoopRV(v) for v in new]
        self._record("split", [("loop", loop), ("factors", list(factors)),
                               ("preserve_unit_iters", preserve_unit_iters)], rvs, listed=True)
        return rvs

    def fuse(self, *loops, preserve_unit_iters: bool = True) -> LoopRV:
        vars_ = [self._loop_var(lp, "fuse") for lp in loops]
        body, fused = _loops.fuse(self._body(), vars_)
        self._set_body(body)
        rv = LoopRV(fused)
        self._record("fuse", [("*loops", list(loops)), ("preserve_unit_iters", preserve_unit_iters)], [rv])
        return rv

    def reorder(self, *ordered_loops) -> None:
        vars_ = [self._loop_var(lp, "reorder") for lp in ordered_loops]
        self._set_body(_loops.reorder(self._body(), vars_))
        self._record("reorder", [("*ordered_loops", list(ordered_loops))])

    def _kind(self, kind_name: str, loop, kind: ForKind, thread=None) -> None:
        var = self._loop_var(loop, kind_name)
        self._set_body(_loops.set_kind(self._body(), var, kind, thread))
        inputs = [("loop", loop)] + ([("thread_axis", thread)] if kind == ForKind.THREAD_BINDING else [])
        self._record(kind_name, inputs)

    def parallel(self, loop) -> None:
        self._kind("parallel", loop, ForKind.PARALLEL)

    def vectorize(self, loop) -> None:
        self._kind("vectorize", loop, ForKind.VECTORIZED)

    def unroll(self, loop) -> None:
        self._kind("unroll", loop, ForKind.UNROLLED)

    def bind(self, loop, thread_axis: str) -> None:
        self._kind("bind", loop, ForKind.THREAD_BINDING, thread_axis)

    # Blocks -----------------------------------------------------------------------------
    def cache_read(self, block, read_buffer_index: int, storage_scope: str, consumer_blocks=None) -> BlockRV:
        name = self._block_name(block, "cache_read")
        consumers = None if consumer_blocks is None else [self._block_name(b, "cache_read") for b in consumer_blocks]
        body, new = cache.cache_read(self._body(), name, read_buffer_index, storage_scope, consumers)
        self._set_body(body)
        rv = BlockRV(new)
        inputs = [("block", block), ("read_buffer_index", read_buffer_index), ("storage_scope", storage_scope)]
        if consumer_blocks is not None:
            inputs.append(("consumer_blocks", list(consumer_blocks)))
        self._record("cache_read", inputs, [rv])
        return rv

    def cache_write(self, block, write_buffer_index: int, storage_scope: str) -> BlockRV:
        name = self._block_name(block, "cache_write")
        body, new = cache.cache_write(self._body(), name, write_buffer_index, storage_scope)
        self._set_body(body)
        rv = BlockRV(new)
        self._record("cache_write", [("block", block), ("write_buffer_index", write_buffer_index),
                                     ("storage_scope", storage_scope)], [rv])
        return rv

    def compute_at(self, block, loop, preserve_unit_loops: bool = False, index: int = -1) -> None:
        self._at("compute_at", block, loop, preserve_unit_loops, index, reverse=False)

    def reverse_compute_at(self, block, loop, preserve_unit_loops: bool = False, index: int = -1) -> None:
        self._at("reverse_compute_at", block, loop, preserve_unit_loops, index, reverse=True)

    def _at(self, kind, block, loop, preserve_unit_loops, index, reverse) -> None:
        name = self._block_name(block, kind)
        var = self._loop_var(loop, kind)
        if index != -1:
            raise ScheduleError(f"{kind}: block {name!r}: only index=-1 (the default position) is supported")
        self._set_body(_at.compute_at(self._body(), name, var, preserve_unit_loops, reverse))
        self._record(kind, [("block", block), ("loop", loop), ("preserve_unit_loops", preserve_unit_loops),
                            ("index", index)])

    def compute_inline(self, block) -> None:
        name = self._block_name(block, "compute_inline")
        func = self._func()
        params = {id(b.data) for b in func.buffer_map.values()} | {id(p) for p in func.params}
        self._set_body(inline.compute_inline(self._body(), params, name))
        self._record("compute_inline", [("block", block)])

    def decompose_reduction(self, block, loop) -> BlockRV:
        name = self._block_name(block, "decompose_reduction")
        var = self._loop_var(loop, "decompose_reduction")
        body, new = reduction.decompose_reduction(self._body(), name, var)
        self._set_body(body)
        rv = BlockRV(new)
        self._record("decompose_reduction", [("block", block), ("loop", loop)], [rv])
        return rv

    def tensorize(self, block_or_loop, tensor_intrin, preserve_unit_iters: bool = True) -> None:
        from . import tensorize as _tz

        intrin = _tz.TensorIntrin.get(tensor_intrin) if isinstance(tensor_intrin, str) else tensor_intrin
        if isinstance(block_or_loop, BlockRV):
            body = _tz.tensorize_block(self._body(), self._block_name(block_or_loop, "tensorize"), intrin)
        else:
            body = _tz.tensorize_loop(self._body(), self._loop_var(block_or_loop, "tensorize"), intrin)
        self._set_body(body)
        self._record("tensorize", [("block_or_loop", block_or_loop), ("tensor_intrin", intrin.name),
                                   ("preserve_unit_iters", preserve_unit_iters)])
