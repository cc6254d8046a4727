"""GPU_PIPELINE: one pass list that both GPU builds run, gated by capabilities, under PassContext.

Printing the kernels needs no device (OpenCL C is text; CUDA is printed without NVRTC here:
only the pass list and the printed source are checked).
"""

from __future__ import annotations

import contextlib
import io

import pytest

import kiln as tvm
from kiln import config, te
from kiln.errors import CompileError
from kiln.script.roundtrip import RoundTrip, counts
from kiln.tir.transform import GPU_PIPELINE, PIPELINE
from kiln.transform import PassContext


def _rowsum(threads: int = 64):
    """A row reduction across threadIdx.x: a shared-memory tree (ends in warp shuffles on CUDA)."""
    n, m = 8, 256
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=threads)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    return s, [A, B]


class Recorder:
    """A pass instrument that writes down the passes it sees run."""

    def __init__(self):
        self.names = []

    def run_before_pass(self, mod, info):
        self.names.append(info.name)


def _kernel_source(target: str, **ctx) -> tuple[str, list]:
    rec = Recorder()
    with PassContext(instruments=[rec], **ctx):
        f = tvm.build(*_rowsum(), target=target, name="rowsum")
    fmt = "cu" if target.startswith("cuda") else "cl"
    return f.get_source(fmt), rec.names


def _gpu_steps(names: list) -> list:
    start = names.index("tir.GPUPipeline")
    return names[start + 1:]


@pytest.mark.parametrize("target, ran, skipped", [
    ("cuda", ["tir.InjectDoubleBuffer", "tir.WarpReduction"], ["tir.HalfStorage"]),
    ("opencl", ["tir.HalfStorage"], ["tir.InjectDoubleBuffer", "tir.WarpReduction"]),
])
def test_both_gpu_builds_run_the_one_pipeline(target, ran, skipped):
    _, names = _kernel_source(target)
    steps = _gpu_steps(names)
    assert names.index("tir.Pipeline") < names.index("tir.GPUPipeline")
    shared = [n for n in GPU_PIPELINE.names if n not in ran + skipped]
    assert [n for n in steps if n in shared] == shared  # every common step, in the list's order
    assert all(n in steps for n in ran) and not any(n in steps for n in skipped)
    assert steps == [n for n in GPU_PIPELINE.names if n in steps]


def test_steps_are_gated_by_capability_not_kind():
    """A CUDA target whose warps are one thread wide gets no warp shuffles: the gate is the
    device's warp size, not the word 'cuda'."""
    src, names = _kernel_source("cuda")
    assert "__shfl_down_sync(" in src and "tir.WarpReduction" in names
    src, names = _kernel_source("cuda -thread_warp_size=1")
    assert "__shfl_down_sync(" not in src and "tir.WarpReduction" not in names
    assert "__syncthreads()" in src  # the shared-memory tree does the whole reduction


def test_disabled_pass_is_skipped_and_an_essential_one_refused():
    src, names = _kernel_source("cuda", disabled_pass=["tir.WarpReduction"])
    assert "__shfl_down_sync(" not in src and "tir.WarpReduction" not in names
    with pytest.raises(CompileError, match="disables tir.SplitHostDevice, which tir.GPUPipeline cannot do without"):
        _kernel_source("opencl", disabled_pass=["tir.SplitHostDevice"])
    _, names = _kernel_source("opencl", disabled_pass=["tir.Simplify"])
    assert "tir.Simplify" not in names and "tir.VectorizeLoop" in names  # the host pipeline too


def test_debug_2_prints_each_gpu_pass():
    out = io.StringIO()
    with config.override(debug=2), contextlib.redirect_stdout(out):
        _kernel_source("opencl")
    text = out.getvalue()
    for name in PIPELINE.names + [n for n in GPU_PIPELINE.names if n not in ("tir.InjectDoubleBuffer",
                                                                             "tir.WarpReduction")]:
        assert f"# kiln: after pass {name}\n" in text, name
    after_split = text.split("# kiln: after pass tir.SplitHostDevice\n", 1)[1].split("# kiln: after pass", 1)[0]
    assert "rowsum_kernel0" in after_split  # the module printed holds the host function and its kernel


def test_round_trip_instrument_sees_hosts_and_kernels():
    before = dict(counts)
    with PassContext(instruments=[RoundTrip()]):
        tvm.build(*_rowsum(), target="opencl", name="rowsum")
    grown = {k: counts[k] - before.get(k, 0) for k in counts}
    assert grown.get("before pipeline", 0) >= 1 and grown.get("lowered", 0) >= 1
    assert grown.get("gpu host", 0) == 1 and grown.get("gpu kernel", 0) == 1


def test_nested_context_keeps_the_outer_instruments():
    rec = Recorder()
    with PassContext(instruments=[rec]):
        with PassContext(opt_level=3):
            tvm.lower(*_rowsum(), name="rowsum")
    assert "tir.StorageFlatten" in rec.names
