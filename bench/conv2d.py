"""conv2d fp32: kiln's default x86 schedule against onnxruntime's Conv, measured in the same run.

Two ResNet-18 layers: the 3x3 conv (1x64x56x56, 64 filters, pad 1) and a 1x1 conv (same input).
Both sides use 2 threads and take turns, each after a pause (bench/timing.py). The weights
are constants on both sides: onnxruntime packs its initializer once when the session is created,
and kiln's weight is pre-packed once (``topi.x86.conv2d.prepack_kernel``), as relay does for
parameters. Prints GFLOPS and the ratio kiln / onnxruntime (1.0 means parity, higher is better).
    python bench/conv2d.py [--repeat 7] [--threads 2] [--extra]

On a busy machine, --threads 1 gives steadier figures for both sides.
"""

import argparse
import statistics

import numpy as np

import kiln as tvm
from kiln import config, te, topi
from kiln.topi.x86 import conv2d as x86_conv2d

from timing import calls_for, interleaved  # noqa: E402

SHAPES = {
    "resnet18 3x3 1x64x56x56 -> 64": (1, 64, 56, 56, 64, 3, 1, 1),
    "1x1 1x64x56x56 -> 64": (1, 64, 56, 56, 64, 1, 1, 0),
}
EXTRA = {
    "resnet18 3x3/2 1x64x56x56 -> 128": (1, 64, 56, 56, 128, 3, 2, 1),
    "resnet18 3x3 1x256x14x14 -> 256": (1, 256, 14, 14, 256, 3, 1, 1),
    "resnet18 3x3 1x512x7x7 -> 512": (1, 512, 7, 7, 512, 3, 1, 1),
    "resnet18 7x7/2 1x3x224x224 -> 64": (1, 3, 224, 224, 64, 7, 2, 3),
}


def ort_session(shape, weight, threads):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n, c, h, w, o, k, s, p = shape
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[s, s], pads=[p] * 4, kernel_shape=[k, k])
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, o, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1])],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def bench(name, shape, repeat, threads):
    n, c, h, w, o, k, s, p = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype("float32")
    wt = rng.standard_normal((o, c, k, k)).astype("float32")
    A = te.placeholder((n, c, h, w), name="data")
    conf = x86_conv2d.config_for((n, c, h, w), (o, c, k, k), s, p, 1)
    packed = x86_conv2d.prepack_kernel(wt, conf["oc_bn"])
    W = te.placeholder(packed.shape, name="kernel_packed")
    out = topi.x86.conv2d_nchw(A, W, s, p, 1, "float32", out_channels=o)
    oshape = tuple(int(d.value) for d in out.shape)
    args = [tvm.nd.array(x), tvm.nd.array(packed), tvm.nd.empty(oshape, "float32")]
    with config.override(num_threads=threads):  # the module reads it when it is loaded (first call)
        f = tvm.build(topi.x86.schedule_conv2d_nchw([out]), [A, W, out], target="llvm", name="conv2d")
        f(*args)
    sess = ort_session(shape, wt, threads)
    ref = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(args[2].numpy(), ref, rtol=1e-3, atol=1e-3)
    flops = 2.0 * n * o * oshape[2] * oshape[3] * c * k * k
    times = interleaved({"kiln": lambda: f(*args), "ort": lambda: sess.run(None, {"x": x})},
                        repeat, calls_for(lambda: f(*args)))
    kiln_t, ort_t = times["kiln"], times["ort"]
    # Best-of and median: the best shows what each can do, the median what a noisy machine gives.
    kg, og = flops / min(kiln_t) / 1e9, flops / min(ort_t) / 1e9
    kgm, ogm = flops / statistics.median(kiln_t) / 1e9, flops / statistics.median(ort_t) / 1e9
    print(f"{name} {conf}: kiln {kg:.1f} GFLOPS | onnxruntime {og:.1f} GFLOPS | ratio {kg / og:.2f} "
          f"(medians {kgm:.1f} / {ogm:.1f}, ratio {kgm / ogm:.2f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--extra", action="store_true", help="also the other ResNet-18 layer shapes")
    args = ap.parse_args()
    shapes = dict(SHAPES, **(EXTRA if args.extra else {}))
    for name, shape in shapes.items():
        bench(name, shape, args.repeat, args.threads)


if __name__ == "__main__":
    main()
