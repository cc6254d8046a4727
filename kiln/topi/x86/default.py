"""x86 schedules for the memory-bound operators: the generic inline/parallel/vectorize schedule
(pooling, softmax, layer norm, reductions, injective ops, resize) with x86 vector widths."""

from __future__ import annotations

from ..generic.default import default_schedule


def schedule_injective(outs, cfg=None):
    """Elementwise, broadcast and data-movement ops: inline, vectorize inner, parallel outer."""
    return default_schedule(outs, cfg)


def schedule_reduce(outs, cfg=None):
    """Reductions: parallel over kept axes; a kept inner axis is vectorized with the reduction outside."""
    return default_schedule(outs, cfg)


def schedule_adaptive_pool(outs, cfg=None):
    return default_schedule(outs, cfg)


schedule_concatenate = schedule_injective
