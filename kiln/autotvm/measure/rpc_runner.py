"""RPCRunner: time candidates on every device registered with a tracker under one key, at once.

One thread per device slot takes candidates from a shared queue. For each candidate it asks
the tracker for a session (``session_timeout`` = the runner's timeout, so a hanging kernel ends
its session on the server), uploads the candidate and the fill kernels for its argument shapes,
makes the inputs on the device, times, and for ``check_correctness`` fetches the outputs.

Fill kernels follow each candidate's own arguments, as LocalRunner's inputs do: a layout knob
(conv2d's ``oc_bn``) changes the argument shapes from one candidate to the next, so they are
built per distinct (shape, dtype) signature, before the slots start, and kept for the task. A session lost without the
server's word (server killed, board rebooted) puts the candidate back in the queue and the
thread waits for a server of the key to come (back); a session the server ended because the
kernel crashed or ran too long is recorded as that candidate's error.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import tempfile
import threading
import time

from kiln.errors import RPCError, TuningError

from .measure import MeasureErrorNo, MeasureResult, Runner, error_result
from .reference import Reference

logger = logging.getLogger("autotvm")


def request_remote(device_key: str, host: str = None, port: int = None, priority: int = 1,
                   timeout: float = 60):
    """A session on a device of ``device_key`` from the tracker at host:port (as in 004)."""
    from kiln import rpc
    host = host or "127.0.0.1"
    port = int(port or 9190)
    return rpc.connect_tracker(host, port).request(device_key, priority=priority,
                                                   session_timeout=timeout)


def check_remote(target, device_key: str, host: str = None, port: int = None, priority: int = 100,
                 timeout: float = 10) -> bool:
    """True when a device of ``device_key`` answers within ``timeout`` seconds."""
    result: list = []

    def probe():
        remote = request_remote(device_key, host, port, priority)
        result.append(remote.device(str(target), 0).exist)
    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    return bool(result and result[0])


class _DeviceLost(Exception):
    """The server went away mid-session (not the candidate's fault): measure it elsewhere."""


def _classify(error: RPCError) -> int | None:
    """The candidate's error kind when the server ended the session, None when the server
    itself disappeared. The server's error code says which (docs/rpc-protocol.md)."""
    from kiln.rpc import protocol as P
    return {P.E_TIMEOUT: MeasureErrorNo.RUN_TIMEOUT, P.E_SHUTDOWN: None, 0: None}.get(
        getattr(error, "code", 0), MeasureErrorNo.RUNTIME_DEVICE)


class RPCRunner(Runner):
    """``RPCRunner(key, host, port, priority=1, timeout=10, n_parallel=None, number=4, repeat=3,
    min_repeat_ms=0, cooldown_interval=0.1, check_correctness=False, device_wait_timeout=None)``.

    ``n_parallel`` (default: the number of servers the tracker has for ``key``) candidates are
    timed at once. ``device_wait_timeout`` bounds how long to wait for a server of the key when
    none is left (None: wait until one registers).
    """

    def __init__(self, key: str, host: str, port: int, priority: int = 1, timeout: float = 10,
                 n_parallel: int | None = None, number: int = 4, repeat: int = 3,
                 min_repeat_ms: float = 0, cooldown_interval: float = 0.1,
                 enable_cpu_cache_flush: bool = False, check_correctness: bool = False,
                 device_wait_timeout: float | None = None, module_loader=None):
        super().__init__(timeout, n_parallel)
        if enable_cpu_cache_flush:
            raise TuningError("RPCRunner: enable_cpu_cache_flush needs the device to flush its "
                              "caches between runs, which the kiln RPC protocol does not offer "
                              "yet; use LocalRunner for cold-cache timings or leave it off")
        del module_loader  # modules are always uploaded as files and loaded by name
        self.key, self.host, self.port, self.priority = key, host, int(port), priority
        self.number, self.repeat, self.min_repeat_ms = int(number), int(repeat), float(min_repeat_ms)
        self.cooldown_interval = float(cooldown_interval)
        self.check_correctness = check_correctness
        self.device_wait_timeout = device_wait_timeout
        self._fixed_parallel = n_parallel
        self._dir: str | None = None
        self._fills: dict[tuple, str] = {}  # argument signature -> exported fill module
        self._fill_suffix, self._fcompile = "so", None
        self._reference: Reference | None = None
        self._ref_lock = threading.Lock()
        self._inputs: dict = {}  # argument index -> fixed values (Task.input_values)

    # -- setup ---------------------------------------------------------------------------------
    def _servers(self) -> int:
        from kiln import rpc
        tracker = rpc.connect_tracker(self.host, self.port)
        try:
            info = tracker.summary()["queue_info"].get(self.key, {})
        finally:
            tracker.close()
        return int(info.get("total", 0))

    def set_task(self, task, builder=None) -> None:
        super().set_task(task, builder)
        self.close()
        count = self._fixed_parallel or self._servers()
        if not count:
            logger.warning("RPCRunner: the tracker at %s:%d has no server with key %r yet; "
                           "measurements wait for one", self.host, self.port, self.key)
        self.n_parallel = max(1, count)
        self._dir = tempfile.mkdtemp(prefix="kiln-autotvm-rpc-")
        self._fill_suffix = getattr(builder, "suffix", "so")
        self._fcompile = getattr(builder, "fcompile", None)
        self._reference = Reference(task, builder) if self.check_correctness else None
        self._inputs = task.input_values() if hasattr(task, "input_values") else {}

    def _fill_for(self, arg_info) -> str:
        """The exported fill module for arguments ``arg_info``, built on first use. Called from
        run() only, never from the slot threads: building compiles, which is not thread-safe."""
        from .fill import build_fill_module

        signature = _signature(arg_info)
        path = self._fills.get(signature)
        if path is None:
            # The fill kernels run on the device's CPU (GPU arrays are filled there and copied).
            target = self.task.target
            host = target if target.kind.name in ("llvm", "c") else (target.host or "llvm")
            fill = build_fill_module(arg_info, host)
            path = os.path.join(self._dir, f"kiln_fill_{len(self._fills)}.{self._fill_suffix}")
            fill.export_library(path, self._fcompile) if self._fcompile else fill.export_library(path)
            self._fills[signature] = path
        return path

    # -- running -------------------------------------------------------------------------------
    def run(self, measure_inputs, build_results) -> list[MeasureResult]:
        if self._dir is None:
            raise TuningError("RPCRunner.run before set_task: tune through a Tuner")
        results: list[MeasureResult | None] = [None] * len(build_results)
        refs: list[Reference | None] = [None] * len(build_results)
        work: queue.Queue = queue.Queue()
        for i, br in enumerate(build_results):
            if br.error is not None:
                results[i] = error_result(br.error[0], br.error[1], br.time_cost)
                continue
            try:
                # Compile here, in this thread: fills for this candidate's shapes and, for
                # check_correctness, the untuned kernel in its layout (and that one's fills).
                self._fill_for(br.arg_info)
                if self._reference is not None:
                    refs[i] = self._reference.for_config(measure_inputs[i].config)
                    self._fill_for(refs[i].arg_info)
            except Exception as e:  # noqa: BLE001 - one candidate's failure must not stop the rest
                results[i] = error_result(MeasureErrorNo.UNKNOWN_ERROR, f"{type(e).__name__}: {e}",
                                          br.time_cost)
                continue
            work.put(i)
        threads = [threading.Thread(target=self._slot, args=(work, refs, build_results, results),
                                    daemon=True) for _ in range(min(self.n_parallel, work.qsize()))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results  # type: ignore[return-value]

    def _slot(self, work: queue.Queue, refs, build_results, results) -> None:
        while True:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            br = build_results[i]
            start = time.monotonic()
            try:
                results[i] = self._measure(br, refs[i], start)
            except _DeviceLost as e:
                logger.warning("RPCRunner: lost the device during a measurement (%s); measuring "
                               "that candidate again on the next server of key %r", e, self.key)
                work.put(i)
            except Exception as e:  # noqa: BLE001 - one candidate's failure must not stop the rest
                results[i] = error_result(MeasureErrorNo.UNKNOWN_ERROR, f"{type(e).__name__}: {e}",
                                          br.time_cost + time.monotonic() - start)

    def _request(self):
        """A session on a device of the key, waiting for one to (re)register if needed."""
        from kiln import rpc
        deadline = None if self.device_wait_timeout is None else time.monotonic() + self.device_wait_timeout
        warned = False
        while True:
            try:
                tracker = rpc.connect_tracker(self.host, self.port)
                try:
                    return tracker.request(self.key, self.priority, session_timeout=self.timeout)
                finally:
                    tracker.close()
            except RPCError as e:
                if deadline is not None and time.monotonic() > deadline:
                    raise TuningError(f"RPCRunner: no server with key {self.key!r} for "
                                      f"{self.device_wait_timeout:g} s ({e}); start one with "
                                      "python -m kiln.exec.rpc_server --tracker HOST:PORT "
                                      f"--key {self.key}") from None
                if not warned:
                    logger.warning("RPCRunner: waiting for a server with key %r at tracker %s:%d "
                                   "(%s)", self.key, self.host, self.port, e)
                    warned = True
                time.sleep(0.5)

    def _measure(self, br, ref: Reference | None, start: float) -> MeasureResult:
        remote = self._request()
        try:
            costs, outputs = self._time_on(remote, br.filename, br.arg_info,
                                           want_outputs=self._reference is not None)
        except RPCError as e:
            kind = _classify(e)
            if kind is None:
                raise _DeviceLost(str(e)) from None
            return error_result(kind, str(e)[-2000:], br.time_cost + time.monotonic() - start)
        finally:
            _close_quietly(remote)
        total = br.time_cost + time.monotonic() - start
        if ref is not None:
            problem = Reference.compare(self._expected(ref), outputs)
            if problem:
                return error_result(MeasureErrorNo.WRONG_ANSWER, problem, total)
        if self.cooldown_interval:
            time.sleep(self.cooldown_interval)
        return MeasureResult(tuple(costs), MeasureErrorNo.NO_ERROR, total, time.time())

    def _time_on(self, remote, filename: str, arg_info, want_outputs: bool):
        name = os.path.basename(filename)
        fill_file = self._fills[_signature(arg_info)]
        fill_name = os.path.basename(fill_file)
        remote.upload(filename, name)
        remote.upload(fill_file, fill_name)
        mod = remote.load_module(name)
        fill = remote.load_module(fill_name)
        dev = remote.device(str(self.task.target), 0)
        cpu = remote.cpu(0)
        arrays = []
        for i, (shape, dtype, _) in enumerate(arg_info):
            arr = remote.nd_empty(shape, dtype, cpu)
            if i in self._inputs:  # a fixed input (Task.input_values): sent as is
                arr.copyfrom(self._inputs[i])
            else:
                fill[f"fill_{i}"](arr)
            if dev.device_type != cpu.device_type:
                on_dev = remote.nd_empty(shape, dtype, dev)
                on_dev.copyfrom(arr)
                arr = on_dev
            arrays.append(arr)
        timer = mod.time_evaluator(mod.entry_name, dev, number=self.number, repeat=self.repeat,
                                   min_repeat_ms=self.min_repeat_ms)
        costs = timer(*arrays).results
        outputs = None
        if want_outputs:
            outputs = [a.numpy() for a, (_, _, is_out) in zip(arrays, arg_info) if is_out]
        return costs, outputs

    def _expected(self, ref):
        with self._ref_lock:
            if ref.outputs is None:
                remote = self._request()
                try:
                    _, ref.outputs = self._time_on(remote, ref.filename, ref.arg_info, True)
                finally:
                    _close_quietly(remote)
        return ref.outputs

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._fills = {}
        if self._reference is not None:
            self._reference.close()
            self._reference = None


def _signature(arg_info) -> tuple:
    """What a fill module depends on: each argument's shape and dtype, in order."""
    return tuple((tuple(int(d) for d in shape), str(dtype)) for shape, dtype, _ in arg_info)


def _close_quietly(remote) -> None:
    try:
        remote.close()
    except Exception:  # noqa: BLE001 - the session may already be gone
        pass
