"""``tvm.tir.Schedule``: the block schedule of TVMScript modules (docs/tir-schedule.md)."""
