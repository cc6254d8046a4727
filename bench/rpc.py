"""RPC benchmark (issue 3): round trip, upload and array copy bandwidth, tracker grant time,
server registration time. Starts a tracker, a server and a proxy on 127.0.0.1.

Goals on loopback (reference: Apache TVM 0.27 RPC measured on the same machine):
round trip <= 40 us median (TVM 31), <= 100 us via proxy (TVM 74); upload and array copies
>= 1000 MB/s (TVM 30-41); tracker grant <= 10 ms (TVM 97); server registered <= 1 s (TVM ~9 s).
"""

import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "rpc"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import kiln as tvm  # noqa: E402
from kiln import rpc  # noqa: E402
import rpc_services as svc  # noqa: E402
from helpers import c_kernels  # noqa: E402

MB = 1024 * 1024


def round_trip(sess, n=3000):
    mod = sess.load_module("k.so")
    f = mod["add_one"]
    dev = sess.cpu()
    a, b = tvm.nd.array(np.ones(1, "float32"), dev), tvm.nd.empty((1,), "float32", dev)
    for _ in range(300):
        f(a, b)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f(a, b)
        ts.append(time.perf_counter() - t)
    ts.sort()
    return statistics.median(ts) * 1e6, ts[int(0.99 * len(ts))] * 1e6


def best_rate(fn, nbytes, reps=5):
    fn()
    return max(nbytes / MB / _timed(fn) for _ in range(reps))


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    tmp = tempfile.mkdtemp()
    c_kernels.build("cc").module().export_library(os.path.join(tmp, "k.so"))
    tracker = svc.tracker()
    t0 = time.monotonic()
    server = svc.server("--tracker", f"{svc.HOST}:{tracker.port}", "--key", "bench")
    server.wait_log("registered with the tracker")
    registered = time.monotonic() - t0
    proxy = svc.proxy()
    behind = svc.Service("rpc_server", "--host", svc.HOST, "--port", str(proxy.port), "--through-proxy",
                         "--key", "bp", wait_for=None)
    behind.wait_log("connected to proxy")
    try:
        t = rpc.connect_tracker(svc.HOST, tracker.port)
        grants = []
        for _ in range(20):
            ch = t._open()
            start = time.perf_counter()
            grant = t._call({"op": "request", "key": "bench", "priority": 1, "timeout": -1.0}, ch)
            grants.append((time.perf_counter() - start) * 1e3)
            ch.close()
            rpc.connect(grant["host"], grant["port"], lease_token=grant["token"]).close()
            svc.wait_until(lambda: t.summary()["queue_info"]["bench"]["free"] == 1)
        sess = t.request("bench")
        sess.upload(os.path.join(tmp, "k.so"))
        med, p99 = round_trip(sess)
        blob = os.urandom(64 * MB)
        up = best_rate(lambda: sess.upload(blob, target="blob.bin"), len(blob))
        data = np.random.rand(16 * MB).astype("float32")[: 16 * MB]  # 64 MiB
        arr = tvm.nd.empty(data.shape, "float32", sess.cpu())
        to_dev = best_rate(lambda: arr.copyfrom(data), data.nbytes)
        from_dev = best_rate(lambda: arr.numpy(), data.nbytes)
        sess.close()
        via = rpc.connect(svc.HOST, proxy.port, key="bp")
        via.upload(os.path.join(tmp, "k.so"))
        pmed, pp99 = round_trip(via)
        via.close()
    finally:
        for s in (behind, proxy, server, tracker):
            s.stop()
    rows = [
        ("round trip, median (us)", med, 40, 31, "lower"),
        ("round trip, p99 (us)", p99, None, 51, "lower"),
        ("round trip via proxy, median (us)", pmed, 100, 74, "lower"),
        ("round trip via proxy, p99 (us)", pp99, None, None, "lower"),
        ("upload 64 MiB (MB/s)", up, 1000, 41, "higher"),
        ("NDArray to device 64 MiB (MB/s)", to_dev, 1000, 41, "higher"),
        ("NDArray from device 64 MiB (MB/s)", from_dev, 1000, 41, "higher"),
        ("tracker grant, median (ms)", statistics.median(grants), 10, 97, "lower"),
        ("server start to registration (s)", registered, 1, 9, "lower"),
    ]
    print(f"{'measure':36s} {'kiln':>10s} {'goal':>8s} {'TVM 0.27':>9s}  ratio vs TVM")
    for name, value, goal, ref, better in rows:
        if ref is None:
            ratio = ""
        else:
            gain = ref / value if better == "lower" else value / ref
            ratio = f"{gain:.1f}x better" if gain >= 1 else f"{1 / gain:.1f}x worse"
        print(f"{name:36s} {value:10.1f} {goal if goal is not None else '-':>8} {ref if ref is not None else '-':>9}  {ratio}")


if __name__ == "__main__":
    main()
