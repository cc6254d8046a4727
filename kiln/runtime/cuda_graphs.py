"""CUDA graphs: a whole model's launches replayed as one graph (the graph executor, by default),
and an offloaded subgraph's library calls (json_cudnn.py).

**The graph executor** (kiln/runtime/graph_executor.py) on a CUDA device records its second
run()'s launches into one CUDA graph (``record``) and replays it for every later run(): one
``cuGraphLaunch`` instead of one Python callback and ``cuLaunchKernel`` per kernel (about 25 us
of host time each), so batch-1 latency is the kernels' own time. Recording sets the stream kiln
launches on (this thread's, ``API._current.stream``) to the graph's stream and defers the frees of device workspace to
the graph, which keeps that memory for its replays. Models with launches of something else
(offloaded subgraphs, CPU kernels) are run kernel by kernel; so is every model with
``KILN_CUDA_GRAPHS=0`` or after ``executor.use_cuda_graph(False)``.

**cuDNN subgraphs.**

cuDNN 9 runs its legacy convolution calls through its graph API and spends 60-90 us of host
time in each (measured on an H100, docs/byoc.md), several times the kernels' own time at batch
1. Recorded once with stream capture and replayed with one ``cuGraphLaunch``, the calls cost
their kernels only.

The calls are recorded on a stream of their own, created blocking, so a replay waits for the
work kiln queued before it on the legacy default stream and that stream's later work waits for
the replay: the order is the same as launching the calls there. The tensors' addresses are fixed
when the calls are bound (the graph executor binds once), which is what replaying needs. Set
``KILN_CUDA_GRAPHS=0`` to run the calls one by one.
"""

from __future__ import annotations

import os

from ..errors import KilnError


def enabled() -> bool:
    return os.environ.get("KILN_CUDA_GRAPHS", "1") != "0"


def record(run, device_id: int):
    """``(replay, None)``: a function launching, as one CUDA graph on a blocking stream of its
    own, the kernels ``run()`` launches through kiln's CUDA modules (their arguments as they are
    now); or ``(None, reason)`` when they cannot be recorded (run() then stays the way to run
    them). ``run()`` is called once, while recording: its kernels do not execute then."""
    from .devices.cuda import API, _check, _drv

    drv = _drv()
    API.activate(device_id)
    stream = graph = None
    frees: list = []
    try:
        stream = _check(drv.cuStreamCreate(0), "cuStreamCreate")  # blocking: ordered with the legacy stream
        API._current.stream, API.captured_frees = int(stream), frees
        _check(drv.cuStreamBeginCapture(stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
               "cuStreamBeginCapture")
        failure = None
        try:
            run()
        except Exception as err:  # noqa: BLE001 - the capture must be ended before giving up
            failure = err
        finally:
            API._current.stream, API.captured_frees = 0, None
        graph = _check(drv.cuStreamEndCapture(stream), "cuStreamEndCapture")
        if failure is not None:
            raise failure
        count = _check(drv.cuGraphGetNodes(graph, 0), "cuGraphGetNodes")[1]
        if not int(count):
            raise KilnError("run() launched no CUDA kernels")
        executable = _check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    except Exception as err:  # noqa: BLE001 - the launches still run one by one
        _release(drv, None, graph, stream, frees)
        return None, f"{type(err).__name__}: {err}"

    def replay() -> None:
        status = drv.cuGraphLaunch(executable, stream)[0]
        if int(status):
            raise KilnError(f"cuGraphLaunch failed: {getattr(status, 'name', status)}")

    replay.keep = _Owner(drv, executable, graph, stream, frees)  # freed with the replay function
    replay.nodes = int(count)
    return replay, None


class _Owner:
    """A recorded graph's driver objects and the workspace its replays use; freed together."""

    def __init__(self, drv, executable, graph, stream, frees):
        self.parts = (drv, executable, graph, stream, frees)

    def __del__(self):
        _release(*self.parts)


def _release(drv, executable, graph, stream, frees) -> None:
    try:
        if stream is not None:
            drv.cuStreamSynchronize(stream)  # replays still queued use the workspace
        if executable is not None:
            drv.cuGraphExecDestroy(executable)
        if graph is not None:
            drv.cuGraphDestroy(graph)
        if stream is not None:
            drv.cuStreamDestroy(stream)
        from .devices.cuda import API

        for ptr, device_id in frees:
            API._owners.pop(ptr, None)
            API.activate(device_id)
            drv.cuMemFree(ptr)
    except Exception:  # noqa: BLE001 - interpreter shutdown or a dead context: nothing to do
        pass


def capture(set_stream, calls: list):
    """A function replaying ``calls`` as one CUDA graph, or ``(None, reason)`` when they cannot
    be captured (``set_stream(0)`` is then called back, so they run on the legacy stream).

    ``set_stream(handle)`` points the library at a stream (an int; 0 is the legacy default)."""
    from .devices.cuda import _check, _drv

    drv = _drv()
    try:
        stream = _check(drv.cuStreamCreate(0), "cuStreamCreate")  # flags 0: blocking, see above
        set_stream(int(stream))
        # once outside the capture: the library loads its kernels and sizes its buffers here
        for call in calls:
            call()
        _check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
        _check(drv.cuStreamBeginCapture(stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
               "cuStreamBeginCapture")
        failure = None
        try:
            for call in calls:
                call()
        except Exception as err:  # noqa: BLE001 - the capture must be ended before giving up
            failure = err
        graph = _check(drv.cuStreamEndCapture(stream), "cuStreamEndCapture")
        if failure is not None:
            raise failure
        executable = _check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    except Exception as err:  # noqa: BLE001 - the calls still run one by one
        set_stream(0)
        return None, f"{type(err).__name__}: {err}"

    def launch() -> None:
        status = drv.cuGraphLaunch(executable, stream)[0]
        if int(status):
            raise KilnError(f"cuGraphLaunch failed: {getattr(status, 'name', status)}")

    launch.keep = (graph, executable, stream)  # alive as long as the launcher
    return launch, None
