"""from_tflite on MobileNet-like flatbuffers written here (tflite_builder.py) vs TFLite's own
kernels run by the ai-edge-litert interpreter: float within 1e-4, int8 and uint8 within one
quantization step (reference executor and relay.build for llvm; the same integers on the x86
hosts checked, but TFLite's SIMD convolution kernels do not promise their rounding: see
test_tflite_quantized.py)."""

import numpy as np
import pytest

pytest.importorskip("tflite", reason="the TFLite frontend needs the tflite package (pip install tflite)")
pytest.importorskip("ai_edge_litert", reason="TFLite reference outputs need ai-edge-litert (pip install ai-edge-litert)")

import tflite_builder as TB  # noqa: E402
from frontend_run import run_built, run_reference  # noqa: E402
from helpers.ranking import assert_ranking_kept  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)
pytestmark = pytest.mark.filterwarnings("ignore:Warning. Enabling `experimental_preserve_all_tensors")


def _inputs(seed, n=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 16, 16, 3)).astype("float32") for _ in range(n)]


@pytest.fixture(scope="module")
def int8_model():
    return TB.mobilenet_like(TB.calibrate(TB.mobilenet_like(), _inputs(0, 8)))


def test_float_mobilenet_like_matches_tflite():
    model = TB.mobilenet_like()
    mod, params = relay.frontend.from_tflite(model)
    assert mod["main"].params[0].checked_type == relay.TensorType((1, 16, 16, 3), "float32")
    (x,) = _inputs(1)
    want = TB.run_tflite(model, {"input": x})
    for got in (run_reference(mod, params, {"input": x}), run_built(mod, params, {"input": x})):
        assert len(got) == 2
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, **TOL)


def _check_int8(got, want, prob_scale=1 / 256):
    logits, prob = got
    assert logits.dtype == np.int8 and prob.dtype == np.float32
    assert np.abs(logits.astype(int) - want[0].astype(int)).max() <= 1  # one quantization step
    assert np.abs(prob - want[1]).max() <= prob_scale + 1e-6
    # the top class, wherever one quantization step on each logit cannot explain a swap
    assert_ranking_kept(logits, want[0], bound=1, top=1)


def test_int8_mobilenet_like_within_one_step_of_tflite(int8_model):
    mod, params = relay.frontend.from_tflite(int8_model)
    for x in _inputs(100, 6):
        _check_int8(run_reference(mod, params, {"input": x}), TB.run_tflite(int8_model, {"input": x}))


def test_int8_mobilenet_like_built_for_llvm(int8_model, tmp_path):
    path = tmp_path / "mobilenet_int8.tflite"
    path.write_bytes(int8_model)
    mod, params = relay.frontend.from_tflite(str(path))  # by path too
    (x,) = _inputs(200)
    _check_int8(run_built(mod, params, {"input": x}), TB.run_tflite(int8_model, {"input": x}))


def test_int8_graph_input_and_output_keep_their_dtype():
    """A model that takes and returns int8 (no QUANTIZE/DEQUANTIZE): the relay function does too."""
    m = TB.FlatModel()
    q = ([0.05], [3], 0)
    x = m.tensor("x", (1, 4, 4, 2), "int8", quant=q)
    w = m.tensor("w", (3, 1, 1, 2), "int8", np.array([[[[20, -7]]], [[[5, 9]]], [[[-30, 2]]]]),
                 ([0.01, 0.02, 0.03], [0, 0, 0], 0))
    b = m.tensor("b", (3,), "int32", np.array([40, -80, 10]), ([0.0005, 0.001, 0.0015], [0, 0, 0], 0))
    y = m.tensor("y", (1, 4, 4, 3), "int8", quant=([0.02], [-5], 0))
    m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=TB.VALID, StrideW=1, StrideH=1,
         FusedActivationFunction=TB.RELU, DilationWFactor=1, DilationHFactor=1)
    model = m.finish([x], [y])
    mod, params = relay.frontend.from_tflite(model)
    assert mod["main"].params[0].checked_type.dtype == "int8"
    xv = np.random.default_rng(3).integers(-128, 128, (1, 4, 4, 2)).astype("int8")
    got = run_reference(mod, params, {"x": xv})[0]
    want = TB.run_tflite(model, {"x": xv})[0]
    assert got.dtype == np.int8
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x00" * 32)
    with pytest.raises(tvm.KilnError, match="is not a TFLite flatbuffer"):
        relay.frontend.from_tflite(str(bad))
    with pytest.raises(tvm.KilnError, match=r"shape_dict names 'data', but the model's inputs are \['input'\]"):
        relay.frontend.from_tflite(TB.mobilenet_like(), {"data": (1, 16, 16, 3)})
    m = TB.FlatModel()
    x = m.tensor("x", (1, 4))
    y = m.tensor("y", (1, 4))
    z = m.tensor("z", (1, 4))
    m.op("CUMSUM", [x], [y])
    m.op("FLOOR", [y], [z])
    with pytest.raises(tvm.KilnError, match=r"2 unsupported operator\(s\): CUMSUM \(x1\), FLOOR \(x1\)"):
        relay.frontend.from_tflite(m.finish([x], [z]))


def test_uint8_model_within_one_step():
    """The older uint8 scheme: asymmetric uint8 activations and weights (non-zero weight zero
    points), per-tensor scales; CONV_2D + AVERAGE_POOL_2D + RESHAPE + FULLY_CONNECTED + SOFTMAX."""
    rng = np.random.default_rng(8)
    m = TB.FlatModel()
    x = m.tensor("x", (1, 6, 6, 2), "uint8", quant=([1 / 255], [0], 0))
    w = m.tensor("w", (4, 3, 3, 2), "uint8", rng.integers(0, 256, (4, 3, 3, 2)), ([0.004], [131], 0))
    b = m.tensor("b", (4,), "int32", rng.integers(-200, 200, 4), ([0.004 / 255], [0], 0))
    c = m.tensor("c", (1, 6, 6, 4), "uint8", quant=([0.02], [120], 0))
    m.op("CONV_2D", [x, w, b], [c], "Conv2DOptions", Padding=TB.SAME, StrideW=1, StrideH=1,
         FusedActivationFunction=TB.NONE, DilationWFactor=1, DilationHFactor=1)
    p = m.tensor("p", (1, 3, 3, 4), "uint8", quant=([0.02], [120], 0))
    m.op("AVERAGE_POOL_2D", [c], [p], "Pool2DOptions", Padding=TB.VALID, StrideW=2, StrideH=2, FilterWidth=2,
         FilterHeight=2, FusedActivationFunction=TB.NONE)
    s = m.tensor("s", (2,), "int32", np.array([1, 36]))
    r = m.tensor("r", (1, 36), "uint8", quant=([0.02], [120], 0))
    m.op("RESHAPE", [p, s], [r])
    fw = m.tensor("fw", (5, 36), "uint8", rng.integers(0, 256, (5, 36)), ([0.01], [127], 0))
    f = m.tensor("f", (1, 5), "uint8", quant=([0.05], [128], 0))
    m.op("FULLY_CONNECTED", [r, fw, -1], [f], "FullyConnectedOptions", FusedActivationFunction=TB.NONE)
    y = m.tensor("y", (1, 5), "uint8", quant=([1 / 256], [0], 0))
    m.op("SOFTMAX", [f], [y], "SoftmaxOptions", Beta=1.0)
    model = m.finish([x], [f, y])
    mod, params = relay.frontend.from_tflite(model)
    for seed in range(4):
        xv = np.random.default_rng(seed).integers(0, 256, (1, 6, 6, 2)).astype("uint8")
        want = TB.run_tflite(model, {"x": xv})
        for got, w in zip(run_reference(mod, params, {"x": xv}), want):
            assert got.dtype == np.uint8
            assert np.abs(got.astype(int) - w.astype(int)).max() <= 1


def _misc_ops(q=None):
    """SUB, MUL (fused RELU), MAXIMUM, MINIMUM, LOGISTIC, TANH, HARD_SWISH, RELU_N1_TO_1, RELU,
    TRANSPOSE, PADV2, SQUEEZE and FULLY_CONNECTED with keep_num_dims. ``q``: int8 parameters
    per tensor name ((scale, zero_point)); None builds the float model."""
    m = TB.FlatModel()
    rng = np.random.default_rng(11)

    def act(name, shape, fixed=None):
        if q is None:
            return m.tensor(name, shape)
        s, z = fixed or q[name]
        return m.tensor(name, shape, "int8", quant=([s], [z], 0))

    # TFLite's int8 MAXIMUM/MINIMUM compare the stored integers, so their inputs and output
    # share one scale (as TFLite's converter writes them): y and both results take x's
    x = act("x", (1, 2, 3, 4))
    y = act("y", (1, 2, 3, 4), q and q["x"])
    names = {}
    for name, kind, ins, extra, fixed in [
            ("sub", "SUB", [x, y], dict(options="SubOptions", FusedActivationFunction=TB.NONE), None),
            ("mul", "MUL", [x, y], dict(options="MulOptions", FusedActivationFunction=TB.RELU), None),
            ("max", "MAXIMUM", [x, y], {}, q and q["x"]), ("min", "MINIMUM", [x, y], {}, q and q["x"]),
            ("sig", "LOGISTIC", ["sub"], {}, (1 / 256, -128)), ("tanh", "TANH", ["sub"], {}, (1 / 128, 0)),
            ("hsw", "HARD_SWISH", ["sub"], {}, None), ("clip1", "RELU_N1_TO_1", ["max"], {}, None),
            ("relu", "RELU", ["min"], {}, None)]:
        out = act(name, (1, 2, 3, 4), fixed)
        m.op(kind, [names.get(i, i) for i in ins], [out], **extra)
        names[name] = out
    total = act("total", (1, 2, 3, 4))
    acc = names["sig"]
    for k in ("tanh", "hsw", "clip1", "relu", "mul"):
        part = act(f"acc_{k}", (1, 2, 3, 4)) if k != "mul" else total
        m.op("ADD", [acc, names[k]], [part], "AddOptions", FusedActivationFunction=TB.NONE)
        acc = part
    perm = m.tensor("perm", (4,), "int32", np.array([0, 3, 1, 2]))
    tr = act("tr", (1, 4, 2, 3), q and q["total"])
    m.op("TRANSPOSE", [total, perm], [tr])
    pads = m.tensor("pads", (4, 2), "int32", np.array([[0, 0], [0, 0], [1, 0], [0, 2]]))
    pad_value = m.tensor("pad_value", (), "float32", np.array(0.25)) if q is None else \
        m.tensor("pad_value", (), "int8", np.array(round(0.25 / q["total"][0]) + q["total"][1]), ([q["total"][0]], [q["total"][1]], 0))
    pd = act("pd", (1, 4, 3, 5), q and q["total"])
    m.op("PADV2", [tr, pads, pad_value], [pd])
    w = rng.standard_normal((3, 5)).astype("float32") * 0.5
    if q is None:
        wt = m.tensor("w", (3, 5), data=w)
    else:
        ws = np.abs(w).max() / 127
        wt = m.tensor("w", (3, 5), "int8", np.round(w / ws).astype("int8"), ([ws], [0], 0))
    fc = act("fc", (1, 4, 3, 3))
    m.op("FULLY_CONNECTED", [pd, wt, -1], [fc], "FullyConnectedOptions", FusedActivationFunction=TB.NONE,
         KeepNumDims=True)
    sq = act("sq", (4, 3, 3), q and q["fc"])
    m.op("SQUEEZE", [fc], [sq])
    return m.finish([x, y], [sq])


def test_misc_ops_float_and_int8():
    rng = np.random.default_rng(12)
    feeds = [{"x": rng.standard_normal((1, 2, 3, 4)).astype("float32") * 2,
              "y": rng.standard_normal((1, 2, 3, 4)).astype("float32") * 2} for _ in range(4)]
    model = _misc_ops()
    mod, params = relay.frontend.from_tflite(model)
    for feed in feeds:
        np.testing.assert_allclose(run_reference(mod, params, feed)[0], TB.run_tflite(model, feed)[0], **TOL)
    # int8: parameters from the ranges of the float model's tensors
    ranges = TB.calibrate(model, [feed["x"] for feed in feeds], others={"y": [f["y"] for f in feeds]})
    qmodel = _misc_ops({name: TB._asym(*r) for name, r in ranges.items()})
    qmod, qparams = relay.frontend.from_tflite(qmodel)
    for feed in feeds:
        scale, zero = TB._asym(*ranges["x"])  # x and y share x's parameters
        qfeed = {k: np.clip(np.round(v / scale) + zero, -128, 127).astype("int8") for k, v in feed.items()}
        got = run_reference(qmod, qparams, qfeed)[0]
        want = TB.run_tflite(qmodel, qfeed)[0]
        assert got.dtype == np.int8
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
