"""Memory-bound operators on GPUs: fused elementwise / broadcast / injective chains (resize,
transpose, pad, concatenate...), pooling, global and adaptive pooling.

Each output element is one work-item; the injective stages before it are inlined, so a fused
chain is one kernel reading its inputs once. Pooling windows (and global pools' H x W sums)
run serially inside the work-item: the windows are small and the outputs many.
"""

from __future__ import annotations

from .common import schedule_per_item


def schedule_injective(outs, cfg=None):
    """``topi.gpu.schedule_injective([out])``: one work-item per output element."""
    return schedule_per_item(outs, cfg)


schedule_elemwise = schedule_injective
schedule_broadcast = schedule_injective
schedule_concatenate = schedule_injective
schedule_pool = schedule_injective
schedule_global_pool = schedule_injective
schedule_adaptive_pool = schedule_injective
schedule_resize = schedule_injective
