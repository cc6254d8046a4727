"""kiln_run (the C graph executor) against the Python graph executor on one adreno texture package:
ONNX ResNet-18 (random weights) built for `opencl -device=adreno`, so mod.json keeps the NCHW4c
tensors and packed weights between operators in images (attrs.storage_scope), run on the first
OpenCL device (or the platform named by KILN_OPENCL_PLATFORM).

    python bench/kiln_run_adreno.py [--image 224] [--rounds 5] [--float16] [--keep DIR]

Both run the same kernels from the same mod.so; kiln_run allocates the images itself
(docs/c-runtime.md "Texture entries") and checks each launch's image arguments. They run
interleaved, `--rounds` times: one kiln_run process doing 5 runs (the first dropped), then 4 runs
of the Python executor after one untimed run. The outputs are compared first (kiln_run against
the Python executor: MISMATCH and exit status 1 when they differ). Prints the medians of the
per-run times (wall clock, each run waiting for the device) and their ratio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "relay"))

from onnx_models import resnet18  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))  # also when imported, not run as a script
from kiln_run import print_medians, time_interleaved  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--float16", action="store_true", help="ToMixedPrecision float16 (float32 accumulation)")
    ap.add_argument("--keep", help="work in this directory and keep it")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-kiln-run-adreno-"))
    work.mkdir(parents=True, exist_ok=True)

    import json

    import kiln as tvm
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.driver.tvmc.compiler import export_package

    build = work / "runtime"
    subprocess.run(["make", "-s", "-j2", "-C", str(ROOT / "src" / "runtime"), f"OUT={build}"], check=True)
    model, inputs = resnet18(image=args.image)
    mod, params = relay.frontend.from_onnx(model)
    if args.float16:
        mod = relay.transform.ToMixedPrecision("float16", accumulation_dtype="float32")(relay.transform.InferType()(mod))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=tvm.target.Target("opencl -device=adreno", host="llvm"), params=params)
    scopes = json.loads(lib.get_graph_json())["attrs"].get("storage_scope", ["", []])[1]
    package = work / "resnet18.tar"
    export_package(lib, str(package))
    np.savez(work / "in.npz", **inputs)

    m = graph_executor.create(lib.get_graph_json(), lib.get_lib(), tvm.cl(0))
    m.set_input(**lib.get_params())
    m.set_input(**inputs)
    m.run()
    want = m.get_output(0).numpy()
    subprocess.run([str(build / "kiln_run"), "--package", str(package), "--device", "cl", "--input",
                    str(work / "in.npz"), "--output", str(work / "out.npz")], check=True)
    got = np.load(work / "out.npz")["output_0"]
    if not np.array_equal(got, want):
        print(f"MISMATCH: kiln_run differs from the Python executor by {np.abs(got - want).max():.3g}")
        return 1

    def run_py():
        m.run()
        tvm.cl(0).sync()

    c_ms, py_ms = time_interleaved([str(build / "kiln_run"), "--package", str(package), "--device", "cl", "--input",
                                    str(work / "in.npz")], run_py, args.rounds)
    images = sum(s != "global" for s in scopes)
    print(f"ResNet-18 {args.image}x{args.image} {'float16' if args.float16 else 'float32'}, opencl -device=adreno "
          f"on {tvm.cl(0).device_name} ({images} image entries of {len(scopes)}), load average "
          f"{os.getloadavg()[0]:.1f}")
    print_medians(c_ms, py_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
