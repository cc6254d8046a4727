"""Document 000's OpenCL kernel served by the C runtime: a device without Python.

The document builds TVM's C++ runtime with ``USE_OPENCL ON`` on the RK3399; kiln's device side
is ``kiln_rpc`` (src/runtime, plain C), which opens ``libOpenCL.so.1`` at run time, so the same
binary serves boards with and without a GPU. Here it is built for this machine with 32-byte array
alignment (the document's ``USE_KALLOC_ALIGNMENT 32``) and started on 127.0.0.1; the client is
the document's code.

    python examples/opencl_c_rpc.py

For a board: ``make -C src/runtime CROSS=aarch64-linux-gnu- KALLOC_ALIGNMENT=32``, copy
``build/aarch64-linux-gnu/kiln_rpc`` there, run it, and build with
``Target("opencl", host="llvm -mtriple=aarch64-linux-gnu")``.
"""

import re
import subprocess
import time
from pathlib import Path

import numpy as np

import kiln as tvm
from kiln import te
from kiln import rpc
from kiln.contrib import utils

RUNTIME_SRC = Path(__file__).resolve().parent.parent / "src" / "runtime"


def start_c_server(build_dir, log_path):
    """Build kiln_rpc with make and start it on 127.0.0.1; returns (process, port)."""
    subprocess.run(["make", "-s", "-C", str(RUNTIME_SRC), f"OUT={build_dir}", "KALLOC_ALIGNMENT=32"],
                   check=True)
    log = open(log_path, "w+")
    proc = subprocess.Popen([f"{build_dir}/kiln_rpc", "--host", "127.0.0.1", "--port", "9090",
                             "--port-end", "9190"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"bind to [\d.]+:(\d+)", Path(log_path).read_text())
        if found:
            return proc, int(found.group(1))
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"kiln_rpc did not start:\n{Path(log_path).read_text()}")


def main():
    temp = utils.tempdir()
    server, port = start_c_server(temp.relpath("c-runtime"), temp.relpath("kiln_rpc.log"))
    try:
        n = tvm.convert(1024)
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
        s = te.create_schedule(B.op)
        xo, xi = s[B].split(B.op.axis[0], factor=32)
        s[B].bind(xo, te.thread_axis("blockIdx.x"))
        s[B].bind(xi, te.thread_axis("threadIdx.x"))
        func = tvm.build(s, [A, B], target=tvm.target.Target("opencl", host="llvm"))

        remote = rpc.connect("127.0.0.1", port)
        path = temp.relpath("lib_cl.tar")
        func.export_library(path)
        remote.upload(path)
        func = remote.load_module("lib_cl.tar")  # relinked and loaded by the C runtime

        dev = remote.cl()
        print(f"remote.cl(): {dev.device_name}, OpenCL {dev.compute_version}, "
              f"{dev.max_threads_per_block} threads per block")
        a = tvm.nd.array(np.random.uniform(size=1024).astype(A.dtype), dev)
        b = tvm.nd.array(np.zeros(1024, dtype=A.dtype), dev)
        func(a, b)
        np.testing.assert_equal(b.numpy(), a.numpy() + 1)
        cost = func.time_evaluator(func.entry_name, dev, number=10)(a, b).mean
        print("%g secs/op on the device" % cost)
        print("OpenCL test passed (C runtime)!")
        remote.close()
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
