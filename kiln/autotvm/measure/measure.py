"""What a measurement takes and gives, the builder/runner interfaces, and ``measure_option``.

A tuner hands a batch of ``MeasureInput`` to the measure batch made by
``create_measure_batch``: the builder compiles each config (in parallel processes) and the
runner times what compiled, returning one ``MeasureResult`` per input. A failed candidate is a
result with an ``error_no``, never an exception, so tuning goes on.
"""

from __future__ import annotations

import enum
import time
from typing import NamedTuple

from kiln.errors import TuningError


class MeasureInput(NamedTuple):
    """One candidate: where it runs, which task, which config."""

    target: object
    task: object
    config: object


class MeasureResult(NamedTuple):
    """``costs``: seconds per run, one per repeat (or the error's text when ``error_no`` != 0);
    ``all_cost``: seconds the whole build + measurement took; ``timestamp``: when it finished."""

    costs: tuple
    error_no: int
    all_cost: float
    timestamp: float


class MeasureErrorNo(enum.IntEnum):
    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the template raised for this config
    COMPILE_HOST = 2  # lowering or host code generation failed
    COMPILE_DEVICE = 3  # linking/exporting for the device failed
    RUNTIME_DEVICE = 4  # the kernel crashed or raised on the device
    WRONG_ANSWER = 5  # output differs from the untuned kernel's
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


class BuildResult(NamedTuple):
    """``filename``: the exported module (None on error); ``arg_info``: [(shape, dtype, is_output)];
    ``error``: (MeasureErrorNo, message) or None; ``time_cost``: seconds spent building."""

    filename: str | None
    arg_info: list
    error: tuple | None
    time_cost: float


def error_result(error_no: int, message: str, all_cost: float) -> MeasureResult:
    return MeasureResult((message,), int(error_no), float(all_cost), time.time())


class Builder:
    """Compiles candidates. ``n_parallel`` builds run at once, each bounded by ``timeout``."""

    def __init__(self, timeout: float = 10, n_parallel: int | None = None):
        self.timeout = float(timeout)
        self.n_parallel = n_parallel
        self.task = None
        self.build_kwargs: dict = {}

    def set_task(self, task, build_kwargs: dict | None = None) -> None:
        self.task = task
        self.build_kwargs = dict(build_kwargs or {})

    def build(self, measure_inputs) -> list[BuildResult]:
        raise NotImplementedError

    def close(self) -> None:
        """Free build processes and files of the last task."""


class Runner:
    """Times compiled candidates on a device."""

    def __init__(self, timeout: float = 10, n_parallel: int | None = None):
        self.timeout = float(timeout)
        self.n_parallel = n_parallel
        self.task = None

    def set_task(self, task, builder=None) -> None:
        self.task = task

    def get_build_kwargs(self) -> dict:
        return {}

    def run(self, measure_inputs, build_results) -> list[MeasureResult]:
        raise NotImplementedError

    def close(self) -> None:
        """Free sessions and processes held for the last task."""


def measure_option(builder="local", runner="local") -> dict:
    """How to measure: ``autotvm.measure_option(builder=autotvm.LocalBuilder(),
    runner=autotvm.LocalRunner(number=5))``. The strings "local" pick the defaults."""
    from .local_builder import LocalBuilder
    from .local_runner import LocalRunner

    if builder == "local":
        builder = LocalBuilder()
    if runner == "local":
        runner = LocalRunner()
    if not isinstance(builder, Builder):
        raise TuningError(f"measure_option: builder must be 'local' or a Builder (LocalBuilder), "
                          f"got {builder!r}")
    if not isinstance(runner, Runner):
        raise TuningError(f"measure_option: runner must be 'local' or a Runner (LocalRunner, "
                          f"RPCRunner), got {runner!r}")
    return {"builder": builder, "runner": runner}


class MeasureBatch:
    """``batch(inputs) -> results`` for one task; ``n_parallel`` is the batch size that keeps
    every build process and every device busy."""

    def __init__(self, task, option: dict):
        self.builder, self.runner = option["builder"], option["runner"]
        self.runner.set_task(task, self.builder)
        self.builder.set_task(task, self.runner.get_build_kwargs())
        self.n_parallel = max(self.builder.n_parallel or 1, self.runner.n_parallel or 1)

    def __call__(self, measure_inputs) -> list[MeasureResult]:
        build_results = self.builder.build(measure_inputs)
        return self.runner.run(measure_inputs, build_results)

    def close(self) -> None:
        self.builder.close()
        self.runner.close()


def create_measure_batch(task, option: dict) -> MeasureBatch:
    return MeasureBatch(task, option)
