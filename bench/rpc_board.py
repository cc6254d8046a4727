"""Round trip to the qemu "boards" (kiln_rpc cross-built, run under qemu-user) against the
Python RPC server on this host, measured in the same run; and the size of what a board needs.

    python bench/rpc_board.py

Three round trips per server, median of 7 rounds of 100 calls each (rounds alternate
between the servers):
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


class Target:
    """One open session with add_one loaded and arrays allocated."""

    def __init__(self, port, lib_path):
        self.remote = rpc.connect(svc.HOST, port)
        self.remote.upload(lib_path, "add_one.so")
        func = self.remote.load_module("add_one.so")["add_one"]
        echo = self.remote.get_function("rpc.echo")
        dev = self.remote.cpu()
        a = tvm.nd.array(np.ones(1024, np.float32), dev)
        b = tvm.nd.empty((1024,), "float32", dev)
        self.steps = {"echo": lambda: echo(0), "call": lambda: func(a, b),
                      "call+copy": lambda: (func(a, b), b.numpy())}
        self.samples = {k: [] for k in self.steps}

    def round(self, calls):
        for name, step in self.steps.items():
            for _ in range(10):
                step()
            start = time.perf_counter()
            for _ in range(calls):
                step()
            self.samples[name].append((time.perf_counter() - start) / calls)

    def medians(self):
        return {k: statistics.median(v) for k, v in self.samples.items()}


def main(calls=100, rounds=7):
    import tempfile
    work = tempfile.mkdtemp(prefix="kiln-bench-board-")
    services, targets, sizes = [], {}, {}
    try:
        host = svc.server()
        services.append(host)
        targets["python server, host"] = Target(host.port, add_one_files("llvm", work, "host"))
        for name, arch in boards.ARCHES.items():
            if arch.missing():
                print(f"skipping {name}: {arch.missing()}")
                continue
            build = boards.build_runtime(os.path.join(work, name), arch.cross)
            sizes[name] = {f: os.path.getsize(os.path.join(build, f)) for f in ("kiln_rpc", "libkiln_runtime.so")}
            board = boards.start_board(os.path.join(build, "kiln_rpc"), arch)
            services.append(board)
            targets[f"kiln_rpc, qemu {name}"] = Target(board.port, add_one_files(arch.target, work, name))
        # Rounds alternate between the servers, so machine noise hits them alike.
        for _ in range(rounds):
            for t in targets.values():
                t.round(calls)
        results = {label: t.medians() for label, t in targets.items()}
        for t in targets.values():
            t.remote.close()
    finally:
        for s in services:
            s.stop()
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
