"""Adreno textures vs buffers: ResNet-18 conv layers and the whole model, float32 and float16.

Both builds are ``opencl -device=adreno`` with the same kernels (topi.adreno: Mali's
register-tiled conv); the texture build packs activations into NCHW4c images and weights into
OIHW4o images and reads them with read_imagef, the buffer build
(``PassContext(config={"relay.backend.adreno_textures": False})``) reads the same tensors from
global memory. float16 is ToMixedPrecision("float16", accumulation float32): half images and
buffers, float arithmetic (no cl_khr_fp16 on PoCL or NVIDIA's OpenCL). Each conv layer is
conv + bias + relu at ResNet-18's shapes (batch 1); times are medians of ``--repeat`` runs of
the graph, measured on the device (profiling events), texture and buffer in the same run;
outputs of the two builds are compared.

    KILN_OPENCL_PLATFORM=NVIDIA python bench/adreno_texture.py    # the lent GPU
    python bench/adreno_texture.py --small                         # PoCL: 32x32, few layers

No Adreno here: the ratios say what textures cost or save on the device it runs on. Published
Adreno figures for reference (apache/tvm PR #17512): ResNet-18 texture fp32 10.6 ms, fp16 7.1 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "relay"))

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402

TARGET = "opencl -device=adreno"
# (name, in channels, out channels, kernel, stride, input size at 224)
LAYERS = [("conv1 7x7/2", 3, 64, 7, 2, 224), ("layer1 3x3", 64, 64, 3, 1, 56),
          ("layer2 3x3/2", 64, 128, 3, 2, 56), ("layer2 3x3", 128, 128, 3, 1, 28),
          ("layer2 1x1/2", 64, 128, 1, 2, 56), ("layer3 3x3/2", 128, 256, 3, 2, 28),
          ("layer3 3x3", 256, 256, 3, 1, 14), ("layer3 1x1/2", 128, 256, 1, 2, 28),
          ("layer4 3x3/2", 256, 512, 3, 2, 14), ("layer4 3x3", 512, 512, 3, 1, 7),
          ("layer4 1x1/2", 256, 512, 1, 2, 14)]


def conv_layer(cin, cout, k, stride, size):
    rng = np.random.default_rng(0)
    x = relay.var("data", shape=(1, cin, size, size), dtype="float32")
    w = relay.const(rng.standard_normal((cout, cin, k, k)).astype("float32") * 0.1)
    b = relay.const(rng.standard_normal((cout, 1, 1)).astype("float32"))
    y = relay.nn.relu(relay.add(relay.nn.conv2d(x, w, strides=(stride, stride), padding=(k // 2, k // 2)), b))
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    return mod, {}, {"data": rng.standard_normal((1, cin, size, size)).astype("float32")}


def build(mod, params, textures: bool, fp16: bool):
    if fp16:
        mod = relay.transform.InferType()(mod)
        mod = relay.transform.ToMixedPrecision("float16", accumulation_dtype="float32")(mod)
    config = {"relay.backend.adreno_textures": textures}
    with tvm.transform.PassContext(opt_level=3, config=config):
        return relay.build(mod, target=tvm.target.Target(TARGET, host="llvm"), params=params)


def time_ms(lib, inputs, dev, repeat: int, number: int):
    g = graph_executor.GraphModule(lib["default"](dev))
    g.set_input(**inputs)
    g.run()
    out = g.get_output(0).numpy()
    timer = g.module.time_evaluator("run", dev, number=number, repeat=repeat)
    return statistics.median(timer().results) * 1e3, out


def compare(name, mod, params, inputs, dev, repeat, number, fp16) -> tuple[float, float]:
    tex_ms, tex_out = time_ms(build(mod, params, True, fp16), inputs, dev, repeat, number)
    buf_ms, buf_out = time_ms(build(mod, params, False, fp16), inputs, dev, repeat, number)
    err = float(np.abs(tex_out - buf_out).max())
    scale = float(np.abs(buf_out).max()) or 1.0
    if err > (2e-2 if fp16 else 1e-4) * max(scale, 1.0):
        raise SystemExit(f"{name}: texture and buffer builds differ (max abs err {err:.2e})")
    print(f"  {name:16s} texture {tex_ms:9.3f} ms  buffer {buf_ms:9.3f} ms  texture/buffer {tex_ms / buf_ms:.2f}x")
    return tex_ms, buf_ms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="PoCL / CI: 32x32 model, layers at 1/8 size")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--skip", choices=["layers", "model", "fp16"], action="append", default=[])
    args = p.parse_args()
    dev = tvm.cl(0)
    if not dev.exist:
        raise SystemExit("no OpenCL device (clinfo lists none); set KILN_OPENCL_PLATFORM or install one")
    repeat = args.repeat or (3 if args.small else 10)
    print(f"device: {dev.device_name}; target {TARGET}; medians of {repeat}")
    for fp16 in ([False] if "fp16" in args.skip else [False, True]):
        kind = "float16 (fp32 accumulation)" if fp16 else "float32"
        if "layers" not in args.skip:
            print(f"ResNet-18 conv layers, {kind}:")
            layers = LAYERS[:4] if args.small else LAYERS
            for name, cin, cout, k, stride, size in layers:
                size = max(size // 8, 4) if args.small else size
                mod, params, inputs = conv_layer(cin, cout, k, stride, size)
                compare(name, mod, params, inputs, dev, repeat, 3 if args.small else 10, fp16)
        if "model" not in args.skip:
            from onnx_models import resnet18

            image = 32 if args.small else 224
            model, inputs = resnet18(image=image, classes=10 if args.small else 1000)
            mod, params = relay.frontend.from_onnx(model)
            print(f"ResNet-18 batch 1, {image}x{image}, {kind}:")
            compare("whole model", mod, params, inputs, dev, repeat, 1 if image >= 224 else 3, fp16)


if __name__ == "__main__":
    main()
