"""Compile ResNet-18 from an ONNX file and run it on a device through RPC (the main job).

Nothing can be downloaded here, so the ONNX file is generated locally: the ResNet-18
architecture with random weights (tests/relay/onnx_models.py). The "device" is an RPC server
started as a subprocess on 127.0.0.1; point ``host``/``port`` at a board's server instead (and
the target at its triple, e.g. "llvm -mtriple=aarch64-linux-gnu") to run it there.

    python examples/onnx_resnet18_rpc.py

Prints the top-5 classes (of random weights, so only the mechanics mean something), checks them
against onnxruntime when it is installed, and prints the latency measured on the server.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

import kiln as tvm
from kiln import relay, rpc
from kiln.contrib import graph_executor, utils

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "relay"))
from onnx_models import resnet18  # noqa: E402

target = "llvm"
host, port = "127.0.0.1", 0  # 0: start a local server on a free port


def start_local_server(log_path):
    """``python -m kiln.exec.rpc_server`` in a subprocess, logging to a file (a pipe nobody reads
    could fill up and stall the server); returns (process, port)."""
    log = open(log_path, "w+")
    proc = subprocess.Popen([sys.executable, "-m", "kiln.exec.rpc_server", "--host", host, "--port", "9190",
                             "--port-end", "9290"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"bind to [\d.]+:(\d+)", Path(log_path).read_text())
        if found:
            return proc, int(found.group(1))
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the local RPC server did not start:\n{Path(log_path).read_text()}")


def main():
    tmp = utils.tempdir()

    # 1. An ONNX model file, as a user would have downloaded one.
    model, inputs = resnet18()
    onnx_path = tmp.relpath("resnet18.onnx")
    onnx.save(model, onnx_path)
    print(f"ResNet-18 ONNX file: {os.path.getsize(onnx_path) / 1e6:.1f} MB (random weights)")

    # 2. Import and compile.
    onnx_model = onnx.load(onnx_path)
    input_name, image = next(iter(inputs.items()))
    mod, params = relay.frontend.from_onnx(onnx_model, shape={input_name: image.shape})
    start = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    print(f"relay.build: {time.perf_counter() - start:.1f} s, {len(lib.get_lib().function_names())} kernels")
    lib.export_library(tmp.relpath("resnet18.so"))

    # 3. The device: a local RPC server in its own process.
    server = None
    try:
        if port == 0:
            server, server_port = start_local_server(tmp.relpath("rpc_server.log"))
        else:
            server_port = port
        remote = rpc.connect(host, server_port)
        remote.upload(tmp.relpath("resnet18.so"))
        rlib = remote.load_module("resnet18.so")
        dev = remote.cpu(0)
        module = graph_executor.GraphModule(rlib["default"](dev))

        # 4. Run on the device.
        module.set_input(input_name, tvm.nd.array(image))
        module.run()
        logits = module.get_output(0).numpy()[0]
        prob = np.exp(logits - logits.max())
        prob /= prob.sum()
        top5 = np.argsort(prob)[::-1][:5]
        print("top-5 classes:", ", ".join(f"{c} ({prob[c]:.3f})" for c in top5))
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            pass
        else:
            from onnx_models import run_ort
            want = run_ort(onnx_model, inputs)[0][0]
            assert np.allclose(logits, want, rtol=1e-4, atol=1e-4), "kiln and onnxruntime disagree"
            assert list(np.argsort(want)[::-1][:5]) == list(top5)
            print("matches onnxruntime (rtol/atol 1e-4), same top-5")

        # 5. Latency, measured on the device (no network in the timing).
        ftimer = module.module.time_evaluator("run", dev, number=3, repeat=5)
        ms = np.array(ftimer().results) * 1000
        print(f"latency on the server: {np.mean(ms):.2f} ms (std {np.std(ms):.2f} ms, {len(ms)} x 3 runs)")
        remote.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
