"""Round trip to the qemu "boards" (kiln_rpc cross-built, run under qemu-user) against the
Python RPC server on this host, measured in the same run; and the size of what a board needs.

    python bench/rpc_board.py

Three round trips per server, median of 5 rounds of 200 calls each:
  echo      rpc.echo(0): one request and reply, nothing else
  call      add_one(a, b) on remote arrays of 1024 floats (argument checks + kernel)
  call+copy b.numpy() after the call: one more round trip carrying 4 KiB
Ratios are board / Python-on-host; below 1 means the board answers faster.
"""

import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "crossdev"))
sys.path.insert(0, os.path.join(ROOT, "tests", "rpc"))

import kiln as tvm  # noqa: E402
from kiln import rpc, te  # noqa: E402

import boards  # noqa: E402
import rpc_services as svc  # noqa: E402


def add_one_files(target, directory, tag):
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    path = os.path.join(directory, f"add_one-{tag}.so")
    tvm.build(s, [A, B], target=target, name="add_one").export_library(path)
    return path


def measure(port, lib_path, calls=200, rounds=5):
    remote = rpc.connect(svc.HOST, port)
    remote.upload(lib_path, "add_one.so")
    func = remote.load_module("add_one.so")["add_one"]
    echo = remote.get_function("rpc.echo")
    dev = remote.cpu()
    a = tvm.nd.array(np.ones(1024, np.float32), dev)
    b = tvm.nd.empty((1024,), "float32", dev)
    out = {}
    for name, step in (("echo", lambda: echo(0)), ("call", lambda: func(a, b)),
                       ("call+copy", lambda: (func(a, b), b.numpy()))):
        for _ in range(20):
            step()
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(calls):
                step()
            samples.append((time.perf_counter() - start) / calls)
        out[name] = statistics.median(samples)
    remote.close()
    return out


def main():
    import tempfile
    work = tempfile.mkdtemp(prefix="kiln-bench-board-")
    results, sizes = {}, {}
    host = svc.server()
    try:
        results["python server, host"] = measure(host.port, add_one_files("llvm", work, "host"))
    finally:
        host.stop()
    for name, arch in boards.ARCHES.items():
        if arch.missing():
            print(f"skipping {name}: {arch.missing()}")
            continue
        build = boards.build_runtime(os.path.join(work, name), arch.cross)
        sizes[name] = {f: os.path.getsize(os.path.join(build, f)) for f in ("kiln_rpc", "libkiln_runtime.so")}
        board = boards.start_board(os.path.join(build, "kiln_rpc"), arch)
        try:
            results[f"kiln_rpc, qemu {name}"] = measure(board.port, add_one_files(arch.target, work, name))
        finally:
            board.stop()
    ref = results["python server, host"]
    print(f"{'server':26s} {'echo':>10s} {'call':>10s} {'call+copy':>10s}   ratios vs python/host")
    for label, r in results.items():
        ratios = "  ".join(f"{r[k] / ref[k]:.2f}" for k in ("echo", "call", "call+copy"))
        print(f"{label:26s} {r['echo'] * 1e6:8.1f}us {r['call'] * 1e6:8.1f}us {r['call+copy'] * 1e6:8.1f}us   {ratios}")
    for name, s in sizes.items():
        print(f"{name}: kiln_rpc {s['kiln_rpc'] / 1024:.1f} KiB, libkiln_runtime.so "
              f"{s['libkiln_runtime.so'] / 1024:.1f} KiB (stripped)")


if __name__ == "__main__":
    main()
