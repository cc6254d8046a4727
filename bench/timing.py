"""Timing for the benchmarks that compare kiln with a reference runtime in one run.

kiln's kernel thread pool and the references' (OpenBLAS under numpy, onnxruntime) keep their
worker threads spinning for a while after a call. A side timed right after the other shares
the cores with those spinners: on the 2-core machine here, kiln's tuned 1024³ matmul measured
281 GFLOPS straight after numpy and 442 after a pause. So every timed stretch starts with a
pause and an untimed call, and the sides take turns round by round, so that a change in machine
load hits them alike.
"""

import platform
import time

PAUSE_S = 0.1


def seconds_per_call(fn, number: int, pause: float = PAUSE_S, clock=time.perf_counter) -> float:
    """Mean seconds of ``number`` calls of fn by ``clock``, after a pause and one untimed call."""
    time.sleep(pause)
    fn()
    start = clock()
    for _ in range(number):
        fn()
    return (clock() - start) / number


def calls_for(fn, seconds: float = 0.05) -> int:
    """How many calls of fn fill about ``seconds`` (at least one)."""
    return max(1, int(seconds / max(seconds_per_call(fn, 3, pause=0), 1e-6)))


def interleaved(sides: dict, rounds: int, number: int) -> dict:
    """{name: [seconds per call, one per round]}: the sides take turns in every round."""
    times = {name: [] for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            times[name].append(seconds_per_call(fn, number))
    return times


def cpu_interleaved(sides: dict, rounds: int, number: int) -> dict:
    """``interleaved`` by CPU time (time.process_time): robust to other jobs on a shared machine,
    but only for one-thread runs (idle workers spin and their CPU time would count) and no
    latency figure (memory stalls count, waiting for the core does not)."""
    times = {name: [] for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            times[name].append(seconds_per_call(fn, number, pause=0, clock=time.process_time))
    return times


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's word for it: printed beside LLVM's
    name, which on virtual machines may be a guess (a Sapphire Rapids VM reads "rocketlake")."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "unknown CPU"
