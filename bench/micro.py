"""microTVM on the emulated Cortex-M3 (qemu -M mps2-an385 -icount shift=0): size and board time.

For the KWS-size CNN of tests/micro/kws_model.py (float32, default schedules, -O2):
- AOT firmware (model + board code, no runtime): text/data/bss from arm-none-eabi-size, the AOT
  arena and constants, SysTick ticks per inference (25 MHz in QEMU's model; -icount makes one
  instruction one nanosecond, so ticks x 40 is the instruction count);
- the CRT (src/crt: page allocator, framing, RPC server) alone, each object at -Os;
- CRT firmware (graph executor driven from the host): sizes and the summed kernel ticks.
Outputs of both are checked against onnxruntime. The same AOT model on the Cortex-M4F
(mps2-an386, hard float). Then kiln/matmul (32^3 float32) tuned on each board
(MicroBuilder/MicroRunner, random tuner, 10 trials) vs its untuned default. One run: the
counts are deterministic.

int8 (issue 36; ``--int8`` runs only this part): MLPerf Tiny's DS-CNN (tests/micro/ds_cnn_model.py,
published layer shapes; its MAC and parameter counts beside the published ones) in float32 and
quantized by onnxruntime (QDQ, int8) on the M4F and the M55: instructions per inference, flash
and RAM of the firmware, the AOT arena against the peak of live activations. Then the int8 dense
kernel of a DS-CNN pointwise layer (kiln/topi/cortex_m, template cortex_m/dense_int8) and the conv
tasks relay extracts from the int8 DS-CNN (stem, depthwise, pointwise) on each board: the naive
schedule, the untuned default and the best of a grid search, by instruction count. Per-layer
instruction counts of the int8 firmware (the ``profile`` project option). Flash split into
kernels, constants and the CRT + AOT glue (arm-none-eabi-nm symbol sizes).

    python bench/micro.py [--int8]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "micro"))

from kws_model import kws_cnn, run_ort  # noqa: E402

from kiln import micro, relay  # noqa: E402
from kiln.micro.project import CRT_DIR  # noqa: E402
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu  # noqa: E402
from kiln.relay.backend import Executor, Runtime  # noqa: E402

TARGET = "c -keys=arm_cpu -mcpu=cortex-m3"


def crt_size(work: str) -> dict:
    total = {"text": 0, "data": 0, "bss": 0}
    for f in ("page_allocator.c", "framing.c", "rpc_server.c"):
        obj = os.path.join(work, f + ".o")
        subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m3", "-mthumb", "-Os", "-std=gnu99", "-I", CRT_DIR,
                        "-DKILN_CRT_ARENA_BYTES=0x100", "-c", os.path.join(CRT_DIR, f), "-o", obj], check=True)
        out = subprocess.run(["arm-none-eabi-size", obj], capture_output=True, text=True, check=True).stdout
        text, data, bss = (int(x) for x in out.splitlines()[1].split()[:3])
        total["text"] += text
        total["data"] += data
        total["bss"] += bss
    return total


def main() -> None:
    why = missing_arm_gcc() or missing_qemu()
    if why:
        sys.exit(f"bench/micro.py: {why}")
    model, inputs = kws_cnn()
    want = run_ort(model, inputs)[0]
    mod, params = relay.frontend.from_onnx(model)
    work = tempfile.mkdtemp(prefix="kiln-bench-micro-")
    template = micro.get_microtvm_template_projects("qemu-mps2-an385")

    aot = relay.build(mod, target=TARGET, executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}),
                      runtime=Runtime("crt"), params=params)
    p = micro.project.generate_project(template, aot, os.path.join(work, "aot"), {"inputs": inputs})
    p.build()
    sizes = p.sizes()
    r = p.run()
    np.testing.assert_allclose(r["outputs"]["output"], want, rtol=1e-5, atol=1e-6)
    print(f"AOT firmware: text {sizes['text']} B, data {sizes['data']} B, bss {sizes['bss']} B "
          f"(flash {sizes['flash']} B, RAM {sizes['ram']} B; model arena {aot.workspace_size} B, "
          f"constants {aot.plan.constant_size} B)")
    print(f"AOT inference: {r['cycles']} SysTick ticks at 25 MHz (~{r['cycles'] * 40} instructions)")

    crt = crt_size(work)
    print(f"CRT alone (-Os, arena excluded): text {crt['text']} B, data {crt['data']} B, bss {crt['bss']} B")

    graph = relay.build(mod, target=TARGET, params=params)
    p = micro.project.generate_project(template, graph, os.path.join(work, "crt"), {})
    p.build()
    out = subprocess.run(["arm-none-eabi-size", p.exe], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(x) for x in out.splitlines()[1].split()[:3])
    with micro.Session(transport_context_manager=p.transport()) as sess:
        m = micro.create_local_graph_executor(graph.get_graph_json(), sess.get_system_lib(), sess.device)
        m.set_input(**graph.get_params())
        m.set_input("input", inputs["input"])
        ticks = m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-5, atol=1e-6)
    print(f"CRT firmware (graph executor from the host): text {text} B, data {data} B, bss {bss} B "
          f"(bss includes the {256 * 1024} B page arena)")
    print(f"graph executor kernels on the board: {ticks} SysTick ticks (kernel time only; RPC excluded)")
    print(f"AOT / graph kernel ticks: {r['cycles'] / ticks:.3f}")
    m4 = relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m4",
                     executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}), params=params)
    p = micro.project.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), m4,
                                       os.path.join(work, "m4"), {"inputs": inputs})
    p.build()
    r4 = p.run()
    np.testing.assert_allclose(r4["outputs"]["output"], want, rtol=1e-5, atol=1e-6)
    s4 = p.sizes()
    print(f"AOT on Cortex-M4F (mps2-an386, hard float): text {s4['text']} B, {r4['cycles']} SysTick ticks "
          f"({r['cycles'] / r4['cycles']:.1f}x fewer than the soft-float Cortex-M3)")
    tune_matmul(work, "qemu-mps2-an385", "cortex-m3")
    tune_matmul(work, "qemu-mps2-an386", "cortex-m4")


def tune_matmul(work: str, template: str, cpu: str, size: int = 32, trials: int = 10) -> None:
    """kiln/matmul on the board: the untuned default vs the best of ``trials`` random candidates."""
    from kiln import autotvm
    from kiln.autotvm.space import FallbackConfigEntity
    from kiln.autotvm.tuner import RandomTuner
    from kiln.build_module import build
    from kiln.micro import autotvm as micro_autotvm

    task = autotvm.task.create("kiln/matmul", (size, size, size, "float32"), f"c -mcpu={cpu}")
    sch, args = task.instantiate(FallbackConfigEntity())
    src = build(sch, args, target=task.target, name="default_function").get_source()
    info = [(tuple(int(d) for d in t.shape), str(t.dtype), False) for t in args]
    untuned = micro_autotvm.time_on_board(src, info, template, number=2)[0]
    option = autotvm.measure_option(builder=micro_autotvm.MicroBuilder(n_parallel=2),
                                    runner=micro_autotvm.MicroRunner(template, number=2))
    tuner = RandomTuner(task)
    tuner.tune(n_trial=trials, measure_option=option)
    tuned = 2.0 * size ** 3 / tuner.best_flops
    print(f"matmul {size}^3 float32 on {cpu}: untuned {untuned * 1e3:.3f} ms, best of {trials} random "
          f"candidates {tuned * 1e3:.3f} ms (x{untuned / tuned:.2f}) {tuner.best_config}")


def int8_section(work: str) -> None:
    import onnx
    import onnxruntime.quantization as oq
    from ds_cnn_model import PUBLISHED, SHAPE, counts, ds_cnn

    ours = counts()
    print(f"DS-CNN: {ours['macs']:,} MACs, {ours['params']:,} parameters (published DS-CNN: "
          f"~{PUBLISHED['macs']:,} MACs, {PUBLISHED['params']:,} parameters with batch-norm)")
    model, inputs = ds_cnn()
    onnx.save(model, os.path.join(work, "ds_cnn.onnx"))

    class Calibration(oq.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.data = iter([{"input": rng.standard_normal(SHAPE).astype("float32")} for _ in range(8)])

        def get_next(self):
            return next(self.data, None)

    oq.quantize_static(os.path.join(work, "ds_cnn.onnx"), os.path.join(work, "ds_cnn_q.onnx"), Calibration(),
                       quant_format=oq.QuantFormat.QDQ, activation_type=oq.QuantType.QInt8,
                       weight_type=oq.QuantType.QInt8, per_channel=True, reduce_range=True)
    quantized = onnx.load(os.path.join(work, "ds_cnn_q.onnx"))
    hz = {"qemu-mps2-an386": 25e6, "qemu-mps3-an547": 32e6}
    for template, cpu in (("qemu-mps2-an386", "cortex-m4"), ("qemu-mps3-an547", "cortex-m55")):
        counted = {}
        for name, m in (("float32", model), ("int8", quantized)):
            mod, params = relay.frontend.from_onnx(m)
            lib = relay.build(mod, target=f"c -keys=arm_cpu -mcpu={cpu}", params=params,
                              executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
            p = micro.project.generate_project(micro.get_microtvm_template_projects(template), lib,
                                               os.path.join(work, f"ds_{cpu}_{name}"), {"inputs": inputs})
            p.build()
            r = p.run()
            check_against_host(mod, params, inputs, r["outputs"]["output"], name)
            counted[name] = r["cycles"] * 1e9 / hz[template]
            sz = p.sizes()
            print(f"DS-CNN {name} on {cpu}: {counted[name] / 1e6:.2f} M instructions; flash {sz['flash']:,} B "
                  f"(kernels {sz['kernels']:,} B, constants {sz['constants']:,} B, CRT + AOT glue {sz['glue']:,} B), "
                  f"RAM {sz['ram']:,} B; AOT arena {lib.plan.workspace_size:,} B (peak of live activations "
                  f"{lib.plan.peak_live_bytes:,} B), constants {lib.plan.constant_size:,} B")
            if name == "int8":
                per_layer(p.dir + "_profile", template, lib, inputs, hz[template])
        print(f"DS-CNN on {cpu}: int8 / float32 instructions {counted['int8'] / counted['float32']:.3f} "
              f"({counted['float32'] / counted['int8']:.2f}x fewer; goal on the M4F: >= 3x) (stem and 1x1 convs on "
              "int16 operands, LDRD + SMLAD, or MVE; depthwise rows by SMLABB tap pairs (M4F) or MVE VLDRB.S32 + VMLA.S32 over 4 pixels (M55); "
              "requantize in 32-bit; average pool in integers)")
        tune_dense_int8(work, template, cpu)
        tune_convs(work, template, cpu, quantized)


def per_layer(project_dir: str, template: str, lib, inputs, hz: float) -> None:
    """Instructions of each kernel call (the firmware with ``profile``: SysTick around each call)."""
    p = micro.project.generate_project(micro.get_microtvm_template_projects(template), lib, project_dir,
                                       {"inputs": inputs, "profile": True})
    p.build()
    layers = p.run()["layers"]
    total = sum(t for _, t in layers)
    for name, ticks in layers:
        print(f"    {ticks * 1e9 / hz / 1e3:9.1f} k  {100.0 * ticks / total:5.1f} %  {name}")


def check_against_host(mod, params, inputs, got, name) -> None:
    """The board's output against the host's llvm build of the same relay graph: equal integers
    before the last dequantize (int8), float32 within rounding of a different summation order."""
    import kiln as tvm
    from kiln.contrib import graph_executor

    m = graph_executor.GraphModule(relay.build(mod, target="llvm", params=params)["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    want = m.get_output(0).numpy()
    if name == "int8":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def tune_convs(work: str, template: str, cpu: str, quantized) -> None:
    """DS-CNN's int8 conv tasks as relay extracts them (kiln/topi/cortex_m/tuning.py), each grid-
    searched on the board by instruction count: the naive schedule (plain loops), the untuned
    default (what relay builds without a log) and the best."""
    from kiln import autotvm
    from kiln.autotvm.record import load_from_file
    from kiln.autotvm.space import FallbackConfigEntity
    from kiln.micro import autotvm as micro_autotvm

    mod, params = relay.frontend.from_onnx(quantized)
    tasks = [t for t in autotvm.task.extract_from_program(mod, params=params, target=f"c -keys=arm_cpu -mcpu={cpu}")
             if "conv" in t.name]
    option = autotvm.measure_option(builder=micro_autotvm.MicroBuilder(n_parallel=2, timeout=120),
                                    runner=micro_autotvm.MicroRunner(template, number=1))
    for k, t in enumerate(tasks):
        log = os.path.join(work, f"conv_{cpu}_{k}.json")
        autotvm.tuner.GridSearchTuner(t).tune(n_trial=len(t.config_space), measure_option=option,
                                              callbacks=[autotvm.callback.log_to_file(log)])
        knobs = sorted(t.config_space.space_map)
        costs = {tuple((n, i.config[n].val) for n in knobs): float(np.mean(r.costs)) * 1e9
                 for i, r in load_from_file(log) if r.error_no == 0}
        fallback = FallbackConfigEntity()
        t.instantiate(fallback)
        default = costs.get(tuple((n, fallback[n].val) for n in knobs), float("nan"))
        naive = min(v for key, v in costs.items() if dict(key)["isa"] == "plain")
        best_key = min(costs, key=costs.get)
        shape = t.args[1][1]
        print(f"conv task {t.name} kernel {shape} on {cpu}: naive {naive:,.0f} instructions, untuned default "
              f"{default:,.0f}, tuned best {costs[best_key]:,.0f} ({naive / costs[best_key]:.2f}x fewer than naive; "
              f"default/best {default / costs[best_key]:.2f}) {dict(best_key)} ({len(costs)} points)")


def tune_dense_int8(work: str, template: str, cpu: str, shape=(125, 64, 64)) -> None:
    """The int8 dense kernel of a DS-CNN pointwise layer (25x5 pixels, 64 -> 64 channels) on the board."""
    from kiln import autotvm
    from kiln.autotvm.record import load_from_file
    from kiln.micro import autotvm as micro_autotvm
    from kiln.micro import templates

    task = autotvm.task.create("cortex_m/dense_int8", (*shape, cpu), f"c -mcpu={cpu}")
    log = os.path.join(work, f"dense_{cpu}.json")
    option = autotvm.measure_option(builder=micro_autotvm.MicroBuilder(n_parallel=2),
                                    runner=micro_autotvm.MicroRunner(template, number=1))
    autotvm.tuner.GridSearchTuner(task).tune(n_trial=len(task.config_space), measure_option=option,
                                             callbacks=[autotvm.callback.log_to_file(log)])
    costs = {str(i.config): float(np.mean(r.costs)) * 1e9 for i, r in load_from_file(log) if r.error_no == 0}
    naive = costs[min((k for k in costs if "'plain'" in k), key=costs.get)]
    default = costs[str(templates.default_config(task))]
    best_key = min(costs, key=costs.get)
    macs = shape[0] * shape[1] * shape[2]
    print(f"int8 dense {shape} ({macs:,} MACs) on {cpu}: naive {naive:,.0f} instructions, untuned default "
          f"{default:,.0f} ({naive / default:.2f}x fewer), tuned best {costs[best_key]:,.0f} "
          f"({naive / costs[best_key]:.2f}x fewer than naive; default/best {default / costs[best_key]:.2f}) {best_key}")


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--int8", action="store_true", help="only the int8 part (DS-CNN, int8 kernels, tuning)")
    if parser.parse_args().int8:
        why = missing_arm_gcc() or missing_qemu()
        if why:
            sys.exit(f"bench/micro.py: {why}")
        int8_section(tempfile.mkdtemp(prefix="kiln-bench-micro-int8-"))
    else:
        main()
        int8_section(tempfile.mkdtemp(prefix="kiln-bench-micro-int8-"))
