"""Pooling for x86: the generic compute with a phase-split padded input when the width stride is
above one (contiguous vector loads instead of per-lane gathers), and a schedule that vectorizes
the output width with the window taps outside it."""

from __future__ import annotations

from kiln import te

from ..cpu import vector_lanes
from ..generic.default import default_schedule
from ..nn.pooling import pool2d as _generic_pool2d


def pool2d(data, kernel, stride, dilation=(1, 1), padding=(0, 0, 0, 0), pool_type="max", ceil_mode=False,
           layout="NCHW", count_include_pad=True):
    """Same result as topi.nn.pool2d."""
    return _generic_pool2d(data, kernel, stride, dilation, padding, pool_type, ceil_mode, layout, count_include_pad,
                           split_width_phases=True)


def schedule_pool(outs, layout="NCHW", cfg=None):
    """Default schedule, plus a vectorized, parallel phase-split pass when there is one."""
    del layout, cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = default_schedule(outs)
    lanes = vector_lanes()
    for stage in s.stages:
        op = stage.op
        if "phase_split" in getattr(op, "tag", "") and stage.attach.value == "root":
            for u in op.input_tensors:
                if isinstance(u.op, te.ComputeOp) and "injective" in u.op.tag:
                    s[u].compute_inline()
            b, c, y, ph, xs = op.axis
            stage.reorder(b, c, y, ph, xs)
            stage.parallel(stage.fuse(b, c))
            stage.vectorize(stage.split(xs, factor=lanes)[1])
    return s
