"""microTVM on the emulated Cortex-M3 (qemu -M mps2-an385 -icount shift=0): size and board time.

For the KWS-size CNN of tests/micro/kws_model.py (float32, default schedules, -O2):
- AOT firmware (model + board code, no runtime): text/data/bss from arm-none-eabi-size, the AOT
  arena and constants, SysTick ticks per inference (25 MHz in QEMU's model; -icount makes one
  instruction one nanosecond, so ticks x 40 is the instruction count);
- the CRT (src/crt: page allocator, framing, RPC server) alone, each object at -Os;
- CRT firmware (graph executor driven from the host): sizes and the summed kernel ticks.
Outputs of both are checked against onnxruntime. One run: the counts are deterministic.

    python bench/micro.py
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


if __name__ == "__main__":
    main()
