"""002's Python API flow: load a model into a TVMCModel, tune it over the RPC tracker, compile
it into a TVMCPackage with the tuning records, run it on the device; then the Relay flow with
``apply_graph_transforms`` (float16, and float16 with float32 accumulation).

Nothing can be downloaded here, so the ONNX model is generated locally (a small residual conv
net with random weights) and the "device" is two RPC servers started on 127.0.0.1, registered
with a tracker under key ``android`` as in 002. Point ``--port`` at a running tracker with
``--no-fleet`` to use real devices (and the target at their triple).

    python examples/tvmc_python_api.py --trials 4
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor, utils
from kiln.driver import tvmc
from kiln.driver.tvmc.transform import apply_graph_transforms

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "relay"))
from onnx_models import GraphBuilder, run_ort  # noqa: E402

target = "llvm"           # 002: "opencl -device=adreno" with target_host "llvm -mtriple=aarch64-linux-gnu"
rpc_key = "android"
tracker_host = "127.0.0.1"


def make_model(path: str):
    """conv-relu, a residual conv, pooling and a classifier: three tunable tasks."""
    g = GraphBuilder(seed=3)
    x = g.op("Relu", [g.bn(g.conv("data", 3, 16, 3), 16)])
    y = g.bn(g.conv(x, 16, 16, 3), 16)
    x = g.op("Relu", [g.op("Add", [x, y])])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    model = g.model({"data": (1, 3, 32, 32)}, g.dense(x, 16, 10))
    onnx.save(model, path)
    data = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype("float32")
    return model, {"data": data}


def start_fleet(port: int, servers: int = 2):
    procs = [subprocess.Popen([sys.executable, "-m", "kiln.exec.rpc_tracker", "--host", tracker_host,
                               "--port", str(port)])]
    time.sleep(1.0)
    for _ in range(servers):
        procs.append(subprocess.Popen([sys.executable, "-m", "kiln.exec.rpc_server", "--host", tracker_host,
                                       "--tracker", f"{tracker_host}:{port}", "--key", rpc_key]))
    from kiln import rpc
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            t = rpc.connect_tracker(tracker_host, port)
            free = t.summary()["queue_info"].get(rpc_key, {}).get("free", 0)
            t.close()
            if free >= servers:
                return procs
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the local RPC fleet did not come up")


def tvmc_flow(onnx_path: str, inputs: dict, want, port: int, trials: int, tmp):
    # TVMCModel -> tuning records -> TVMCPackage -> run on the device
    model = tvmc.load(onnx_path, shape_dict={"data": [1, 3, 32, 32]})
    print(model.summary())
    log = tvmc.tune(model, target=target, tuning_records=tmp.relpath("records.log"), rpc_key=rpc_key,
                    hostname=tracker_host, port=port, trials=trials, early_stopping=None, repeat=2, number=5,
                    timeout=60, parallel=2)  # builds of Winograd candidates take seconds on a busy 2-core host
    print(f"tuning records: {log} ({sum(1 for _ in open(log))} measurements)")
    package = tvmc.compile(model, target=target, tuning_records=log, package_path=tmp.relpath("model.tar"))
    print(f"package: {package.package_path} ({os.path.getsize(package.package_path) / 1e3:.0f} kB)")
    result = tvmc.run(package, device="cpu", rpc_key=rpc_key, hostname=tracker_host, port=port,
                      inputs=inputs, number=5, repeat=5)
    print(result.format_times())
    got = result.outputs["output_0"]
    assert np.allclose(got, want, rtol=1e-4, atol=1e-4), "kiln and onnxruntime disagree"
    print("tvmc.run output matches onnxruntime (rtol/atol 1e-4)")

    # the same model with float16 through the tvmc API's mixed-precision arguments
    package16 = tvmc.compile(model, target=target, package_path=tmp.relpath("model-fp16.tar"),
                             mixed_precision=True, mixed_precision_ops=["nn.conv2d", "nn.dense"],
                             mixed_precision_calculation_type="float16", mixed_precision_acc_type="float16")
    got16 = tvmc.run(package16, device="cpu", inputs=inputs, benchmark=False).outputs["output_0"]
    rel = np.abs(got16 - want).max() / np.abs(want).max()
    assert rel <= 1e-2, rel
    print(f"tvmc float16 package: max relative error {rel:.1e}")


def relay_flow(onnx_model, inputs: dict, want):
    # 002's Relay interface: apply_graph_transforms, then relay.build
    mod, params = relay.frontend.from_onnx(onnx_model, shape={"data": (1, 3, 32, 32)})
    for acc in ("float16", "float32"):
        mod16 = apply_graph_transforms(
            mod,
            {
                "mixed_precision": True,
                "mixed_precision_ops": ["nn.conv2d", "nn.dense"],
                "mixed_precision_calculation_type": "float16",
                "mixed_precision_acc_type": acc,
            },
        )
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod16, target=target, params=params)
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        m.set_input("data", inputs["data"])
        m.run()
        got = m.get_output(0).numpy()
        rel = np.abs(got - want).max() / np.abs(want).max()
        assert rel <= 1e-2 and got.dtype == np.float32, (acc, rel)
        print(f"relay float16 (accumulate in {acc}): max relative error {rel:.1e}, same top-1: "
              f"{int(np.argmax(got)) == int(np.argmax(want))}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--port", type=int, default=0, help="tracker port (0: a free one; 002: 9190)")
    p.add_argument("--no-fleet", action="store_true", help="use the tracker already running on --port")
    args = p.parse_args()
    port = args.port
    if port == 0:
        import socket
        with socket.socket() as s:
            s.bind((tracker_host, 0))
            port = s.getsockname()[1]
    tmp = utils.tempdir()
    onnx_path = tmp.relpath("model.onnx")
    onnx_model, inputs = make_model(onnx_path)
    want = run_ort(onnx_model, inputs)[0]
    fleet = [] if args.no_fleet else start_fleet(port)
    try:
        tvmc_flow(onnx_path, inputs, want, port, args.trials, tmp)
    finally:
        for proc in reversed(fleet):
            proc.terminate()
            proc.wait()
    relay_flow(onnx_model, inputs, want)


if __name__ == "__main__":
    main()
