"""Schedules as data: each primitive records a relation or an annotation on a stage.

``te/lower.py`` turns the records into loops. Errors name the stage and the axis.
"""

from __future__ import annotations

import enum

from kiln.errors import ScheduleError
from kiln.ir.expr import IterType, IterVar, Var, convert
from kiln.ir.functor import substitute

from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor, compute
from .tensor_intrin import TensorIntrin


_THREAD_TAGS = {f"{k}.{d}" for k in ("blockIdx", "threadIdx") for d in "xyz"}


class Split:
    """parent = outer * factor + inner (factor given) or outer has nparts iterations."""

    def __init__(self, parent: IterVar, outer: IterVar, inner: IterVar, factor, nparts):
        self.parent, self.outer, self.inner, self.factor, self.nparts = parent, outer, inner, factor, nparts


class Fuse:
    """fused = outer * extent(inner) + inner."""

    def __init__(self, outer: IterVar, inner: IterVar, fused: IterVar):
        self.outer, self.inner, self.fused = outer, inner, fused


class Attach(enum.Enum):
    ROOT = "root"
    INLINE = "inline"
    SCOPE = "scope"


class Stage:
    """How one operation is computed: its loop axes, their order and kinds, and where it sits."""

    def __init__(self, op: Operation, schedule: "Schedule"):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.outputs = list(op.outputs)
        self.relations: list = []
        self.kinds: dict[IterVar, object] = {}
        self.bindings: dict[IterVar, IterVar] = {}
        self.pragmas: dict[IterVar, dict] = {}
        self.attach = Attach.ROOT
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.scope = "global"
        self.aligns: dict[int, tuple[int, int]] = {}  # axis position -> (factor, offset)
        self.scope_set = False  # an unset scope of a stage attached under GPU threads is inferred
        self.tensorized = None  # (axis, TensorIntrin): kiln/te/tensorize.py
        self.double_buffered = False
        self._reset_axes()

    def _reset_axes(self) -> None:
        op = self.op
        if isinstance(op, ComputeOp):
            self.all_iter_vars = list(op.axis) + list(op.reduce_axis)
        else:
            self.all_iter_vars = []
        self.leaf_iter_vars = list(self.all_iter_vars)

    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self) -> str:
        return f"stage({self.op.name})"

    def _check_leaf(self, iv: IterVar, what: str) -> None:
        if not isinstance(iv, IterVar):
            raise ScheduleError(f"stage {self.name}: {what} expects an axis (IterVar), got {iv!r}")
        if iv not in self.leaf_iter_vars:
            state = "was already split or fused" if iv in self.all_iter_vars else "does not belong to this stage"
            raise ScheduleError(f"stage {self.name}: cannot {what} axis {iv.var.name}: it {state}")

    def _new_axis(self, name: str, like: IterVar) -> IterVar:
        iv = IterVar(None, Var(name, like.var.dtype), like.iter_type)
        self.all_iter_vars.append(iv)
        return iv

    # Loop structure -----------------------------------------------------------------------
    def split(self, parent: IterVar, factor=None, nparts=None):
        """Split parent into (outer, inner), with inner of extent factor or outer of nparts."""
        self._check_leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"stage {self.name}: split axis {parent.var.name} with exactly one of factor= or nparts=")
        amount = convert(factor if factor is not None else nparts)
        if hasattr(amount, "value") and amount.value <= 0:
            raise ScheduleError(f"stage {self.name}: split factor for axis {parent.var.name} must be positive, got {amount.value}")
        outer = self._new_axis(parent.var.name + ".outer", parent)
        inner = self._new_axis(parent.var.name + ".inner", parent)
        self.relations.append(Split(parent, outer, inner, amount if factor is not None else None,
                                    amount if nparts is not None else None))
        i = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[i:i + 1] = [outer, inner]
        return outer, inner

    def fuse(self, *args):
        """Fuse consecutive axes into one."""
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        if not args:
            raise ScheduleError(f"stage {self.name}: fuse needs at least one axis")
        for iv in args:
            self._check_leaf(iv, "fuse")
        if len(args) == 1:
            return args[0]
        positions = [self.leaf_iter_vars.index(iv) for iv in args]
        if positions != list(range(positions[0], positions[0] + len(args))):
            names = ", ".join(iv.var.name for iv in args)
            raise ScheduleError(f"stage {self.name}: fuse needs adjacent axes in loop order, got {names}; reorder first")
        kinds = {iv.iter_type == IterType.COMM_REDUCE for iv in args}
        if len(kinds) > 1:
            raise ScheduleError(f"stage {self.name}: cannot fuse a reduction axis with a data axis")
        fused = args[0]
        for inner in args[1:]:
            name = fused.var.name + "." + inner.var.name + ".fused"
            new = self._new_axis(name, fused)
            self.relations.append(Fuse(fused, inner, new))
            i = self.leaf_iter_vars.index(fused)
            self.leaf_iter_vars[i:i + 2] = [new]
            fused = new
        return fused

    def reorder(self, *args):
        """Put the given axes in this order, keeping the others where they are."""
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        for iv in args:
            self._check_leaf(iv, "reorder")
        if len(set(map(id, args))) != len(args):
            raise ScheduleError(f"stage {self.name}: reorder got the same axis twice")
        positions = sorted(self.leaf_iter_vars.index(iv) for iv in args)
        for pos, iv in zip(positions, args):
            self.leaf_iter_vars[pos] = iv

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two axes and order them (xo, yo, xi, yi)."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # Annotations --------------------------------------------------------------------------
    def _annotate(self, iv: IterVar, kind: str) -> None:
        self._check_leaf(iv, kind)
        if kind == "vectorize" and iv.iter_type == IterType.COMM_REDUCE:
            raise ScheduleError(
                f"stage {self.name}: cannot vectorize the reduction axis {iv.var.name}; "
                "vectorize a data axis (reorder it innermost) instead"
            )
        if kind == "parallel" and iv.iter_type == IterType.COMM_REDUCE:
            raise ScheduleError(f"stage {self.name}: cannot parallelize the reduction axis {iv.var.name}")
        self.kinds[iv] = kind

    def vectorize(self, iv: IterVar) -> None:
        self._annotate(iv, "vectorize")

    def unroll(self, iv: IterVar) -> None:
        self._annotate(iv, "unroll")

    def parallel(self, iv: IterVar) -> None:
        self._annotate(iv, "parallel")

    def bind(self, iv: IterVar, thread_ivar: IterVar) -> None:
        """Bind an axis to a GPU thread index (``te.thread_axis("threadIdx.x")``)."""
        self._check_leaf(iv, "bind")
        if not isinstance(thread_ivar, IterVar) or not thread_ivar.thread_tag:
            raise ScheduleError(f"stage {self.name}: bind axis {iv.var.name} to a te.thread_axis(...)")
        tag = thread_ivar.thread_tag
        if tag not in _THREAD_TAGS and not tag.startswith(("vthread", "cthread")):  # cthread: VTA's vthread
            raise ScheduleError(f"stage {self.name}: unknown thread tag {tag!r}; use blockIdx.x|y|z, "
                                "threadIdx.x|y|z or vthread")
        for other, t in self.bindings.items():
            if t.thread_tag == tag and other is not iv and not tag.startswith(("vthread", "cthread")):
                raise ScheduleError(f"stage {self.name}: axes {other.var.name} and {iv.var.name} are both "
                                    f"bound to {tag}; fuse them first or bind one to another thread axis")
        self.bindings[iv] = thread_ivar

    def pragma(self, iv: IterVar, pragma_type: str, pragma_value=None) -> None:
        self._check_leaf(iv, "pragma")
        self.pragmas.setdefault(iv, {})[pragma_type] = pragma_value

    def set_scope(self, scope: str) -> None:
        # global.texture*: an RGBA image (5-D tensors, innermost 4; kiln/tir/transform/texture.py)
        if scope not in ("global", "shared", "local", "warp", "global.texture", "global.texture-nhwc",
                         "global.texture-weight", "wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator",
                         "wgmma.accumulator") \
                and not scope.startswith("local."):  # local.<tag>: an accelerator's SRAM (kiln/vta)
            raise ScheduleError(f"stage {self.name}: unknown storage scope {scope!r}; use global, shared, local, "
                                "global.texture[-nhwc|-weight], wmma.matrix_a|matrix_b|accumulator, wgmma.accumulator or "
                                "local.<tag>")
        self.scope = scope
        self.scope_set = True

    def storage_align(self, axis, factor, offset) -> None:
        """Pad the row stride of axis so that stride % factor == offset (avoids shared-memory
        bank conflicts when threads of a warp read down a column)."""
        if not isinstance(self.op, ComputeOp) or axis not in self.op.axis:
            raise ScheduleError(f"stage {self.name}: storage_align needs one of the stage's original axes (op.axis)")
        factor, offset = int(factor), int(offset)
        if factor <= 0 or not 0 <= offset < factor:
            raise ScheduleError(f"stage {self.name}: storage_align needs factor > 0 and 0 <= offset < factor, "
                                f"got factor={factor} offset={offset}")
        self.aligns[list(self.op.axis).index(axis)] = (factor, offset)

    def tensorize(self, axis: IterVar, intrin) -> None:
        """Compute the loops from axis inwards with a tensor intrinsic (te.decl_tensor_intrin)."""
        self._check_leaf(axis, "tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise ScheduleError(f"stage {self.name}: tensorize needs a te.decl_tensor_intrin(...), got {intrin!r}")
        self.tensorized = (axis, intrin)

    def double_buffer(self, stages: int = 2) -> None:
        """Keep two copies of this shared stage so the next loop iteration's tile is fetched while
        the current one is used (CUDA: kiln/tir/transform/double_buffer.py; elsewhere ignored).
        kiln's ``stages`` > 2 keeps that many copies, fetching stages - 1 iterations ahead."""
        if int(stages) < 2:
            raise ScheduleError(f"stage {self.name}: double_buffer needs stages >= 2, got {stages}")
        self.double_buffered = int(stages)

    # Placement ----------------------------------------------------------------------------
    def compute_at(self, parent: "Stage", scope: IterVar) -> None:
        """Compute this stage inside parent's loop over scope, only the region it needs there."""
        if not isinstance(parent, Stage):
            raise ScheduleError(f"stage {self.name}: compute_at needs a stage, e.g. s[C]")
        if scope not in parent.leaf_iter_vars:
            raise ScheduleError(f"stage {self.name}: compute_at axis {getattr(scope, 'var', scope)} is not a loop of stage {parent.name}")
        if parent is self:
            raise ScheduleError(f"stage {self.name}: cannot compute_at itself")
        self.attach, self.attach_stage, self.attach_ivar = Attach.SCOPE, parent, scope

    def compute_inline(self) -> None:
        """Substitute this stage's expression into its consumers."""
        if isinstance(self.op, ComputeOp) and self.op.reduce_axis:
            raise ScheduleError(f"stage {self.name}: cannot inline a reduction")
        if self in self.schedule.output_stages():
            raise ScheduleError(f"stage {self.name}: cannot inline an output of the schedule")
        self.attach = Attach.INLINE

    def compute_root(self) -> None:
        self.attach, self.attach_stage, self.attach_ivar = Attach.ROOT, None, None


class Schedule:
    """The stages of all operations needed by the outputs, in producer-before-consumer order."""

    def __init__(self, outputs: list[Operation]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self._by_op: dict[int, Stage] = {}
        for op in _topo_order(outputs):
            self._add(Stage(op, self))

    def _add(self, stage: Stage, before: Stage | None = None) -> None:
        if before is None:
            self.stages.append(stage)
        else:
            self.stages.insert(self.stages.index(before), stage)
        self._by_op[id(stage.op)] = stage

    def __getitem__(self, key) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        stage = self._by_op.get(id(op))
        if stage is None:
            raise ScheduleError(f"{getattr(op, 'name', op)} is not part of this schedule")
        return stage

    def output_stages(self) -> list[Stage]:
        return [self[op] for op in self.outputs]

    def stage_of_tensor(self, t: Tensor) -> Stage:
        return self[t.op]

    def create_group(self, outputs, inputs, include_inputs=False):
        raise ScheduleError("create_group is not supported; schedule stages one by one")

    # Caches -------------------------------------------------------------------------------
    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """A copy of tensor in scope, read by readers instead of tensor."""
        readers = [r.op if isinstance(r, Tensor) else r for r in (readers if isinstance(readers, (list, tuple)) else [readers])]
        cache = compute(tensor.shape, lambda *i: tensor(*i), name=f"{tensor.name}.{scope}")
        cache_stage = Stage(cache.op, self)
        cache_stage.set_scope(scope)
        first = min((self.stages.index(self[r]) for r in readers), default=len(self.stages))
        self._add(cache_stage, self.stages[first] if first < len(self.stages) else None)
        for r in readers:
            stage = self[r]
            _rewrite_reads(stage, {id(tensor): cache})
            self._by_op[id(stage.op)] = stage
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute tensor into a cache in scope; the original stage copies the cache out."""
        stage = self[tensor]
        op = stage.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"cache_write: {tensor.name} is not a compute")
        if stage.relations or stage.kinds:
            raise ScheduleError(f"stage {stage.name}: call cache_write before splitting or annotating the stage")
        cache_op = _copy_compute(op, f"{op.name}.{scope}")
        # The copy keeps the original axes (so C.op.axis still names its loops); the cache gets fresh ones.
        axis = list(op.axis)
        copy_body = [cache_op.outputs[i](*[iv.var for iv in axis]) for i in range(len(op.body))]
        copy_op = ComputeOp(op.name, op.tag, op.attrs, axis, copy_body)
        cache_stage = Stage(cache_op, self)
        cache_stage.set_scope(scope)
        self._add(cache_stage, stage)
        stage.op = copy_op
        stage._reset_axes()
        self._by_op[id(copy_op)] = stage
        return cache_op.output(0) if len(cache_op.outputs) == 1 else cache_op.outputs

    def normalize(self) -> "Schedule":
        return self


def _fresh(iv: IterVar) -> IterVar:
    return IterVar(iv.dom, Var(iv.var.name, iv.var.dtype), iv.iter_type, iv.thread_tag)


def _copy_compute(op: ComputeOp, name: str) -> ComputeOp:
    """The same computation with fresh axes (reduction axes included)."""
    from kiln.ir.expr import Reduce
    from dataclasses import replace

    axis = [_fresh(iv) for iv in op.axis]
    rmap = {id(iv.var): _fresh(iv) for iv in op.reduce_axis}
    vmap = {id(o.var): n.var for o, n in zip(op.axis, axis)}
    vmap.update({k: v.var for k, v in rmap.items()})

    def sub(e):
        return substitute(e, lambda v: vmap.get(id(v)))

    body = []
    for b in op.body:
        if isinstance(b, Reduce):
            b = replace(b, source=tuple(sub(s) for s in b.source), condition=sub(b.condition),
                        axis=tuple(rmap[id(a.var)] for a in b.axis))
        else:
            b = sub(b)
        body.append(b)
    return ComputeOp(name, op.tag, op.attrs, axis, body)


def _rewrite_reads(stage: Stage, mapping: dict[int, Tensor]) -> None:
    """Make stage read mapping[tensor] wherever it read tensor."""
    from dataclasses import replace

    from kiln.ir.expr import ProducerLoad
    from kiln.ir.functor import Mutator

    class _Redirect(Mutator):
        def visit_ProducerLoad(self, load):
            load = self.generic_visit(load)
            new = mapping.get(id(load.producer))
            return load if new is None else replace(load, producer=new)

    op = stage.op
    if not isinstance(op, ComputeOp):
        raise ScheduleError(f"cache_read: reader {op.name} is not a compute")
    # A new op with the same axes, so the user's ops stay untouched (another schedule may use
    # them) while s[reader] and reader.op.axis keep working.
    stage.op = ComputeOp(op.name, op.tag, op.attrs, op.axis, [_Redirect().visit(b) for b in op.body])


def _topo_order(outputs: list[Operation]) -> list[Operation]:
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in outputs:
        visit(op)
    return order


def create_schedule(ops) -> Schedule:
    """A schedule with the default loop nest for each operation: ``s = te.create_schedule(B.op)``."""
    if not isinstance(ops, (list, tuple)):
        ops = [ops]
    ops = [o.op if isinstance(o, Tensor) else o for o in ops]
    for o in ops:
        if not isinstance(o, Operation):
            raise TypeError(f"create_schedule expects operations (tensor.op), got {type(o).__name__}")
    return Schedule(ops)


_ = PlaceholderOp


def attach_leaf(parent: Stage, iv: IterVar) -> IterVar:
    """The leaf loop an attach axis ended up as: fused axes attach to the fused loop, split ones to the inner."""
    while iv not in parent.leaf_iter_vars:
        for rel in parent.relations:
            if isinstance(rel, Fuse) and iv in (rel.outer, rel.inner):
                iv = rel.fused
                break
            if isinstance(rel, Split) and iv is rel.parent:
                iv = rel.inner
                break
        else:
            raise ScheduleError(f"stage {parent.name}: axis {iv.var.name} is no longer a loop of the stage")
    return iv
