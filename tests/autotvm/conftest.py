"""Templates and helpers for the autotvm tests. Templates are registered at import, before any
build process forks, as in a user's script."""

from __future__ import annotations

import os
import sys

import pytest

from kiln import autotvm, te
from kiln.autotvm.measure.measure import Builder, BuildResult, MeasureResult, Runner

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "rpc"))  # rpc_services


@autotvm.template("test/add")
def add_template(n: int, mode: str = "ok"):
    """A vector add with a tile knob and a knob that breaks the kernel in chosen ways."""
    A = te.placeholder((n,), name="A")
    cfg = autotvm.get_config()
    cfg.define_split("tile", n, num_outputs=2)
    cfg.define_knob("fault", ["none", "crash", "hang", "reject"] if mode == "faults" else ["none"])
    fault = cfg["fault"].val
    if fault == "reject":
        raise ValueError("this config is invalid for the template")
    if fault == "crash":
        # Reads 8 GB past the input: unmapped memory, the process dies from SIGSEGV.
        B = te.compute((n,), lambda i: A[i + (1 << 31) - 1] + 1.0, name="B")
    elif fault == "hang":
        k = te.reduce_axis((0, 1 << 30), name="k")
        B = te.compute((n,), lambda i: te.sum(A[(i + k) % n], axis=k), name="B")
    else:
        B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = cfg["tile"].apply(s, B, B.op.axis[0])
    s[B].vectorize(xi) if cfg["tile"].size[-1] > 1 and fault == "none" else None
    return s, [A, B]


@autotvm.template("test/busy")
def busy_template(n: int, micros: int):
    """A kernel that takes a set time by sleeping (usleep from libc) rather than computing, so
    tests of fleet parallelism do not depend on how busy this machine's cores are."""
    from kiln.tir.op import call_extern
    A = te.placeholder((n,), name="A")
    cfg = autotvm.get_config()
    cfg.define_knob("variant", list(range(16)))
    B = te.compute((n,), lambda i: te.if_then_else(
        i == 0, A[i] + te.const(0.0) * call_extern("int32", "usleep", micros).astype("float32"),
        A[i] * (1.0 + cfg["variant"].val)), name="B")
    s = te.create_schedule(B.op)
    return s, [A, B]


@autotvm.template("test/toy")
def toy_template(n: int):
    """Three knobs and no real kernel cost: the synthetic runner below scores configs."""
    A = te.placeholder((n,), name="A")
    cfg = autotvm.get_config()
    cfg.define_knob("a", list(range(6)))
    cfg.define_knob("b", list(range(5)))
    cfg.define_knob("c", list(range(4)))
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    return te.create_schedule(B.op), [A, B]


def toy_cost(config) -> float:
    """A smooth landscape with a single best at a=4, b=1, c=2."""
    a, b, c = (config[k].val for k in "abc")
    return 1e-3 * (1 + (a - 4) ** 2 + 2 * (b - 1) ** 2 + 0.5 * (c - 2) ** 2)


class SyntheticBuilder(Builder):
    """Builds nothing: the toy tests exercise search logic, not compilation."""

    def __init__(self):
        super().__init__(n_parallel=4)

    def build(self, measure_inputs):
        return [BuildResult("none", [], None, 0.0) for _ in measure_inputs]


class SyntheticRunner(Runner):
    """Reports toy_cost as the measured time, and counts how often each config came."""

    def __init__(self):
        super().__init__(n_parallel=4)
        self.seen: list[int] = []

    def run(self, measure_inputs, build_results):
        import time
        out = []
        for inp in measure_inputs:
            self.seen.append(inp.config.index)
            out.append(MeasureResult((toy_cost(inp.config),), 0, 0.0, time.time()))
        return out


@pytest.fixture
def toy_task():
    return autotvm.task.create("test/toy", (16,), "llvm")


@pytest.fixture
def synthetic_option():
    return autotvm.measure_option(builder=SyntheticBuilder(), runner=SyntheticRunner())
