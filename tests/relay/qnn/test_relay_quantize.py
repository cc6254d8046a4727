"""relay.quantize (post-training int8): each calibration mode's scale against a numpy reference
written here, the weight scales, the skips, progress on calibration, and the accuracy of a
small CNN trained on scikit-learn's load_digits (tests/relay/qnn/data/, with its training
script): int8 top-1 on the held-out split within 1 point of float32."""

from __future__ import annotations

import logging
import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import KilnError
from kiln.relay.quantize.calibrate import activation_scale, kl_threshold, weight_scale

HERE = os.path.dirname(__file__)
RNG = np.random.default_rng(2)


# -- scales against numpy references -----------------------------------------------------------------

def _kl_reference(hist, edges, levels=128):
    """Entropy calibration written out bin by bin (no array_split, no masks)."""
    best = (np.inf, len(hist))
    for i in range(levels, len(hist) + 1):
        ref = [float(h) for h in hist[:i]]
        ref[-1] += float(sum(hist[i:]))
        cand = [0.0] * i
        for k in range(levels):
            lo, hi = _split_bounds(i, levels, k)  # the longer groups first, as np.array_split
            members = [j for j in range(lo, hi) if hist[j] > 0]
            total = float(sum(hist[lo:hi]))
            for j in members:
                cand[j] = total / len(members)
        sp, sq = sum(ref), sum(cand)
        kl, ok = 0.0, True
        for a, b in zip(ref, cand):
            if a > 0:
                if b == 0:
                    ok = False
                    break
                kl += (a / sp) * np.log((a / sp) / (b / sq))
        if ok and kl < best[0]:
            best = (kl, i)
    return float(edges[best[1]])


def _split_bounds(n, parts, k):
    size, extra = divmod(n, parts)
    lo = k * size + min(k, extra)
    return lo, lo + size + (1 if k < extra else 0)


def test_kl_divergence_on_a_fixed_histogram():
    # a fixed histogram: a bulk near zero and a long thin tail
    hist = np.zeros(512)
    hist[:100] = np.linspace(1000, 10, 100)
    hist[100:400] = 3
    hist[400:] = [1 if k % 7 == 0 else 0 for k in range(112)]
    edges = np.linspace(0, 5.12, 513)
    got = kl_threshold(hist, edges)
    assert got == _kl_reference(hist, edges)
    assert edges[128] <= got < edges[512]  # clips the tail, keeps the bulk


def test_kl_divergence_scale_of_samples():
    x = np.concatenate([RNG.standard_normal(20000), [40.0, -35.0]])  # two outliers
    got = activation_scale([x[:10000], x[10000:]], "kl_divergence")
    hist, edges = np.histogram(np.abs(x), bins=2048, range=(0, 40.0))
    assert got == pytest.approx(_kl_reference(hist, edges) / 127, rel=1e-12)
    assert got < 10 / 127  # far below max|x| / 127


def test_percentile_and_global_scale():
    x = RNG.standard_normal(10000) * 3
    assert activation_scale([x], "percentile", percentile=99.0) == pytest.approx(np.percentile(np.abs(x), 99.0) / 127)
    assert activation_scale([x], "global_scale", global_scale=4.0) == pytest.approx(4.0 / 127)


@pytest.mark.parametrize("per_channel", [False, True])
def test_weight_scales(per_channel):
    w = RNG.standard_normal((6, 3, 3, 3)).astype("float32")
    w[2] *= 10
    top = np.abs(w).reshape(6, -1).max(1) if per_channel else np.abs(w).max()
    np.testing.assert_allclose(weight_scale(w, "max", per_channel), np.float32(top / 127), rtol=1e-6)
    p2 = weight_scale(w, "power2", per_channel)
    np.testing.assert_allclose(p2, np.float32(2.0 ** np.ceil(np.log2(top)) / 128), rtol=0)
    assert np.all(np.log2(p2) == np.round(np.log2(p2)))  # powers of two
    assert np.all(p2 * 127 >= top * (127 / 128))


# -- the digits CNN ------------------------------------------------------------------------------

sys.path.insert(0, os.path.join(HERE, "data"))
sklearn = pytest.importorskip("sklearn", reason="the accuracy check trains on scikit-learn's load_digits "
                                                "(pip install scikit-learn)")


def _digits():
    import onnx
    from train_digits_cnn import data
    xtr, xte, ytr, yte = data()
    model = onnx.load(os.path.join(HERE, "data", "digits_cnn.onnx"))
    mod, params = relay.frontend.from_onnx(model, shape={"image": (len(xte), 1, 8, 8)})
    return mod, params, xtr, xte, yte


def _accuracy(mod, params, x, y):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    g = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    g.set_input(image=x)
    g.run()
    return float((g.get_output(0).numpy().argmax(1) == y).mean()), lib


@pytest.mark.parametrize("mode,weights", [("kl_divergence", "max"), ("percentile", "power2"),
                                          ("global_scale", "max")])
def test_digits_int8_accuracy_within_one_point(mode, weights, caplog):
    mod, params, xtr, xte, yte = _digits()
    n = len(xte)
    float_acc, _ = _accuracy(mod, params, xte, yte)
    assert float_acc > 0.95  # the committed model is trained
    calib = [{"image": xtr[i:i + n]} for i in (0, n)]
    with caplog.at_level(logging.INFO, logger="kiln.relay.quantize"):
        with relay.quantize.qconfig(calibrate_mode=mode, weight_scale=weights, skip_conv_layers=[],
                                    skip_dense_layer=False, per_channel=True, global_scale=4.0):
            qmod = relay.quantize.quantize(mod, params, dataset=calib)
        int8_acc, lib = _accuracy(qmod, None, xte, yte)
    print(f"digits {mode}/{weights}: float32 {float_acc:.4f}, int8 {int8_acc:.4f}")
    assert int8_acc >= float_acc - 0.01
    from qnn_run import anchor_ops
    ops = anchor_ops(lib)
    assert len(ops) == 3 and all(set(i) <= {"int8", "uint8"} and o == "int32" for _, i, o in ops), ops
    if mode != "global_scale":
        assert any("calibration batch 2/2" in r.getMessage() for r in caplog.records)


def test_skips_leave_layers_float():
    mod, params, xtr, xte, yte = _digits()
    with relay.quantize.qconfig(calibrate_mode="global_scale", skip_conv_layers=[0], skip_dense_layer=True):
        qmod = relay.quantize.quantize(mod, params)
    text = str(qmod["main"])
    assert text.count("qnn.quantize") == 1  # only the second conv's input


def test_bad_settings_and_missing_dataset():
    with pytest.raises(KilnError, match="calibrate_mode='entropy'"):
        relay.quantize.qconfig(calibrate_mode="entropy")
    with pytest.raises(KilnError, match="unknown setting"):
        relay.quantize.qconfig(nbits=4)
    mod, params, *_ = _digits()
    with relay.quantize.qconfig(calibrate_mode="kl_divergence", skip_conv_layers=[]):
        with pytest.raises(KilnError, match="needs a calibration dataset"):
            relay.quantize.quantize(mod, params)
