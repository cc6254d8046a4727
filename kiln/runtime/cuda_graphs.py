"""One CUDA graph for an offloaded subgraph's library calls (json_cudnn.py).

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
