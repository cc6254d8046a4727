"""AutoTVM on the board: candidates built as C and timed in board time through a CRT session.

    option = autotvm.measure_option(builder=micro.autotvm.MicroBuilder(),
                                    runner=micro.autotvm.MicroRunner("qemu-mps2-an385", number=3))

``MicroBuilder`` builds each candidate for the task's C target and keeps its source;
``MicroRunner`` links it with the CRT into firmware for the template's board, opens a session,
uploads the same deterministic inputs for every candidate (autotvm's fill.py) and times the
kernel with the board's clock (qemu -icount: instructions, not host time). One board at a time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from kiln.autotvm.measure.fill import fill_values
from kiln.autotvm.measure.local_builder import LocalBuilder
from kiln.autotvm.measure.measure import BuildResult, MeasureErrorNo, MeasureResult, Runner, error_result
from kiln.errors import KilnError, TuningError

from .project import generate_crt_project, get_microtvm_template_projects
from .session import Session


def build_c_candidate(state, config):
    """In a build process: instantiate, build for the C target, save the source."""
    task, out_dir = state[0], state[1]
    import kiln as tvm

    start = time.perf_counter()
    try:
        sch, args = task.instantiate(config)
    except Exception as e:  # noqa: BLE001 - a template may reject any config its own way
        return BuildResult(None, [], (MeasureErrorNo.INSTANTIATION_ERROR, f"{type(e).__name__}: {e}"),
                           time.perf_counter() - start)
    arg_info = [(tuple(int(d.value if hasattr(d, "value") else d) for d in t.shape), str(t.dtype),
                 type(t.op).__name__ != "PlaceholderOp") for t in args]
    try:
        func = tvm.build(sch, args, target=task.target, name="default_function")
        filename = os.path.join(out_dir, f"cand_{config.index}_{os.getpid()}_{time.monotonic_ns()}.c")
        func.save(filename, "c")
    except Exception as e:  # noqa: BLE001
        return BuildResult(None, arg_info, (MeasureErrorNo.COMPILE_HOST, f"{type(e).__name__}: {e}"),
                           time.perf_counter() - start)
    return BuildResult(filename, arg_info, None, time.perf_counter() - start)


class MicroBuilder(LocalBuilder):
    """A LocalBuilder whose candidates are C sources (the task's target must be 'c ...')."""

    def set_task(self, task, build_kwargs=None) -> None:
        if task.target is None or task.target.kind.name != "c":
            raise TuningError(f"MicroBuilder: task {task.name} targets {task.target}; create it for "
                              "'c -mcpu=cortex-m3' (or another C target)")
        super().set_task(task, build_kwargs)

    def build(self, measure_inputs) -> list[BuildResult]:
        if self._pool is None:
            raise TuningError("MicroBuilder.build before set_task: tune through a Tuner")
        results = []
        for outcome in self._pool.map(build_c_candidate, [inp.config for inp in measure_inputs], self.timeout):
            if outcome.status == "ok":
                results.append(outcome.value)
            else:
                results.append(BuildResult(None, [], (MeasureErrorNo.BUILD_TIMEOUT if outcome.status == "timeout"
                                                      else MeasureErrorNo.COMPILE_HOST, str(outcome.value)),
                                           outcome.seconds))
        return results


def time_on_board(source: str, arg_info: list, template: str = "qemu-mps2-an385", number: int = 3,
                  repeat: int = 1, timeout: float = 20.0, work: str | None = None) -> tuple:
    """Seconds of board time per run of ``default_function`` in ``source``, one per repeat."""
    own = work is None
    work = work or tempfile.mkdtemp(prefix="kiln-micro-tune-")
    try:
        project = generate_crt_project(get_microtvm_template_projects(template), source, ["default_function"],
                                       os.path.join(work, "proj"))
        project.build()
        with Session(transport_context_manager=project.transport(), timeout=timeout) as sess:
            arrays = [sess.array(fill_values(shape, dtype, seed=i)) for i, (shape, dtype, _) in enumerate(arg_info)]
            timer = sess.get_system_lib().time_evaluator("default_function", sess.device, number=number, repeat=repeat)
            return tuple(timer(*arrays).results)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


class MicroRunner(Runner):
    """``MicroRunner(template="qemu-mps2-an385", number=3, repeat=1, timeout=20)``."""

    def __init__(self, template: str = "qemu-mps2-an385", number: int = 3, repeat: int = 1, timeout: float = 20):
        super().__init__(timeout, n_parallel=1)
        self.template, self.number, self.repeat = template, number, repeat

    def run(self, measure_inputs, build_results) -> list[MeasureResult]:
        results = []
        for br in build_results:
            if br.error is not None:
                results.append(error_result(br.error[0], br.error[1], br.time_cost))
                continue
            start = time.perf_counter()
            try:
                with open(br.filename) as f:
                    costs = time_on_board(f.read(), br.arg_info, self.template, self.number, self.repeat, self.timeout)
            except KilnError as e:
                results.append(error_result(MeasureErrorNo.RUNTIME_DEVICE, str(e)[-2000:],
                                            br.time_cost + time.perf_counter() - start))
                continue
            results.append(MeasureResult(costs, MeasureErrorNo.NO_ERROR, br.time_cost + time.perf_counter() - start,
                                         time.time()))
        return results
