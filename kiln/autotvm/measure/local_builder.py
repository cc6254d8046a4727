"""LocalBuilder: compile candidates in parallel processes on this machine.

Each candidate is instantiated from its config, built for the task's target and exported as a
shared object linked here (``build_func="default"``: the device needs no compiler), with the
Android NDK (``"ndk"``), or with any ``fcompile(output, objects, ...)`` cross-linking function.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from kiln.errors import TuningError

from .measure import Builder, BuildResult, MeasureErrorNo
from .pool import ForkPool


def _resolve_build_func(build_func):
    """-> (file suffix, fcompile or None)."""
    if build_func == "default":
        return "so", None
    if build_func == "ndk":
        try:
            from kiln.contrib import ndk
        except ImportError:
            raise TuningError("build_func='ndk' needs kiln.contrib.ndk, which this kiln does not "
                              "have; pass a cross-linking function instead, e.g. "
                              "kiln.contrib.cc.cross_compiler('aarch64-linux-android28-clang')") from None
        return "so", ndk.create_shared
    if build_func == "tar":
        return "tar", None
    if callable(build_func):
        return getattr(build_func, "output_format", "so"), build_func
    raise TuningError(f"build_func must be 'default', 'ndk', 'tar' or a function "
                      f"fcompile(output, objects, options=None), got {build_func!r}")


def build_candidate(state, config):
    """Runs in a build process: instantiate, build, export. Returns a BuildResult."""
    task, out_dir, suffix, fcompile = state
    import kiln as tvm

    start = time.perf_counter()
    try:
        sch, args = task.instantiate(config)
    except Exception as e:  # noqa: BLE001 - a template may reject any config its own way
        return BuildResult(None, [], (MeasureErrorNo.INSTANTIATION_ERROR, f"{type(e).__name__}: {e}"),
                           time.perf_counter() - start)
    arg_info = [(tuple(int(d.value if hasattr(d, "value") else d) for d in t.shape), str(t.dtype),
                 not type(t.op).__name__ == "PlaceholderOp") for t in args]
    try:
        func = tvm.build(sch, args, target=task.target, target_host=task.target_host,
                         name="default_function")
    except Exception as e:  # noqa: BLE001
        return BuildResult(None, arg_info, (MeasureErrorNo.COMPILE_HOST, f"{type(e).__name__}: {e}"),
                           time.perf_counter() - start)
    filename = os.path.join(out_dir, f"cand_{config.index}_{os.getpid()}_{time.monotonic_ns()}.{suffix}")
    try:
        func.export_library(filename, fcompile) if fcompile else func.export_library(filename)
    except Exception as e:  # noqa: BLE001
        return BuildResult(None, arg_info, (MeasureErrorNo.COMPILE_DEVICE, f"{type(e).__name__}: {e}"),
                           time.perf_counter() - start)
    return BuildResult(filename, arg_info, None, time.perf_counter() - start)


class LocalBuilder(Builder):
    """``LocalBuilder(timeout=10, n_parallel=None, build_func="default")``.

    ``n_parallel`` build processes (default: one per core); a build that takes longer than
    ``timeout`` seconds is killed and recorded as BUILD_TIMEOUT, one that crashes its process
    as COMPILE_HOST, and tuning goes on.
    """

    def __init__(self, timeout: float = 10, n_parallel: int | None = None, build_func="default",
                 do_fork: bool = True, build_kwargs: dict | None = None, runtime=None):
        super().__init__(timeout, n_parallel or os.cpu_count() or 1)
        del do_fork, build_kwargs, runtime  # forked builds always; TVM's micro arguments change nothing here
        self.suffix, self.fcompile = _resolve_build_func(build_func)
        # A build_func may bring its own per-candidate build (micro.autotvm_build_func: C sources).
        self._build_one = getattr(build_func, "build_candidate", build_candidate)
        self._pool: ForkPool | None = None
        self._dir: str | None = None

    def set_task(self, task, build_kwargs=None) -> None:
        super().set_task(task, build_kwargs)
        # Fork now, after the template is registered, so build processes know it.
        self.close()
        self._dir = tempfile.mkdtemp(prefix="kiln-autotvm-")
        self._pool = ForkPool(self.n_parallel, (task, self._dir, self.suffix, self.fcompile))

    def build(self, measure_inputs) -> list[BuildResult]:
        if self._pool is None:
            raise TuningError("LocalBuilder.build before set_task: tune through a Tuner, or call "
                              "create_measure_batch(task, measure_option) first")
        jobs = [inp.config for inp in measure_inputs]
        results = []
        for outcome in self._pool.map(self._build_one, jobs, self.timeout):
            if outcome.status == "ok":
                results.append(outcome.value)
            elif outcome.status == "timeout":
                results.append(BuildResult(None, [], (MeasureErrorNo.BUILD_TIMEOUT,
                                                      f"build took more than {self.timeout:g} s"),
                                           outcome.seconds))
            else:
                results.append(BuildResult(None, [], (MeasureErrorNo.COMPILE_HOST,
                                                      f"build process failed: {outcome.value}"),
                                           outcome.seconds))
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
