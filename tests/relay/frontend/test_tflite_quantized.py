"""Quantized TFLite models imported as integer graphs, against TFLite's own kernels (ai-edge-litert,
builtin kernels without XNNPACK): one op at a time with random scales and zero points (int8,
uint8, int16x8), a MobileNetV2 (int8, built for llvm), and the errors for bad quantization parameters.

Exact where TFLite's arithmetic is fixed code (ADD, MUL, tables, pools, SOFTMAX, int16x8
convolutions; docs/quantization.md, "Importing quantized TFLite models"). The 8-bit convolutions,
FULLY_CONNECTED and MEAN round as TFLite's SIMD kernels (ruy's GEMM, the depthwise and MEAN
loops) do on x86, which ruy calls not bit-exact-normative: kiln gives the same integers on the
x86 hosts checked, and the tests allow one step in at most 1% of the values (a kernel that rounds
ties differently differs that rarely). Networks: within one step; int16 MEAN: within one step.
"""

import re

import numpy as np
import pytest

pytest.importorskip("tflite", reason="the TFLite frontend needs the tflite package (pip install tflite)")
pytest.importorskip("ai_edge_litert", reason="TFLite reference outputs need ai-edge-litert (pip install ai-edge-litert)")

import tflite_builder as TB  # noqa: E402
from frontend_run import run_built, run_reference  # noqa: E402

from kiln import relay  # noqa: E402
from kiln.relay.frontend.tflite import importer as tflite_importer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Warning. Enabling `experimental_preserve_all_tensors")

EXACT_INT8 = ["conv1", "conv3", "dw", "fc", "add", "sub", "mul", "avgpool", "maxpool", "softmax", "LOGISTIC", "TANH",
              "HARD_SWISH", "RELU", "RELU6", "mean"]
EXACT_INT16 = ["conv1", "conv3", "dw", "fc", "add", "sub", "mul", "avgpool", "maxpool"]


def _steps(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    return np.abs(got.astype(np.int64) - want.astype(np.int64))


SIMD_ROUNDED = {"conv1", "conv3", "dw", "fc", "mean"}  # 8-bit: TFLite's SIMD kernels' rounding


def _assert_matches(d, kind, dtype, bound=None, where=""):
    """Equal; for the SIMD-rounded 8-bit ops one step in at most 1% of the values (module docstring)."""
    if bound is None and dtype != "int16" and kind in SIMD_ROUNDED:
        assert d.max() <= 1 and (d > 0).mean() <= 0.01, f"{kind} {dtype}{where}: {int((d > 0).sum())} of " \
            f"{d.size} values differ, max {d.max()}"
        return
    assert d.max() <= (bound or 0), f"{kind} {dtype}{where}: {int((d > 0).sum())} values differ, max {d.max()}"


def _check_op(kind, dtype, bound=None, seeds=(0, 1), channels=16):
    for seed in seeds:
        model, names = TB.single_op(kind, dtype, seed, channels)
        mod, params = relay.frontend.from_tflite(model)
        for t in range(2):
            feed = TB.random_feed(names, dtype, 100 * seed + t, channels)
            d = _steps(run_reference(mod, params, feed)[0], TB.run_tflite(model, feed)[0])
            _assert_matches(d, kind, dtype, bound, f" seed {seed}")


@pytest.mark.parametrize("kind", EXACT_INT8)
def test_int8_op_equals_tflite(kind):
    _check_op(kind, "int8")


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_mean_of_channels_beyond_a_multiple_of_16_equals_tflite(dtype):
    """TFLite's 8-bit MEAN rescales 16 channels at a time in SIMD and the rest one by one, with
    different roundings; 40 channels have both."""
    _check_op("mean", dtype, channels=40)


@pytest.mark.parametrize("kind", EXACT_INT8)
def test_uint8_op_equals_tflite(kind):
    """The older scheme: uint8 activations, uint8 weights with a non-zero zero point, per tensor."""
    _check_op(kind, "uint8", seeds=(0,))


@pytest.mark.parametrize("kind", EXACT_INT16 + ["mean"])
def test_int16x8_op_equals_tflite(kind):
    _check_op(kind, "int16", 1 if kind == "mean" else None)


@pytest.mark.parametrize("kind, dtype", [("dw", "int8"), ("conv3", "int16")])
def test_built_for_llvm_equals_tflite(kind, dtype):
    """relay.build lowers the GEMM and int16x8 rescales to the same integers."""
    model, names = TB.single_op(kind, dtype, 3)
    mod, params = relay.frontend.from_tflite(model)
    feed = TB.random_feed(names, dtype, 3)
    _assert_matches(_steps(run_built(mod, params, feed)[0], TB.run_tflite(model, feed)[0]), kind, dtype)


@pytest.mark.parametrize("kind", ["conv1", "dw", "fc"])
def test_single_rounding_within_one_step(kind):
    """from_tflite(exact_rounding=False): one rounding per rescale (the int8 kernels' epilogue),
    one step at most from TFLite's two; built for llvm (the CPU int8 kernels where the host has them)."""
    model, names = TB.single_op(kind, "int8", 2)
    mod, params = relay.frontend.from_tflite(model, exact_rounding=False)
    assert mod["main"].astext().count("qnn.requantize") == 1
    feed = TB.random_feed(names, "int8", 2)
    assert _steps(run_built(mod, params, feed)[0], TB.run_tflite(model, feed)[0]).max() <= 1


def test_int8_graph_is_integer():
    """A convolution is a qnn.conv2d on the int8 tensors: no float op, no dequantize."""
    model, _ = TB.single_op("conv3", "int8", 0)
    text = relay.frontend.from_tflite(model)[0]["main"].astext()
    assert "qnn.conv2d" in text and "nn.conv2d(" not in text.replace("qnn.conv2d(", "")
    assert "qnn.dequantize(" not in text and "float32]" not in text  # no float tensor anywhere


@pytest.fixture(scope="module")
def mobilenet_int8():
    kw = dict(image=16, width=0.35, classes=16, blocks=TB.V2_BLOCKS[:2])
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((1, 16, 16, 3)).astype("float32") for _ in range(4)]
    return TB.mobilenet_v2(TB.calibrate(TB.mobilenet_v2(**kw), calib), **kw)


def _mobilenet_check(model, run):
    mod, params = relay.frontend.from_tflite(model)
    text = mod["main"].astext()
    assert text.count("layout_transform") <= 2, "the convolutions should stay NCHW between each other"
    x = np.random.default_rng(5).standard_normal((1, 16, 16, 3)).astype("float32")
    want = TB.run_tflite(model, {"input": x})
    for g, w in zip(run(mod, params, {"input": x}), want):
        assert _steps(g, w).max() <= 1  # the same integers on the x86 hosts checked


def test_mobilenet_v2_int8_matches_tflite(mobilenet_int8):
    _mobilenet_check(mobilenet_int8, run_reference)


@pytest.mark.heavy
def test_mobilenet_v2_int8_built_for_llvm(mobilenet_int8):
    _mobilenet_check(mobilenet_int8, run_built)


def test_mobilenet_v2_int8_stays_in_the_int8_kernels_layout_on_x86(mobilenet_int8):
    """On x86 the int8 kernels keep the network in their blocked layout: TFLite's activation
    clamps, its ADDs (three requantizes and an add) and qnn.Legalize's int8 -> uint8 shift before
    each conv stay blocked and fuse into the kernels (relay/qnn/cpu_int8.py), so layout_transform
    is left at the input and the head only, and the ADD runs in the projection conv's kernel;
    the input QUANTIZE is one kernel (quantize.round_away's tree). The output is the builtin
    kernels' exactly (the two-rounding rescale fused: rounding GEMM)."""
    import kiln as tvm
    from kiln.contrib import graph_executor
    from kiln.relay.qnn.cpu_int8 import x86_plan

    if x86_plan(tvm.target.Target("llvm")) is None:
        pytest.skip("the host is not an x86 CPU with AVX2: no CPU int8 kernels")
    mod, params = relay.frontend.from_tflite(mobilenet_int8)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    text = lib.ir_mod["main"].astext()
    kernels = text.split("fn (")[1:]
    assert text.count("layout_transform(") <= 4, text.count("layout_transform(")
    assert any("nn.contrib_conv2d_int8" in k and "right_shift" in k for k in kernels), "the ADD should fuse"
    # the input QUANTIZE (round_away of x / s) is one kernel, not a kernel per divide, abs, floor
    ops = [set(re.findall(r"\b([a-z_][a-z0-9_.]*)\(", k.split("};")[0])) for k in kernels]
    assert all(o and not o <= {"divide", "abs", "floor"} for o in ops), ops
    x = np.random.default_rng(5).standard_normal((1, 16, 16, 3)).astype("float32")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(input=x)
    m.run()
    for i, w in enumerate(TB.run_tflite(mobilenet_int8, {"input": x})):
        assert _steps(m.get_output(i).numpy(), w).max() == 0


def _bad_model(scale=0.05, zero_point=3, w_scales=(0.01, 0.02, 0.03)):
    m = TB.FlatModel()
    x = m.tensor("x", (1, 4, 4, 2), "int8", quant=([scale], [zero_point], 0))
    w = m.tensor("w", (3, 1, 1, 2), "int8", np.ones((3, 1, 1, 2)), (list(w_scales), [0] * len(w_scales), 0))
    y = m.tensor("y", (1, 4, 4, 3), "int8", quant=([0.02], [0], 0))
    m.op("CONV_2D", [x, w, -1], [y], "Conv2DOptions", Padding=TB.VALID, StrideW=1, StrideH=1,
         FusedActivationFunction=TB.NONE, DilationWFactor=1, DilationHFactor=1)
    return m.finish([x], [y])


@pytest.mark.parametrize("kw, message", [
    (dict(scale=0.0), r"tensor 0 \('x'\): scale \[0.0\] must be finite and > 0"),
    (dict(scale=-0.5), r"tensor 0 \('x'\): scale \[-0.5\] must be finite and > 0"),
    (dict(zero_point=200), r"tensor 0 \('x'\): zero point \[200\] is outside int8 \[-128, 127\]"),
    (dict(w_scales=(0.01, 0.02)), r"tensor 1 \('w'\): 2 scales and 2 zero points along axis 0 do not fit shape"),
])
def test_bad_quantization_parameters_are_one_error(kw, message):
    with pytest.raises(tflite_importer.ImportError_, match=message):
        relay.frontend.from_tflite(_bad_model(**kw))


def test_unconverted_quantized_op_takes_the_float_route(caplog):
    """A quantized op kiln has no integer form of (LOGISTIC on int16: tables are 8-bit) is computed
    in float between a dequantize and a quantize, and named in one log line."""
    model, names = TB.single_op("LOGISTIC", "int16", 0)
    with caplog.at_level("INFO", logger="kiln.relay.frontend.tflite"):
        mod, params = relay.frontend.from_tflite(model)
    assert "computed in float" in caplog.text and "LOGISTIC x1" in caplog.text
    assert "qnn.dequantize" in mod["main"].astext()


def test_int8_weights_of_a_float_model_are_dequantized():
    """Weight-only quantization (int8 filter, DEQUANTIZE, float conv): the float path, as before."""
    rng = np.random.default_rng(0)
    m = TB.FlatModel()
    x = m.tensor("x", (1, 6, 6, 4))
    w = m.tensor("w", (8, 3, 3, 4), "int8", rng.integers(-127, 128, (8, 3, 3, 4)),
                 (rng.uniform(0.01, 0.02, 8).astype("float32"), np.zeros(8, "int64"), 0))
    wf = m.tensor("wf", (8, 3, 3, 4))
    m.op("DEQUANTIZE", [w], [wf])
    b = m.tensor("b", (8,), data=rng.standard_normal(8).astype("float32"))
    y = m.tensor("y", (1, 6, 6, 8))
    m.op("CONV_2D", [x, wf, b], [y], "Conv2DOptions", Padding=TB.SAME, StrideW=1, StrideH=1,
         FusedActivationFunction=TB.NONE, DilationWFactor=1, DilationHFactor=1)
    model = m.finish([x], [y])
    mod, params = relay.frontend.from_tflite(model)
    xv = rng.standard_normal((1, 6, 6, 4)).astype("float32")
    np.testing.assert_allclose(run_reference(mod, params, {"x": xv})[0], TB.run_tflite(model, {"x": xv})[0],
                               rtol=1e-5, atol=1e-5)
