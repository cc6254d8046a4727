"""One schedule for any operator graph: inline the injective stages, then for each remaining stage
parallelize the outer data loops and vectorize the innermost data loop.

It is correct for every compute in topi and reasonably fast for memory-bound ones; the
compute-bound operators (conv2d, dense, batch_matmul) have tiled schedules in ``topi.x86``.
"""

from __future__ import annotations

from kiln import te
from kiln.te.tensor import ComputeOp

from ..cpu import vector_lanes
from ..utils import const_int


def _as_list(outs):
    return [outs] if isinstance(outs, te.Tensor) else list(outs)


def is_injective(op) -> bool:
    return any(t in op.tag for t in ("injective", "elemwise", "broadcast"))


def inline_injective(s, outs) -> None:
    """Inline every injective stage that is not an output."""
    out_ops = {id(o.op) for o in outs}
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, ComputeOp) and id(op) not in out_ops and is_injective(op) and not op.reduce_axis \
                and stage.attach.value == "root":
            stage.compute_inline()


def schedule_stage(s, t, lanes: int | None = None, min_parallel: int = 16384) -> None:
    """Parallel outer data loops, vectorized inner data loop (reductions go between them).

    Below ``min_parallel`` element-steps the kernel runs in one thread: it takes a couple of
    microseconds, less than waking a second thread costs.
    """
    st = s[t]
    op = st.op
    axes = list(op.axis)
    if not axes:
        return
    lanes = lanes or vector_lanes()
    shape = [const_int(a.dom.extent) for a in axes]
    total = 1
    for d in shape:
        total *= d
    inner_extent = shape[-1]
    outer, vec = axes[:-1], None
    if inner_extent >= lanes:
        xo, vec = st.split(axes[-1], factor=lanes)
        outer = axes[:-1] + [xo]
    elif inner_extent in (2, 4, 8, 16) and len(axes) > 1:
        vec = axes[-1]
    else:
        outer = axes
    if op.reduce_axis and vec is not None:
        st.reorder(*outer, *op.reduce_axis, vec)
    if vec is not None:
        st.vectorize(vec)
    work = total * max(1, _reduce_size(op))
    if outer and work >= min_parallel:
        # Parallelize as many outer loops as give at least a few chunks per core.
        fused = outer[0] if len(outer) == 1 else st.fuse(*outer[:_parallel_depth(shape, len(outer))])
        st.parallel(fused)


def _parallel_depth(shape, n_outer) -> int:
    count, depth = 1, 0
    for d in shape[:n_outer]:
        count *= d
        depth += 1
        if count >= 64:
            break
    return depth


def _reduce_size(op) -> int:
    n = 1
    for r in op.reduce_axis:
        n *= const_int(r.dom.extent)
    return n


def default_schedule(outs, cfg=None):
    """Inline injective stages; parallel + vectorize every stage that remains."""
    del cfg
    outs = _as_list(outs)
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)
    for stage in s.stages:
        if "phase_split" in getattr(stage.op, "tag", ""):
            continue  # a layout pass the target schedule (x86.schedule_pool) lays out itself
        if isinstance(stage.op, ComputeOp) and stage.attach.value == "root":
            for t in stage.op.outputs[:1]:
                schedule_stage(s, t)
    return s


schedule_injective = default_schedule
schedule_reduce = default_schedule
schedule_extern = default_schedule
schedule_pool = default_schedule
schedule_adaptive_pool = default_schedule
schedule_softmax = default_schedule
schedule_layer_norm = default_schedule
schedule_conv2d_nchw = default_schedule
schedule_conv2d_nhwc = default_schedule
schedule_conv2d_transpose_nchw = default_schedule
schedule_depthwise_conv2d_nchw = default_schedule
schedule_depthwise_conv2d_nhwc = default_schedule
schedule_dense = default_schedule
schedule_batch_matmul = default_schedule
