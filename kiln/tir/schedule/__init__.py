"""``tvm.tir.Schedule``: the block schedule of TVMScript modules (docs/tir-schedule.md).

One module per primitive family: loops.py (split, fuse, reorder, loop kinds), cache.py
(cache_read/cache_write), compute_at.py, reduction.py (decompose_reduction), tensorize.py;
trace.py records the calls; tree.py and access.py are the shared lookups and region analysis.
"""

from kiln.errors import ScheduleError

from .schedule import Schedule
from .tensorize import TensorIntrin
from .trace import BlockRV, Instruction, LoopRV, Trace

__all__ = ["Schedule", "ScheduleError", "TensorIntrin", "BlockRV", "LoopRV", "Trace", "Instruction"]
