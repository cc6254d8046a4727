"""Tile sizes for GPU schedules: autotvm split knobs as plain lists, and untuned defaults.

A split knob is a list of loop sizes from outermost to innermost, as autotvm's
``cfg["tile_f"].size``; its first entry may be -1 ("what remains"). ``resolve`` turns it into
exact sizes for an axis of a given extent.
"""

from __future__ import annotations

from kiln.errors import ScheduleError

from ..utils import knob


def resolve(sizes, total: int, name: str) -> list[int]:
    sizes = [int(v) for v in sizes]
    rest = 1
    for v in sizes[1:]:
        rest *= v
    if sizes[0] == -1:
        sizes[0] = -(-total // rest)
    prod = sizes[0] * rest
    if prod < total:
        raise ScheduleError(f"{name}: tile {sizes} covers {prod} of the axis's {total} iterations")
    return sizes


def split_knob(cfg, name: str, total: int, default: list[int]) -> list[int]:
    return resolve(knob(cfg, name, default), total, name)


def divisor(n: int, limit: int) -> int:
    """The largest divisor of n not above limit."""
    for d in range(max(1, min(n, limit)), 0, -1):
        if n % d == 0:
            return d
    return 1


def split_levels(st, axis, sizes: list[int]):
    """Split axis into len(sizes) loops of the given sizes (outermost first)."""
    loops = []
    for v in reversed(sizes[1:]):
        axis, inner = st.split(axis, factor=v)
        loops.append(inner)
    return [axis] + loops[::-1]


def cooperative_fetch(s, cache, threads: list) -> None:
    """Load a shared-memory tile with every work-item of the group: the tile's loops fused and
    spread over ``threads`` = [(thread_axis_tag, count), ...] (innermost last), so neighbouring
    work-items read neighbouring addresses. ``vec`` > 1 loads that many contiguous elements per
    work-item (float4 loads when the tile row allows it). Returns the serial loop over each
    work-item's elements."""
    from kiln import te

    st = s[cache]
    axes = list(st.op.axis)
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    for tag, count in reversed(threads):
        if count > 1:
            fused, inner = st.split(fused, factor=count)
            st.bind(inner, te.thread_axis(tag))
    return fused
