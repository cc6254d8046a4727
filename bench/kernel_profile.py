"""Where a model's time goes: each kernel of kiln's build timed alone (graph executor profile),
slowest first, with the multiply instructions in its assembly (AMX tdpbf16ps, AVX512-BF16
vdpbf16ps, float32 FMA, half-precision vfmadd..ph).

    python bench/kernel_profile.py [--model resnet18] [--precision float32|bfloat16|float16]
                                   [--threads 2] [--top 15] [--target llvm]

One run, noisy like any single run on a shared machine: use it to find the slow kernels, and
bench/e2e.py for the figures.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e import MODELS  # noqa: E402

_INSTRUCTIONS = ("tdpbf16ps", "vdpbf16ps", "vfmadd231ps", "vfmadd231ph", "vcvtph2ps")


def kernel_instructions(asm: str) -> dict:
    """{kernel symbol: the _INSTRUCTIONS found in its code (body included)}."""
    found, current = {}, None
    for line in asm.splitlines():
        m = re.match(r"^(tvmgen_\w+?)(?:\.body[\w.]*)?:", line)
        if m:
            current = m.group(1)
            found.setdefault(current, set())
        elif current:
            found[current].update(i for i in _INSTRUCTIONS if i in line)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", choices=list(MODELS))
    ap.add_argument("--precision", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--target", default="llvm")
    args = ap.parse_args()
    import time

    import kiln as tvm
    from kiln import config, relay
    from kiln.contrib import graph_executor
    from kiln.driver.tvmc.transform import apply_graph_transforms

    model, inputs = MODELS[args.model]()
    mod, params = relay.frontend.from_onnx(model)
    mod = apply_graph_transforms(mod, {"mixed_precision": args.precision != "float32",
                                       "mixed_precision_calculation_type": args.precision}, params)
    start = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=args.target)
    compile_s = time.perf_counter() - start
    with config.override(num_threads=args.threads):
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    rows = json.loads(m.module.profile(number=10, repeat=5))
    total = sum(r["ms"] for r in rows)
    print(f"{args.model} {args.precision}, {args.threads} threads: {len(rows)} kernels, {total:.2f} ms in all "
          f"(each alone), compiled in {compile_s:.1f} s")
    found = kernel_instructions(lib.get_lib().get_source("asm"))
    shapes = {nid: " ".join("x".join(map(str, a.shape)) for a in kargs)
              for nid, _, _, kargs in m.module.kernels} if hasattr(m.module, "kernels") else {}
    for r in sorted(rows, key=lambda r: -r["ms"])[:args.top]:
        print(f"{r['ms']:8.3f} ms {100 * r['ms'] / total:5.1f}%  {r['name']}  {' '.join(sorted(found.get(r['name'], ())))}"
              f"  {shapes.get(r['node'], '')}")


if __name__ == "__main__":
    main()
