"""Turn a schedule into a PrimFunc: one loop nest per stage, buffers for every tensor.

The result still has multi-dimensional buffer accesses and guards of non-divisible splits;
the TIR pipeline (kiln/tir/transform) flattens, partitions, vectorizes and unrolls it.
"""

from __future__ import annotations

from dataclasses import replace

from kiln.errors import CompileError, ScheduleError
from kiln.ir import expr as E
from kiln.ir.dtype import BOOL_T, HANDLE_T, INT32
from kiln.ir.expr import IterType, IterVar, PrimExpr, ProducerLoad, Reduce, Var, const
from kiln.ir.functor import Mutator, substitute
from kiln.ir.stmt import (
    Allocate, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse, LetStmt, PrimFunc, Stmt, seq,
)
from kiln.tir.op import likely
from kiln.tir.simplify import guard_with as _guard, simplify

from .bound import full_domains, infer_region, leaf_info
from .schedule import Attach, Schedule, Stage, attach_leaf
from .extern import ExternOp
from .tensor import ComputeOp, PlaceholderOp, Tensor

_KINDS = {"vectorize": ForKind.VECTORIZED, "unroll": ForKind.UNROLLED, "parallel": ForKind.PARALLEL}


class _Inliner(Mutator):
    """Replace reads of inlined stages by their expressions."""

    def __init__(self, inlined: dict):
        super().__init__()
        self.inlined = inlined  # id(tensor) -> (op, value_index)

    def visit_ProducerLoad(self, load):
        load = self.generic_visit(load)
        hit = self.inlined.get(id(load.producer))
        if hit is None:
            return load
        op, k = hit
        mapping = {id(iv.var): idx for iv, idx in zip(op.axis, load.indices)}
        return self.visit(substitute(op.body[k], lambda v: mapping.get(id(v))))


class _Lowering:
    def __init__(self, sch: Schedule, args: list, name: str):
        self.sch = sch
        self.name = name
        self.stage_of: dict[int, Stage] = {}
        for st in sch.stages:
            for t in list(st.outputs) + list(st.op.outputs):
                self.stage_of[id(t)] = st
        inlined = {}
        # An extern reads its inputs from memory: a stage it reads keeps its buffer.
        extern_read = {id(t.op) for st in sch.stages if isinstance(st.op, ExternOp) for t in st.op.inputs}
        for st in sch.stages:
            if isinstance(st.op, ExternOp) and st.attach != Attach.ROOT:
                raise ScheduleError(f"stage {st.name}: an extern stage is computed as a whole at the root; "
                                    "it cannot be inlined or computed at another stage")
            if st.attach == Attach.INLINE and id(st.op) in extern_read:
                st.attach = Attach.ROOT
            if st.attach == Attach.INLINE:
                for k, t in enumerate(list(st.outputs)):
                    inlined[id(t)] = (st.op, k)
                for k, t in enumerate(st.op.outputs):
                    inlined[id(t)] = (st.op, k)
        inliner = _Inliner(inlined)
        self.active = [st for st in sch.stages
                       if st.attach != Attach.INLINE and isinstance(st.op, (ComputeOp, ExternOp))]
        self.bodies = {st: [inliner.visit(b) for b in st.op.body] if isinstance(st.op, ComputeOp) else []
                       for st in self.active}
        self._check_bindings()
        self.params: list[Var] = []
        self.buffer_map: dict = {}
        self.buffers: dict[int, list[Buffer]] = {}  # id(stage) -> buffers of its outputs
        self.arg_stages: set[int] = set()
        self._bind_args(args)
        self.domains: dict = {}
        self.infos: dict = {}
        self.region_min: dict[int, list] = {}

    def _check_bindings(self) -> None:
        for st in self.active:
            if st.attach == Attach.SCOPE and st.attach_stage.attach == Attach.INLINE:
                raise ScheduleError(f"stage {st.name}: it is computed at {st.attach_stage.name}, which is inlined")

    def _bind_args(self, args: list) -> None:
        seen = set()
        for a in args:
            if isinstance(a, Tensor):
                if id(a) in seen:
                    raise CompileError(f"{self.name}: tensor {a.name} appears twice in args")
                seen.add(id(a))
                st = self.stage_of.get(id(a))
                handle = Var(a.name, HANDLE_T)
                # An argument stage given a scope (global.texture*: an image argument) keeps it.
                scope = st.scope if st is not None and getattr(st, "scope_set", False) else "global"
                buf = Buffer(a.name, Var(a.name, HANDLE_T), a.dtype, tuple(a.shape), scope=scope)
                self.params.append(handle)
                self.buffer_map[handle] = buf
                if st is None:
                    # A placeholder that the outputs do not read is still a valid argument.
                    continue
                if st.attach == Attach.INLINE:
                    raise ScheduleError(f"stage {st.name}: an argument of the function cannot be inlined")
                self.buffers.setdefault(id(st), [None] * len(st.op.outputs))[a.value_index] = buf
                self.arg_stages.add(id(st))
            elif isinstance(a, Var):
                self.params.append(a)
            elif isinstance(a, Buffer):
                handle = Var(a.name, HANDLE_T)
                self.params.append(handle)
                self.buffer_map[handle] = a
            else:
                raise CompileError(f"{self.name}: argument {a!r} must be a te.Tensor, a Var or a Buffer")
        for st in self.sch.stages:
            if isinstance(st.op, PlaceholderOp) and id(st) not in self.arg_stages and self._is_read(st):
                raise CompileError(
                    f"{self.name}: placeholder {st.op.name} is read but not in args; add it to the argument list"
                )

    def _is_read(self, st: Stage) -> bool:
        from .bound import _Reads

        tensors = {id(t) for t in st.outputs}
        if any(id(t) in tensors for c in self.active if isinstance(c.op, ExternOp) for t in c.op.inputs):
            return True
        for body in self.bodies.values():
            r = _Reads(tensors)
            for b in body:
                r.visit(b)
            if r.found:
                return True
        return False

    # Bounds ------------------------------------------------------------------------------
    def infer_bounds(self) -> None:
        for st in reversed(self.active):
            if isinstance(st.op, ExternOp):
                self.infos[st] = None
                self.region_min[id(st)] = None
                continue
            if st.attach == Attach.SCOPE:
                if not st.scope_set:
                    st.scope = _attached_scope(st)
                consumers = [c for c in self.active if self._reads(c, st)]
                if not consumers:
                    raise ScheduleError(f"stage {st.name}: compute_at, but no stage reads it")
                for c in consumers:
                    if isinstance(c.op, ExternOp):
                        raise ScheduleError(f"stage {st.name}: compute_at cannot place it inside extern stage "
                                            f"{c.name}; an extern reads whole buffers")
                    if c not in self.infos:
                        raise ScheduleError(f"stage {st.name}: consumer {c.name} must come after it")
                region = infer_region(st, consumers, self.domains, self.infos, self.bodies)
                doms = dict(region)
                for iv in st.op.reduce_axis:
                    doms[iv] = iv.dom
            else:
                doms = full_domains(st)
            self.domains.update(doms)
            self.infos[st] = leaf_info(st, self.domains)
            self.region_min[id(st)] = [doms[iv].min for iv in st.op.axis] if st.attach == Attach.SCOPE else None

    def _reads(self, consumer: Stage, producer: Stage) -> bool:
        from .bound import _Reads

        ids = {id(t) for t in producer.outputs} | {id(t) for t in producer.op.outputs}
        if isinstance(consumer.op, ExternOp):
            return any(id(t) in ids for t in consumer.op.inputs)
        r = _Reads(ids)
        for b in self.bodies[consumer]:
            r.visit(b)
        return bool(r.found)

    # Buffers -----------------------------------------------------------------------------
    def buffers_of(self, st: Stage) -> list[Buffer]:
        bufs = self.buffers.get(id(st))
        if isinstance(st.op, ExternOp) and (bufs is None or any(b is None for b in bufs)):
            # Outputs of an extern may differ in shape and dtype.
            bufs = [b if b is not None else Buffer(t.name, Var(t.name, HANDLE_T), t.dtype, tuple(t.shape), scope=st.scope)
                    for b, t in zip(bufs or [None] * len(st.op.outputs), st.op.outputs)]
            self.buffers[id(st)] = bufs
        if bufs is None or any(b is None for b in bufs):
            if st.attach == Attach.SCOPE:
                shape = tuple(self.domains[iv].extent for iv in st.op.axis)
            else:
                shape = tuple(st.op.outputs[0].shape)
            strides = _aligned_strides(shape, st.aligns) if st.aligns else ()
            bufs = [b if b is not None else Buffer(t.name, Var(t.name, HANDLE_T), t.dtype, shape, strides, scope=st.scope)
                    for b, t in zip(bufs or [None] * len(st.op.outputs), st.op.outputs)]
            self.buffers[id(st)] = bufs
        return bufs

    def load(self, load: ProducerLoad) -> PrimExpr:
        st = self.stage_of.get(id(load.producer))
        if st is None:
            raise CompileError(f"{self.name}: tensor {load.producer.name} is not part of the schedule")
        bufs = self.buffers.get(id(st)) if isinstance(st.op, PlaceholderOp) else self.buffers_of(st)
        if bufs is None:
            raise CompileError(f"{self.name}: placeholder {load.producer.name} is read but not in args")
        buf = bufs[load.producer.value_index]
        idx = load.indices
        mins = self.region_min.get(id(st))
        if mins:
            idx = tuple(simplify(i - m) for i, m in zip(idx, mins))
        return E.BufferLoad(buf, tuple(idx), load.dtype)

    # Loop nests --------------------------------------------------------------------------
    def stage_stmt(self, st: Stage) -> Stmt:
        if isinstance(st.op, ExternOp):
            return self._extern_stmt(st)
        info = self.infos[st]
        op = st.op
        values = {}
        for iv in list(op.axis) + list(op.reduce_axis):
            values[id(iv.var)] = simplify(self.domains[iv].min + info.offsets[iv])
        lowerer = _ToBuffers(self)

        def expr(e):
            return lowerer.visit(simplify(substitute(e, lambda v: values.get(id(v)))))

        bufs = self.buffers_of(st)
        if st.attach == Attach.SCOPE:
            store_idx = tuple(simplify(info.offsets[iv]) for iv in op.axis)
        else:
            store_idx = tuple(values[id(iv.var)] for iv in op.axis)
        # Guards are already in leaf variables: no substitution (an unsplit axis's leaf is its root var).
        def leaf_expr(e):
            return lowerer.visit(simplify(e))

        guards = [leaf_expr(g) for g in info.guards]
        if st.attach == Attach.SCOPE:
            # The region may reach past the tensor's shape (a tail of the consumer's split).
            for iv, shape_dim in zip(op.axis, op.outputs[0].shape):
                guards.append(leaf_expr(E.LT(values[id(iv.var)], shape_dim, BOOL_T)))
        if st.tensorized is not None:
            from .tensorize import tensorize_stmt

            return tensorize_stmt(self, st, info, bufs, store_idx, guards)
        body0 = self.bodies[st][0]
        if isinstance(body0, Reduce) and any(iv in st.bindings for iv in st.leaf_iter_vars
                                             if iv.iter_type == IterType.COMM_REDUCE):
            from .cross_thread import cross_thread_reduce

            return cross_thread_reduce(self, st, info, bufs, store_idx, guards, expr, leaf_expr)
        if isinstance(body0, Reduce):
            return self._reduce_nest(st, info, bufs, store_idx, guards, expr, leaf_expr)
        stores = [BufferStore(b, expr(v), store_idx) for b, v in zip(bufs, self.bodies[st])]
        inner = _guard(seq(*stores), guards)
        return self._nest(st, st.leaf_iter_vars, info, inner)

    def _extern_stmt(self, st: Stage) -> Stmt:
        """The extern's statement with its placeholder buffers bound to the real ones."""
        op: ExternOp = st.op
        binding = {}
        for t, ph in zip(op.inputs, op.input_placeholders):
            src = self.stage_of.get(id(t))
            if src is None:
                raise CompileError(f"{self.name}: tensor {t.name}, read by extern {op.name}, is not part of the schedule")
            bufs = self.buffers.get(id(src)) if isinstance(src.op, PlaceholderOp) else self.buffers_of(src)
            if bufs is None:
                raise CompileError(f"{self.name}: placeholder {t.name} is read by extern {op.name} but not in args")
            binding[id(ph.data)] = bufs[t.value_index]
        for ph, buf in zip(op.output_placeholders, self.buffers_of(st)):
            binding[id(ph.data)] = buf
        return _Rebind(binding).visit(op.body)

    def _reduce_nest(self, st, info, bufs, store_idx, guards, expr, leaf_expr) -> Stmt:
        red: Reduce = self.bodies[st][0]
        reduce_leaves = [iv for iv in st.leaf_iter_vars if iv.iter_type == IterType.COMM_REDUCE]
        first = st.leaf_iter_vars.index(reduce_leaves[0]) if reduce_leaves else len(st.leaf_iter_vars)
        dtypes = [b.dtype for b in self.bodies[st]]
        if red.init:
            init_vals = [expr(i) for i in red.init]
        else:
            init_vals = red.combiner.identity(dtypes)
        init = _guard(seq(*[BufferStore(b, E.cast(v, b.dtype), store_idx) for b, v in zip(bufs, init_vals)]), guards)
        init_loops = [iv for iv in st.leaf_iter_vars[first:] if iv.iter_type != IterType.COMM_REDUCE]
        init_nest = self._nest(st, init_loops, info, init, attach=False)
        lhs = [E.BufferLoad(b, store_idx, b.dtype) for b in bufs]
        rhs = [expr(s) for s in red.source]
        combined = red.combiner.combine(lhs, rhs)
        if len(bufs) == 1:
            update = BufferStore(bufs[0], E.cast(combined[0], bufs[0].dtype), store_idx)
        else:
            temps = [Var(f"{b.name}_v{k}", b.dtype) for k, b in enumerate(bufs)]
            update = seq(*[BufferStore(b, t, store_idx) for b, t in zip(bufs, temps)])
            for t, c in reversed(list(zip(temps, combined))):
                update = LetStmt(t, E.cast(c, t.dtype), update)
        conds = list(guards) + [leaf_expr(g) for g in info.reduce_guards]
        cond = expr(red.condition)
        if not (isinstance(cond, E.IntImm) and cond.value):
            conds.append(cond)
        update = _guard(update, conds)
        return self._nest(st, st.leaf_iter_vars, info, update, before={first: init_nest})

    def _nest(self, st: Stage, leaves: list, info, body: Stmt, attach: bool = True, before=None) -> Stmt:
        """Loops over leaves around body; attached stages go inside their loop level."""
        before = before or {}
        stmt = body
        positions = {id(iv): k for k, iv in enumerate(st.leaf_iter_vars)}
        for iv in reversed(leaves):
            k = positions[id(iv)]
            if attach:
                stmt = self._with_attached(st, iv, stmt)
            stmt = self._loop(st, iv, info, stmt)
            if k in before:
                # The reduction's init runs just before the loop of the first reduction axis.
                stmt = seq(before.pop(k), stmt)
        return stmt

    def _loop(self, st: Stage, iv: IterVar, info, body: Stmt) -> Stmt:
        ext = simplify(info.extents[iv])
        kind = _KINDS.get(st.kinds.get(iv), ForKind.SERIAL)
        binding = st.bindings.get(iv)
        annotations = {}
        for key, value in st.pragmas.get(iv, {}).items():
            if key == "prefetch":  # pragma(iv, "prefetch", [t[...], ..]): each iteration first asks for those lines
                body = seq(*[self._prefetch(load) for load in value], body)
            else:
                annotations["pragma_" + key] = value
        if binding is not None:
            dom = binding.dom
            if dom is not None and isinstance(dom.extent, E.IntImm) and isinstance(ext, E.IntImm) \
                    and dom.extent.value != ext.value:
                # te.thread_axis((0, 64), "threadIdx.x") fixes the launch: a shorter loop is guarded.
                if dom.extent.value < ext.value:
                    raise ScheduleError(f"stage {st.name}: axis {iv.var.name} has {ext.value} iterations but is "
                                        f"bound to {binding.thread_tag} of extent {dom.extent.value}")
                body = IfThenElse(likely(E.LT(iv.var, E.cast(ext, iv.var.dtype), BOOL_T)), body)
                ext = E.cast(dom.extent, iv.var.dtype) if dom.extent.dtype != iv.var.dtype else dom.extent
            return For(iv.var, const(0, iv.var.dtype), ext, ForKind.THREAD_BINDING, body, binding, annotations)
        return For(iv.var, const(0, iv.var.dtype), ext, kind, body, None, annotations)

    def _prefetch(self, load: ProducerLoad) -> Stmt:
        """tir.prefetch of the element a ProducerLoad names (its address only: no bounds needed)."""
        address = E.Call(HANDLE_T, "tir.address_of", (_ToBuffers(self).visit(simplify(load)),))
        return Evaluate(E.Call(INT32, "tir.prefetch", (address,)))

    def _with_attached(self, parent: Stage, iv: IterVar, inner: Stmt) -> Stmt:
        attached = [c for c in self.active if c.attach == Attach.SCOPE and c.attach_stage is parent
                    and attach_leaf(parent, c.attach_ivar) is iv]
        if not attached:
            return inner
        stmts = [_double_buffer_mark(c, self.buffers_of(c), self.stage_stmt(c)) for c in attached]
        stmt = seq(*stmts, inner)
        for c in reversed(attached):
            for b in self.buffers_of(c):
                stmt = Allocate(b, (_alloc_size(b),), stmt)
        return stmt

    def run(self) -> PrimFunc:
        self.infer_bounds()
        roots = [st for st in self.active if st.attach == Attach.ROOT]
        body = seq(*[self.stage_stmt(st) for st in roots])
        params = {id(b) for b in self.buffer_map.values()}
        for st in reversed(roots):
            # Outputs that are not arguments need storage, even when a sibling output is one.
            for b in self.buffers_of(st):
                if id(b) not in params:
                    body = Allocate(b, (_alloc_size(b),), body)
        return PrimFunc(tuple(self.params), body, None, self.buffer_map, {"global_symbol": self.name})


def _double_buffer_mark(st: Stage, bufs, stmt: Stmt) -> Stmt:
    """A double-buffered stage's statement, marked for kiln/tir/transform/double_buffer.py."""
    if not st.double_buffered:
        return stmt
    from kiln.ir.stmt import AttrStmt

    return AttrStmt(bufs[0].data, "double_buffer_scope", const(int(st.double_buffered)), stmt)


def _attached_scope(st: Stage) -> str:
    """The memory of a stage attached under GPU thread loops (all threads of a block share what
    is computed under blockIdx only; a stage under threadIdx is each thread's own)."""
    rank = -1
    while st.attach == Attach.SCOPE:
        parent = st.attach_stage
        leaf = attach_leaf(parent, st.attach_ivar)
        for iv in parent.leaf_iter_vars[:parent.leaf_iter_vars.index(leaf) + 1]:
            thread = parent.bindings.get(iv)
            if thread is not None:
                tag = thread.thread_tag
                rank = max(rank, 0 if tag.startswith("blockIdx") else 1)
        st = parent
    return {-1: "global", 0: "shared", 1: "local"}[rank]


class _Rebind(Mutator):
    """Accesses through an extern's placeholder buffers (and views sharing their data) go to the
    real buffers; a view of another shape (ir_builder's flat indexing) keeps its shape."""

    def __init__(self, binding: dict):
        super().__init__()
        self.binding = binding  # id(placeholder data Var) -> real Buffer
        self.views: dict[int, Buffer] = {}

    def buffer(self, b: Buffer) -> Buffer:
        real = self.binding.get(id(b.data))
        if real is None:
            return b
        if len(b.shape) == len(real.shape):
            return real
        view = self.views.get(id(b))
        if view is None:
            view = self.views[id(b)] = replace(b, data=real.data, scope=real.scope)
        return view

    def visit_Var(self, v):
        real = self.binding.get(id(v))
        return real.data if real is not None else v

    def visit_BufferLoad(self, op):
        op = self.generic_visit(op)
        return E.BufferLoad(self.buffer(op.buffer), op.indices, op.dtype)

    def visit_BufferStore(self, op):
        op = self.generic_visit(op)
        return BufferStore(self.buffer(op.buffer), op.value, op.indices)


class _ToBuffers(Mutator):
    def __init__(self, lowering: _Lowering):
        super().__init__()
        self.lowering = lowering

    def visit_ProducerLoad(self, load):
        load = self.generic_visit(load)
        return self.lowering.load(load)


def _alloc_size(b: Buffer) -> PrimExpr:
    if b.strides:
        return simplify(b.strides[0] * b.shape[0])
    return _prod(b.shape)


def _aligned_strides(shape, aligns: dict) -> tuple:
    """Row-major strides where the stride of each aligned axis is padded to factor*k + offset."""
    strides = [None] * len(shape)
    stride = const(1, shape[-1].dtype) if shape else const(1)
    for d in range(len(shape) - 1, -1, -1):
        if d in aligns:
            factor, offset = aligns[d]
            stride = simplify(stride + (offset - E.FloorMod(stride, factor, stride.dtype)) % factor) \
                if not isinstance(stride, E.IntImm) else const(stride.value + (offset - stride.value % factor) % factor, stride.dtype)
        strides[d] = stride
        stride = simplify(stride * shape[d])
    return tuple(strides)


def _prod(shape) -> PrimExpr:
    out = const(1, shape[0].dtype) if shape else const(1)
    for s in shape:
        out = out * s
    return simplify(out)


def lower_to_primfunc(sch: Schedule, args: list, name: str = "main") -> PrimFunc:
    """The PrimFunc of a schedule, before the TIR pipeline."""
    if not isinstance(sch, Schedule):
        raise TypeError(f"expected a te.Schedule, got {type(sch).__name__}")
    return _Lowering(sch, list(args), name).run()


_ = (replace, Tensor)
