"""Document 000, "run an OpenCL kernel on a remote device through RPC", with only the imports and
the address changed: the device is an RPC server started here on 127.0.0.1 (a free port) whose
OpenCL device is whatever this machine has (PoCL on a CPU; a GPU's ICD elsewhere), and the host
code is built for this machine ("llvm") instead of the RK3399 ("llvm -mtriple=aarch64-linux-gnu").

    python examples/opencl_rpc.py

On a real board, start ``python -m kiln.exec.rpc_server --host 0.0.0.0 --port 9090`` (or the C
server, see opencl_c_rpc.py) there and put its address and triple back.
"""

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import kiln as tvm
from kiln import te
from kiln import rpc
from kiln.contrib import utils

# The kernel of the document's first part: add one to every element.
n = tvm.convert(1024)
A = te.placeholder((n,), name="A")
B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
temp = utils.tempdir()


def start_local_server(log_path):
    """``python -m kiln.exec.rpc_server`` on 127.0.0.1 in a subprocess; returns (process, port)."""
    log = open(log_path, "w+")
    proc = subprocess.Popen([sys.executable, "-m", "kiln.exec.rpc_server", "--host", "127.0.0.1",
                             "--port", "9090", "--port-end", "9190"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"bind to [\d.]+:(\d+)", Path(log_path).read_text())
        if found:
            return proc, int(found.group(1))
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the local RPC server did not start:\n{Path(log_path).read_text()}")




def run_opencl():
    # NOTE: This is the setting for my rk3399 board. You need to modify
    # them according to your environment.
    opencl_device_host = "127.0.0.1"
    opencl_device_port = local_server_port
    target = tvm.target.Target("opencl", host="llvm")

    # create schedule for the above "add one" compute declaration
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    func = tvm.build(s, [A, B], target=target)

    remote = rpc.connect(opencl_device_host, opencl_device_port)

    # export and upload
    path = temp.relpath("lib_cl.tar")
    func.export_library(path)
    remote.upload(path)
    func = remote.load_module("lib_cl.tar")

    # run
    dev = remote.cl()
    a = tvm.nd.array(np.random.uniform(size=1024).astype(A.dtype), dev)
    b = tvm.nd.array(np.zeros(1024, dtype=A.dtype), dev)
    func(a, b)
    np.testing.assert_equal(b.numpy(), a.numpy() + 1)
    print("OpenCL test passed!")


if __name__ == "__main__":
    server, local_server_port = start_local_server(temp.relpath("rpc_server.log"))
    try:
        run_opencl()
    finally:
        server.terminate()
        server.wait()
