"""Document 004 as written, on OpenCL: tune ResNet-18's conv2d tasks for ``opencl -device=mali``
on every RPC server registered with a tracker under one key, keep the best records, compile
with them, upload, run and time the network on the servers' OpenCL device (``remote.context``).

Only the imports, the host target (``Target("opencl -device=mali", host="llvm")``: the servers
here are this machine, whose OpenCL device is PoCL in CI, a Mali board's in 004) and the device
key differ from 004, plus four knobs for CI: ``--trials`` (004: 1000), ``--image`` (004: 224),
``--port`` (004: 9190) and ``--timeout`` (004: 5 s per measurement; PoCL compiles each
candidate's kernel on the server, seconds on a small machine). By default it starts a tracker and two servers itself, real
processes listening on 127.0.0.1 only; ``--no-fleet`` uses a tracker already running there.

    python examples/tune_relay_opencl_rpc.py --trials 2 --image 32 --timeout 60   # CI size (tests/autotvm/test_gpu_example.py)
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

import kiln as tvm
from kiln import autotvm, relay
import kiln.relay.testing  # noqa: F401
from kiln.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner
from kiln.contrib.utils import tempdir

#### DEVICE CONFIG ####
target = tvm.target.Target("opencl -device=mali", host="llvm")
target_host = None
device_key = "local-opencl"
use_android = False

#### TUNING OPTION ####
network = "resnet-18"
log_file = "%s.%s.log" % (device_key, network)
dtype = "float32"


image_size = 224
tracker_port = 9190


def get_network(name, batch_size):
    input_shape = (batch_size, 3, image_size, image_size)
    output_shape = (batch_size, 1000)
    n_layer = int(name.split("-")[1])
    mod, params = relay.testing.resnet.get_workload(num_layers=n_layer, batch_size=batch_size, dtype=dtype,
                                                    image_shape=input_shape[1:])
    return mod, params, input_shape, output_shape


def tune_tasks(tasks, measure_option, tuner="xgb", n_trial=1000, early_stopping=None,
               log_filename="tuning.log", use_transfer_learning=True):
    # create tmp log file
    tmp_log_file = log_filename + ".tmp"
    if os.path.exists(tmp_log_file):
        os.remove(tmp_log_file)
    for i, tsk in enumerate(reversed(tasks)):
        prefix = "[Task %2d/%2d] " % (i + 1, len(tasks))
        if tuner == "xgb" or tuner == "xgb-rank":
            tuner_obj = XGBTuner(tsk, loss_type="rank")
        elif tuner == "ga":
            tuner_obj = GATuner(tsk, pop_size=50)
        elif tuner == "random":
            tuner_obj = RandomTuner(tsk)
        elif tuner == "gridsearch":
            tuner_obj = GridSearchTuner(tsk)
        else:
            raise ValueError("Invalid tuner: " + tuner)
        if use_transfer_learning:
            if os.path.isfile(tmp_log_file):
                tuner_obj.load_history(autotvm.record.load_from_file(tmp_log_file))
        tsk_trial = min(n_trial, len(tsk.config_space))
        tuner_obj.tune(
            n_trial=tsk_trial,
            early_stopping=early_stopping,
            measure_option=measure_option,
            callbacks=[
                autotvm.callback.progress_bar(tsk_trial, prefix=prefix),
                autotvm.callback.log_to_file(tmp_log_file),
            ],
        )
    autotvm.record.pick_best(tmp_log_file, log_filename)
    os.remove(tmp_log_file)


def tune_and_evaluate(tuning_opt):
    print("Extract tasks...")
    mod, params, input_shape, _ = get_network(network, batch_size=1)
    tasks = autotvm.task.extract_from_program(
        mod["main"], target=target, target_host=target_host, params=params,
        ops=(relay.op.get("nn.conv2d"),))
    print("Tuning...")
    tune_tasks(tasks, **tuning_opt)
    with autotvm.apply_history_best(log_file):
        print("Compile...")
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build_module.build(mod, target=target, params=params, target_host=target_host)
    tmp = tempdir()
    filename = "net.tar"
    lib.export_library(tmp.relpath(filename))
    print("Upload...")
    remote = autotvm.measure.request_remote(device_key, "0.0.0.0", tracker_port, timeout=10000)
    remote.upload(tmp.relpath(filename))
    rlib = remote.load_module(filename)
    import kiln.contrib.graph_runtime as runtime
    ctx = remote.context(str(target), 0)
    module = runtime.GraphModule(rlib["default"](ctx))
    data_tvm = tvm.nd.array((np.random.uniform(size=input_shape)).astype(dtype))
    module.set_input("data", data_tvm)
    print("Evaluate inference time cost...")
    ftimer = module.module.time_evaluator("run", ctx, number=1, repeat=30)
    prof_res = np.array(ftimer().results) * 1000
    print("Mean inference time (std dev): %.2f ms (%.2f ms)" % (np.mean(prof_res), np.std(prof_res)))


def start_fleet(port: int, servers: int):
    procs = [subprocess.Popen([sys.executable, "-m", "kiln.exec.rpc_tracker", "--host", "127.0.0.1",
                               "--port", str(port)])]
    time.sleep(1.0)
    for _ in range(servers):
        procs.append(subprocess.Popen([sys.executable, "-m", "kiln.exec.rpc_server", "--host", "127.0.0.1",
                                       "--tracker", f"127.0.0.1:{port}", "--key", device_key]))
    time.sleep(2.0)
    return procs


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--tuner", default="xgb")
    p.add_argument("--no-fleet", action="store_true")
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--image", type=int, default=image_size, help="input height and width (004: 224)")
    p.add_argument("--port", type=int, default=tracker_port, help="tracker port (004: 9190)")
    p.add_argument("--timeout", type=float, default=5, help="seconds per measurement (004: 5)")
    args = p.parse_args()
    image_size, tracker_port = args.image, args.port
    tuning_option = {
        "log_filename": log_file,
        "tuner": args.tuner,
        "n_trial": args.trials,
        "early_stopping": 450,
        "measure_option": autotvm.measure_option(
            builder=autotvm.LocalBuilder(build_func="ndk" if use_android else "default"),
            runner=autotvm.RPCRunner(device_key, host="0.0.0.0", port=tracker_port, number=10, timeout=args.timeout),
        ),
    }
    fleet = [] if args.no_fleet else start_fleet(tracker_port, args.servers)
    try:
        tune_and_evaluate(tuning_option)
    finally:
        for proc in reversed(fleet):
            proc.terminate()
            proc.wait()
