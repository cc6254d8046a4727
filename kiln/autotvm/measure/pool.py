"""A small process pool that survives its jobs: a job that hangs past its timeout or kills its
process (segfault, abort, os._exit) is reported as such and the process is replaced.

``concurrent.futures.ProcessPoolExecutor`` cannot do this: a dead worker breaks the whole
executor and a hung one cannot be killed alone. Processes are forked, so templates defined in
the user's ``__main__`` are available in them without being importable.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable, NamedTuple


class Outcome(NamedTuple):
    """status: "ok" (value is the result), "error" (value is the traceback text), "timeout",
    or "crash" (value says how the process died)."""

    status: str
    value: Any
    seconds: float


def _serve(conn, state) -> None:
    # Jobs arrive as (func, arg) and run as func(state, arg); results go back as
    # ("ok"|"error", value).
    import faulthandler
    faulthandler.disable()  # a candidate that segfaults is expected here; the parent reports it
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        func, arg = job
        try:
            conn.send(("ok", func(state, arg)))
        except BaseException as e:  # noqa: BLE001 - report anything the job raised
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"))


class _Worker:
    def __init__(self, ctx, state):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, state), daemon=True)
        self.proc.start()
        child.close()
        self.job: int | None = None
        self.started = 0.0

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


class ForkPool:
    """``pool.map(func, args, timeout)`` -> one Outcome per arg, in order; each job runs
    ``func(state, arg)``. ``state`` reaches the processes by fork, not by pickling, so it may
    hold closures (cross-linking functions) and unregistered templates."""

    def __init__(self, n_workers: int, state=None, start_method: str = "fork"):
        # "spawn" for jobs that use an OpenCL device: a process forked from one whose OpenCL
        # runtime has started (PoCL's threads) hangs at its first OpenCL call.
        self._ctx = multiprocessing.get_context(start_method)
        self._owner = os.getpid()
        self._state = state
        self._workers = [_Worker(self._ctx, state) for _ in range(max(1, n_workers))]

    @property
    def size(self) -> int:
        return len(self._workers)

    def map(self, func: Callable, args: list, timeout: float) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(args)
        pending = list(range(len(args)))[::-1]
        busy: list[_Worker] = []
        while pending or busy:
            for w in self._workers:
                if w.job is None and pending:
                    w.job, w.started = pending.pop(), time.monotonic()
                    w.conn.send((func, args[w.job]))
                    busy.append(w)
            deadline = min(w.started + timeout for w in busy)
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy],
                         timeout=max(0.0, deadline - time.monotonic()))
            now = time.monotonic()
            for w in list(busy):
                if w.conn in ready or w.proc.sentinel in ready:
                    out[w.job] = self._collect(w, now)
                elif now >= w.started + timeout:
                    out[w.job] = Outcome("timeout", f"no result after {timeout:g} s", now - w.started)
                    self._replace(w)
                else:
                    continue
                busy.remove(w)
                w.job = None
        return out  # type: ignore[return-value]

    def _collect(self, w: _Worker, now: float) -> Outcome:
        try:
            if w.conn.poll():
                status, value = w.conn.recv()
                return Outcome(status, value, now - w.started)
        except (EOFError, OSError):
            pass
        w.proc.join(timeout=1)
        code = w.proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        self._replace(w)
        return Outcome("crash", f"the process died ({how})", now - w.started)

    def _replace(self, w: _Worker) -> None:
        i = self._workers.index(w)
        w.stop(kill=True)
        fresh = _Worker(self._ctx, self._state)
        self._workers[i] = fresh
        # The caller still holds ``w``; point it at the fresh process so bookkeeping continues.
        w.conn, w.proc = fresh.conn, fresh.proc
        self._workers[i] = w

    def close(self) -> None:
        for w in self._workers:
            w.stop()
        self._workers = []

    def __del__(self):
        if getattr(self, "_workers", None) and os.getpid() == self._owner:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass
