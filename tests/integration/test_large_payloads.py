"""Payloads far larger than a frame (docs/rpc-protocol.md, version 2): a parameter blob of more
than 4x the frame limit loaded into a remote graph executor, and a file of that size uploaded and
downloaded, through the Python server, the C kiln_rpc and the proxy. Each side's peak resident
set (VmHWM: the ru_maxrss of one address space, of the client process, the server's session
worker and the proxy) may grow by the payload plus a few chunks, never by a multiple of it.

Marked heavy: each route moves about 1 GB over loopback and through the disk (10-45 s here);
tests/rpc/test_streams.py covers the same paths with payloads of a few chunks in `make test`."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.rpc import protocol as P

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "rpc"))
sys.path.insert(0, os.path.join(HERE, "..", "runtime"))
sys.path.insert(0, os.path.join(HERE, "..", "crossdev"))
import boards  # noqa: E402
import rpc_services as svc  # noqa: E402
from test_c_graph import make_runtime  # noqa: E402

COLS = 1024
# The weight w[ROWS, COLS] (float32) is just over 4.25 frame limits.
ROWS = (P.MAX_FRAME * 17 // 4) // (4 * COLS) + 1
PAYLOAD = ROWS * COLS * 4
# What a side may hold beyond the payload: the chunk being sent or received, the interpreter's
# and allocator's slack around it. A second copy of the payload would be 64 chunks.
SLACK = 3 * P.CHUNK


def _weight_rows(start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of w: small integers, so every column sum is exact in float32."""
    i = np.arange(start, stop, dtype=np.int64)[:, None]
    j = np.arange(COLS, dtype=np.int64)[None, :]
    return ((i * 7 + j * 3) % 5).astype("float32")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """mod.so and mod.json of y = sum(w, axis=0) + x (w a graph input, loaded as a parameter),
    mod.params holding w, written a slice at a time, and the expected column sums."""
    d = tmp_path_factory.mktemp("large-payloads")
    x = relay.var("x", shape=(COLS,), dtype="float32")
    w = relay.var("w", shape=(ROWS, COLS), dtype="float32")
    func = relay.Function([x, w], relay.add(relay.sum(w, axis=0), x))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), target="llvm")
    lib.get_lib().export_library(str(d / "mod.so"))
    (d / "mod.json").write_text(lib.get_graph_json())
    sums = np.zeros(COLS, dtype=np.float64)
    with open(d / "mod.params", "wb") as f:
        f.write(b"KILNPRM1" + struct.pack("<Q", 1))
        for text in (b"w", b"float32"):
            f.write(struct.pack("<Q", len(text)) + text)
        f.write(struct.pack("<Qqq", 2, ROWS, COLS) + struct.pack("<Q", PAYLOAD))
        for start in range(0, ROWS, 8192):
            rows = _weight_rows(start, min(start + 8192, ROWS))
            sums += rows.sum(axis=0, dtype=np.float64)
            f.write(rows.tobytes())
    np.save(d / "sums.npy", sums)
    return d


# Runs in its own process, so its ru_maxrss is the client's alone.
CLIENT = r"""
import hashlib, json, sys, time
import numpy as np
from kiln import rpc
from kiln.contrib import graph_executor

host, port, key, d = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def server_hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))


def maxrss():
    # VmHWM is ru_maxrss of this address space only: ru_maxrss itself keeps the high-water mark
    # of the process image before exec (here the forked pytest, larger than the payload).
    return server_hwm("self")


report = {}
sess = rpc.connect(host, port, key=key)
pid = sess.get_function("rpc.getpid")()
sess.upload(f"{d}/mod.so", "mod.so")
lib = sess.load_module("mod.so")
m = graph_executor.create(open(f"{d}/mod.json").read(), lib, sess.cpu())
report["client_base"] = maxrss()
report["server_base"] = server_hwm(pid)

t = time.perf_counter()
sess.upload(f"{d}/mod.params", "big.bin")        # read and sent a chunk at a time
report["upload_s"] = time.perf_counter() - t
report["server_after_upload"] = server_hwm(pid)
t = time.perf_counter()
back = sess.download("big.bin")
report["download_s"] = time.perf_counter() - t
h = hashlib.sha256()
with open(f"{d}/mod.params", "rb") as f:
    for piece in iter(lambda: f.read(1 << 24), b""):
        h.update(piece)
report["download_matches"] = hashlib.sha256(back).hexdigest() == h.hexdigest()
report["download_size"] = len(back)
del back
report["server_after_download"] = server_hwm(pid)

blob = open(f"{d}/mod.params", "rb").read()    # the payload, held once by the client
t = time.perf_counter()
m.load_params(blob)
report["load_params_s"] = time.perf_counter() - t
report["server_after_params"] = server_hwm(pid)
del blob
x = np.arange(1024, dtype="float32")
m.set_input("x", x)
t = time.perf_counter()
m.run()
report["run_s"] = time.perf_counter() - t
y = m.get_output(0).numpy()
report["max_error"] = float(np.abs(y - (np.load(f"{d}/sums.npy") + x)).max())
report["client_peak"] = maxrss()
sess.close()
print("REPORT " + json.dumps(report))
"""


def _hwm(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def _run_client(port: int, files, key: str = "") -> dict:
    done = subprocess.run([sys.executable, "-c", CLIENT, svc.HOST, str(port), key, str(files)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))
    report = json.loads(line[len("REPORT "):])
    print(report)  # the figures, with pytest -s
    return report


def _check(report: dict, files) -> None:
    assert report["download_matches"] and report["download_size"] == os.path.getsize(files / "mod.params")
    assert report["max_error"] == 0.0  # integer sums: exact
    # Upload and download pass through the server a chunk at a time.
    assert report["server_after_upload"] - report["server_base"] <= SLACK, report
    assert report["server_after_download"] - report["server_base"] <= SLACK, report
    # The parameters land in the executor's own input: the payload once (those pages are
    # touched for the first time), plus a chunk.
    assert report["server_after_params"] - report["server_base"] <= PAYLOAD + SLACK, report
    # The client holds the blob it read and a downloaded copy, one at a time.
    assert report["client_peak"] - report["client_base"] <= PAYLOAD + SLACK, report


def test_payload_is_more_than_four_frames():
    assert PAYLOAD >= 4 * P.MAX_FRAME and PAYLOAD // P.CHUNK >= 16


@pytest.mark.heavy
def test_python_server(files):
    server = svc.server()
    try:
        report = _run_client(server.port, files)
    finally:
        server.stop()
    _check(report, files)


@pytest.mark.heavy
def test_c_server(files, tmp_path_factory):
    build = make_runtime(str(tmp_path_factory.mktemp("c-large")))
    board = boards.start_board(os.path.join(build, "kiln_rpc"), None)
    try:
        report = _run_client(board.port, files)
    finally:
        board.stop()
    _check(report, files)


@pytest.mark.heavy
def test_through_the_proxy(files):
    proxy = svc.proxy()
    server = svc.Service("rpc_server", "--host", svc.HOST, "--port", str(proxy.port), "--through-proxy",
                         "--key", "big", wait_for=r"connected to proxy")
    try:
        proxy.wait_log(r"server with key big connected")
        proxy_base = _hwm(proxy.proc.pid)
        report = _run_client(proxy.port, files, key="big")
        proxy_peak = _hwm(proxy.proc.pid)
    finally:
        server.stop()
        proxy.stop()
    _check(report, files)
    # The proxy relays bytes through two 1 MiB buffers: it holds no part of the payload.
    assert proxy_peak - proxy_base <= SLACK, (proxy_base, proxy_peak)
