"""time_evaluator: time a module function on its device, excluding Python per-call overhead.

Arguments are checked and packed once; the timed loop calls the bare C entry point.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import numpy as np

from ..errors import KilnError


@dataclass(frozen=True)
class ProfileResult:
    """Seconds per call: ``results`` has one entry per repeat (the mean of its ``number`` runs)."""

    results: tuple[float, ...]
    number: int = 1

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results) if len(self.results) > 1 else 0.0

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    def __repr__(self) -> str:
        return (f"ProfileResult(mean={_us(self.mean)}, median={_us(self.median)}, "
                f"std={_us(self.std)}, min={_us(self.min)}, max={_us(self.max)}, "
                f"repeat={len(self.results)}, number={self.number})")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3f} us"


def time_evaluator(module, func_name: str, dev, number: int = 10, repeat: int = 1,
                   min_repeat_ms: float = 0, limit_zero_time_iterations: int = 100,
                   cooldown_interval_ms: float = 0, repeats_to_cooldown: int = 1,
                   f_preproc: str = ""):
    """Return ``evaluator(*args) -> ProfileResult``.

    Each repeat runs the function ``number`` times; when ``min_repeat_ms`` is set, ``number``
    grows until one repeat lasts at least that long. One untimed call warms up first.
    """
    if number < 1 or repeat < 1:
        raise ValueError(f"time_evaluator: number={number} and repeat={repeat} must be >= 1")
    if getattr(dev, "session", None) is not None:
        raise KilnError(f"time_evaluator: {dev} is a remote device; call time_evaluator on the "
                        "module loaded through that RPC session")
    if f_preproc not in ("", "cache_flush_cpu_non_first_arg"):
        raise ValueError(f"time_evaluator: unknown f_preproc {f_preproc!r}; supported: "
                         "'' and 'cache_flush_cpu_non_first_arg'")
    func = module.get_function(func_name)
    flush = _evict_caches if f_preproc else None

    def evaluator(*args) -> ProfileResult:
        run = _timed_loop(func, args)
        if getattr(dev, "device_type", 1) != 1:
            run = _on_device(run, dev, _device_modules(module))
        run(1)  # warm-up: page faults, lazy binding, caches
        n, results, zero_runs = number, [], 0
        for i in range(repeat):
            if cooldown_interval_ms and i > 0 and i % repeats_to_cooldown == 0:
                time.sleep(cooldown_interval_ms / 1e3)
            while True:
                if flush:
                    flush()
                elapsed = run(n)
                if elapsed * 1e3 >= min_repeat_ms:
                    break
                if elapsed == 0:
                    zero_runs += 1
                    if zero_runs >= limit_zero_time_iterations:
                        break
                # Aim past the minimum so the next try usually suffices.
                grow = 2.0 if elapsed == 0 else min_repeat_ms / (elapsed * 1e3) * 1.2
                n = max(n * 2, math.ceil(n * grow)) if grow > 1 else n * 2
            results.append(elapsed / n)
        return ProfileResult(tuple(results), n)

    return evaluator


def _timed_loop(func, args):
    """``run(n) -> seconds`` for n calls: the raw ctypes call for kernels, else a Python call."""
    prepare = getattr(func, "prepare", None)
    if prepare is None:
        def run_python(n: int) -> float:
            start = time.perf_counter()
            for _ in range(n):
                func(*args)
            return time.perf_counter() - start
        return run_python

    cfunc, args_ptr, codes_ptr, nargs, keep = prepare(*args)

    def run(n: int) -> float:
        _ = keep  # the packed argument buffer must outlive the loop
        start = time.perf_counter()
        for _ in range(n):
            rc = cfunc(args_ptr, codes_ptr, nargs)
            if rc:
                func._raise(rc)
        return time.perf_counter() - start
    return run


def _device_modules(module) -> list:
    """The modules whose kernel launches can be timed with events (OpenCL modules)."""
    return [m for m in getattr(module, "imported_modules", ()) if hasattr(m, "events")]


def _on_device(run, dev, device_modules):
    """Time ``run(n)`` on the device: from the start of its first kernel to the end of its last
    (profiling events), so host-side launch overhead is not counted. Falls back to wall-clock
    time between two queue syncs when no kernel was launched."""
    if getattr(dev, "device_type", 0) == 2 and getattr(dev, "session", None) is None:
        from .devices.cuda import API  # CUDA: events recorded around the calls on the device

        def run_on_cuda(n: int) -> float:
            API.sync(dev.device_id)
            return API.elapsed(lambda: run(n), dev.device_id)
        return run_on_cuda

    def run_on_device(n: int) -> float:
        dev.sync()
        for m in device_modules:
            m.events = []
        try:
            start = time.perf_counter()
            run(n)
            dev.sync()
            wall = time.perf_counter() - start
            events = [e for m in device_modules for e in m.events]
        finally:
            for m in device_modules:
                m.events = None
        if not events:
            return wall
        first = min(e.profile.start for e in events)
        last = max(e.profile.end for e in events)
        return (last - first) * 1e-9
    return run_on_device


_EVICT_BYTES = 64 << 20  # larger than the last-level cache of the machines kiln targets
_evict_buffer: np.ndarray | None = None


def _evict_caches() -> None:
    """Overwrite a buffer larger than the caches, so the timed run starts cold."""
    global _evict_buffer
    if _evict_buffer is None:
        _evict_buffer = np.zeros(_EVICT_BYTES, dtype=np.uint8)
    _evict_buffer += 1
