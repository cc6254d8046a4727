"""LocalRunner: time candidates on this machine (its CPU, or its OpenCL device for an OpenCL
task), in a separate process.

The timing process loads each candidate's shared object, fills its arguments with the same
deterministic pseudo-random data every time (fill.py), and runs ``time_evaluator``. A candidate
that crashes or hangs takes down only that process, which is replaced; the tuner records a
RUNTIME_DEVICE or RUN_TIMEOUT error and goes on.
"""

from __future__ import annotations

import time

from kiln.errors import TuningError

from .measure import MeasureErrorNo, MeasureResult, Runner, error_result
from .pool import ForkPool
from .reference import Reference


def time_candidate(state: dict, job):
    """Runs in the timing process. Returns (costs, outputs or None)."""
    filename, arg_info, opts, want_outputs = job
    import kiln as tvm
    from .fill import fill_values

    # Inputs are made once per argument list and kept: every candidate of a task sees the same.
    dev = tvm.device(opts.get("device_type", 1), 0)  # the task target's device (cl(0) for OpenCL)
    # (the task's fixed inputs, Task.input_values, take their given values: the pool is per task)
    key = (dev.device_type,) + tuple((shape, dtype) for shape, dtype, _ in arg_info)
    if state.get("key") != key:
        state["key"] = key
        fixed = opts.get("inputs", {})
        state["arrays"] = [tvm.nd.array(fixed[i] if i in fixed else fill_values(shape, dtype, seed=i), dev)
                           for i, (shape, dtype, _) in enumerate(arg_info)]
    arrays = state["arrays"]
    mod = tvm.runtime.load_module(filename)
    timer = mod.time_evaluator(mod.entry_name, dev, number=opts["number"],
                               repeat=opts["repeat"], min_repeat_ms=opts["min_repeat_ms"],
                               f_preproc="cache_flush_cpu_non_first_arg" if opts["flush"] else "")
    costs = timer(*arrays).results
    outputs = None
    if want_outputs:
        outputs = [a.numpy() for a, (_, _, is_out) in zip(arrays, arg_info) if is_out]
    if opts["cooldown"]:
        time.sleep(opts["cooldown"])
    return tuple(costs), outputs


class LocalRunner(Runner):
    """``LocalRunner(number=4, repeat=3, min_repeat_ms=0, timeout=10, cooldown_interval=0.1,
    enable_cpu_cache_flush=False, check_correctness=False)``.

    Each repeat runs the kernel ``number`` times (more while a repeat is shorter than
    ``min_repeat_ms``); the recorded costs are the per-run mean of each repeat.
    ``check_correctness`` compares every candidate's outputs with the untuned kernel's.
    """

    def __init__(self, timeout: float = 10, number: int = 4, repeat: int = 3,
                 min_repeat_ms: float = 0, cooldown_interval: float = 0.1,
                 enable_cpu_cache_flush: bool = False, check_correctness: bool = False, module_loader=None):
        super().__init__(timeout, n_parallel=1)
        self.module_loader = module_loader  # micro.AutoTvmModuleLoader: candidates timed on a board  # one CPU: parallel timings would disturb each other
        if number < 1 or repeat < 1:
            raise TuningError(f"LocalRunner: number={number} and repeat={repeat} must be >= 1")
        self.opts = {"number": int(number), "repeat": int(repeat),
                     "min_repeat_ms": float(min_repeat_ms), "cooldown": float(cooldown_interval),
                     "flush": bool(enable_cpu_cache_flush)}
        self.check_correctness = check_correctness
        self._pool: ForkPool | None = None
        self._reference: Reference | None = None

    def set_task(self, task, builder=None) -> None:
        super().set_task(task, builder)
        self.close()
        target = getattr(task, "target", None)
        self.opts["device_type"] = target.get_target_device_type() if target is not None else 1
        self.opts["inputs"] = task.input_values() if hasattr(task, "input_values") else {}
        self._reference = Reference(task, builder) if self.check_correctness else None
        self._pool = ForkPool(1, {}, "fork" if self.opts["device_type"] == 1 else "spawn")

    def _expected(self, ref):
        """The untuned kernel's outputs, timed once in the same process as the candidates."""
        if ref.outputs is None:
            outcome = self._pool.map(time_candidate, [(ref.filename, ref.arg_info, self.opts, True)],
                                     self.timeout)[0]
            if outcome.status != "ok":
                raise TuningError(f"check_correctness: the untuned kernel of {self.task.name} "
                                  f"failed to run ({outcome.status}: {outcome.value})")
            ref.outputs = outcome.value[1]
        return ref.outputs

    def run(self, measure_inputs, build_results) -> list[MeasureResult]:
        if self.module_loader is not None:
            return self.module_loader.measure(measure_inputs, build_results, self.opts["number"],
                                              self.opts["repeat"], self.timeout)
        if self._pool is None:
            raise TuningError("LocalRunner.run before set_task: tune through a Tuner")
        jobs, where, expected = [], [], []
        results: list[MeasureResult | None] = [None] * len(build_results)
        for i, br in enumerate(build_results):
            if br.error is not None:
                results[i] = error_result(br.error[0], br.error[1], br.time_cost)
            else:
                ref = self._reference.for_config(measure_inputs[i].config) if self._reference else None
                expected.append(self._expected(ref) if ref is not None else None)
                jobs.append((br.filename, br.arg_info, self.opts, ref is not None))
                where.append(i)
        outcomes = self._pool.map(time_candidate, jobs, self.timeout)
        for i, outcome, want in zip(where, outcomes, expected):
            build_cost = build_results[i].time_cost
            results[i] = self._result(outcome, build_cost, want)
        return results  # type: ignore[return-value]

    def _result(self, outcome, build_cost: float, expected) -> MeasureResult:
        total = build_cost + outcome.seconds
        if outcome.status == "timeout":
            return error_result(MeasureErrorNo.RUN_TIMEOUT, f"run took more than {self.timeout:g} s",
                                total)
        if outcome.status != "ok":
            return error_result(MeasureErrorNo.RUNTIME_DEVICE, str(outcome.value)[-2000:], total)
        costs, outputs = outcome.value
        if expected is not None:
            problem = Reference.compare(expected, outputs)
            if problem:
                return error_result(MeasureErrorNo.WRONG_ANSWER, problem, total)
        return MeasureResult(tuple(costs), MeasureErrorNo.NO_ERROR, total, time.time())

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._reference is not None:
            self._reference.close()
