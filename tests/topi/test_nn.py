"""Pooling, softmax, normalizations and activations against numpy, with the x86 schedules."""

import math

import numpy as np
import pytest

from kiln import te, topi
from kiln.topi import testing


@pytest.mark.parametrize("ptype,k,s,p,ceil,cip,layout", [
    ("max", 3, 2, (1, 1, 1, 1), False, True, "NCHW"),
    ("avg", 3, 2, (1, 1, 1, 1), True, False, "NCHW"),
    ("avg", 2, 2, (0, 0, 1, 1), False, True, "NHWC"),
    ("max", 3, 1, (0, 1, 2, 0), True, True, "NHWC"),
])
@pytest.mark.parametrize("compute", [topi.nn.pool2d, topi.x86.pool2d])
def test_pool2d(runner, ptype, k, s, p, ceil, cip, layout, compute):
    shape = (2, 5, 13, 12) if layout == "NCHW" else (2, 13, 12, 5)
    A = te.placeholder(shape, name="data")
    out = compute(A, (k, k), (s, s), (1, 1), p, ptype, ceil, layout, cip)
    a = runner.rand(*shape)
    got = runner.run(topi.x86.schedule_pool, out, [A], [a])
    ref = testing.pool2d_python(a, (k, k), (s, s), p, ptype, ceil_mode=ceil, count_include_pad=cip, layout=layout)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ptype", ["max", "avg"])
@pytest.mark.parametrize("compute", [topi.nn.pool2d, topi.x86.pool2d])
def test_pool2d_dilated_ceil_mode(runner, ptype, compute):
    # The last window (ceil_mode) runs past the input; with dilation 2 its taps skip the last
    # pixel, so that pixel must not leak into the result through an edge clamp.
    A = te.placeholder((1, 2, 32, 32), name="data")
    out = compute(A, (5, 5), (3, 3), (2, 2), (0, 0, 0, 0), ptype, True, "NCHW", True)
    a = runner.rand(1, 2, 32, 32)
    got = runner.run(topi.x86.schedule_pool, out, [A], [a])
    ref = testing.pool2d_python(a, (5, 5), (3, 3), (0, 0, 0, 0), ptype, (2, 2), ceil_mode=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ptype", ["avg", "max"])
def test_global_and_adaptive_pool(runner, ptype):
    A = te.placeholder((1, 19, 7, 9), name="data")
    a = runner.rand(1, 19, 7, 9)
    got = runner.run(topi.x86.schedule_adaptive_pool, topi.nn.global_pool(A, ptype), [A], [a])
    ref = a.max(axis=(2, 3), keepdims=True) if ptype == "max" else a.mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    got = runner.run(topi.x86.schedule_adaptive_pool, topi.nn.adaptive_pool(A, (3, 4), ptype), [A], [a])
    np.testing.assert_allclose(got, testing.adaptive_pool_python(a, (3, 4), ptype), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,axis", [((4, 1000), -1), ((2, 7, 5, 3), 1), ((3, 2, 37), 2), ((2, 5), 1), ((1000,), 0)])
@pytest.mark.parametrize("ns", [topi.nn, topi.x86])
def test_softmax_and_log_softmax(runner, shape, axis, ns):
    A = te.placeholder(shape, name="x")
    a = runner.rand(*shape) * 10
    got = runner.run(topi.x86.schedule_softmax, ns.softmax(A, axis), [A], [a])
    np.testing.assert_allclose(got, testing.softmax_python(a, axis), rtol=1e-5, atol=1e-6)
    got = runner.run(topi.x86.schedule_softmax, ns.log_softmax(A, axis), [A], [a])
    np.testing.assert_allclose(got, testing.log_softmax_python(a, axis), rtol=1e-5, atol=1e-5)


def test_softmax_rows_with_nan_and_inf(runner):
    """The x86 row maximum is a select (not the NaN-propagating te.max): a NaN anywhere in a row
    still makes that whole row NaN, as numpy's does; an -inf entry gets weight 0; other rows are
    untouched."""
    A = te.placeholder((3, 40), name="x")
    a = runner.rand(3, 40) * 10
    a[0, 5], a[1, 39], a[2, 0] = np.nan, np.nan, -np.inf
    got = runner.run(topi.x86.schedule_softmax, topi.x86.softmax(A, -1), [A], [a])
    want = testing.softmax_python(a.astype(np.float64), -1)
    assert np.isnan(got[:2]).all()
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ns", [topi.nn, topi.x86])
@pytest.mark.parametrize("width", [48, 7, 37])
def test_layer_norm(runner, ns, width):
    A = te.placeholder((3, 5, width), name="x")
    G = te.placeholder((width,), name="gamma")
    B = te.placeholder((width,), name="beta")
    a, g, b = runner.rand(3, 5, width) + 3, runner.rand(width), runner.rand(width)
    got = runner.run(topi.x86.schedule_layer_norm, ns.layer_norm(A, G, B, -1, 1e-5), [A, G, B], [a, g, b])
    np.testing.assert_allclose(got, testing.layer_norm_python(a, g, b, -1, 1e-5), rtol=1e-4, atol=1e-4)


def test_row_kernels_take_a_single_1d_row(runner):
    # One row has no row loop to parallelize, but still gets the vector row reductions (the
    # row compute and schedule, not a fallback to the generic serial one).
    A, G, B = (te.placeholder((1000,), name=n) for n in ("x", "gamma", "beta"))
    a, g, b = runner.rand(1000) * 10, runner.rand(1000), runner.rand(1000)
    sm, ln = topi.x86.softmax(A, 0), topi.x86.layer_norm(A, G, B, -1, 1e-5)
    assert sm.op.tag == "softmax_rows" and ln.op.tag == "layer_norm_rows"
    got = runner.run(topi.x86.schedule_softmax, sm, [A], [a])
    np.testing.assert_allclose(got, testing.softmax_python(a, 0), rtol=1e-5, atol=1e-6)
    got = runner.run(topi.x86.schedule_layer_norm, ln, [A, G, B], [a, g, b])
    np.testing.assert_allclose(got, testing.layer_norm_python(a, g, b, -1, 1e-5), rtol=1e-4, atol=1e-4)


def test_batch_norm_inference(runner):
    A = te.placeholder((2, 3, 4, 5), name="x")
    ts = [te.placeholder((3,), name=n) for n in ("gamma", "beta", "mean", "var")]
    a = runner.rand(2, 3, 4, 5)
    g, b, m = runner.rand(3), runner.rand(3), runner.rand(3)
    v = np.abs(runner.rand(3)) + 0.5
    got = runner.run(topi.x86.schedule_injective, topi.nn.batch_norm_inference(A, *ts), [A, *ts], [a, g, b, m, v])
    sh = (1, 3, 1, 1)
    ref = (a - m.reshape(sh)) / np.sqrt(v.reshape(sh) + 1e-5) * g.reshape(sh) + b.reshape(sh)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def _erf(x):
    return np.vectorize(math.erf)(x).astype(x.dtype)


@pytest.mark.parametrize("fn,ref", [
    (topi.nn.relu, lambda a: np.maximum(a, 0)),
    (lambda x: topi.nn.leaky_relu(x, 0.1), lambda a: np.where(a > 0, a, 0.1 * a)),
    (lambda x: topi.nn.clip(x, -0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7)),
    (topi.nn.gelu, lambda a: 0.5 * a * (1 + _erf(a / np.sqrt(2)))),
    (topi.nn.hard_swish, lambda a: a * np.clip(a + 3, 0, 6) / 6),
    (topi.nn.softplus, lambda a: np.log1p(np.exp(a))),
])
def test_activations(runner, fn, ref):
    A = te.placeholder((3, 37), name="x")
    a = runner.rand(3, 37) * 3
    np.testing.assert_allclose(runner.run(topi.x86.schedule_injective, fn(A), [A], [a]), ref(a), rtol=1e-5, atol=1e-5)


def test_prelu(runner):
    A = te.placeholder((2, 4, 5), name="x")
    S = te.placeholder((4,), name="slope")
    a, sl = runner.rand(2, 4, 5), runner.rand(4)
    got = runner.run(topi.x86.schedule_injective, topi.nn.prelu(A, S, 1), [A, S], [a, sl])
    np.testing.assert_allclose(got, np.where(a > 0, a, a * sl.reshape(1, 4, 1)), rtol=1e-6)


@pytest.mark.parametrize("name,ref", [
    ("fast_exp", np.exp), ("fast_tanh", np.tanh), ("fast_sigmoid", lambda a: 1 / (1 + np.exp(-a))),
    ("fast_erf", lambda a: _erf(a)),
])
def test_fast_math_is_accurate(runner, name, ref):
    a = np.concatenate([runner.rand(2000) * 4, runner.rand(200) * 1e-3, np.array([0.0, 80.0, -80.0], "float32")])
    A = te.placeholder(a.shape, name="x")
    got = runner.run(topi.x86.schedule_injective, getattr(topi, name)(A), [A], [a.astype("float32")])
    want = ref(a.astype("float64"))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-30 if name != "fast_erf" else 1e-7)


def test_nested_fast_math_builds_in_bounded_time():
    """tanh of a sigmoid of an erf fused into one kernel: each polynomial reads its input once
    (bound to a variable), so the kernel's expression does not grow as the product of the reads
    (it hung relay.build for tanh(sigmoid(x)))."""
    import kiln as tvm
    from kiln import relay
    from kiln.contrib import graph_executor

    x = relay.var("x", shape=(2, 37), dtype="float32")
    body = relay.tanh(relay.sigmoid(relay.erf(relay.tanh(relay.sigmoid(x)))))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(relay.Function([x], body)), target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    a = np.linspace(-6, 6, 74, dtype="float32").reshape(2, 37)
    m.set_input("x", a)
    m.run()
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    want = np.tanh(sig(_erf(np.tanh(sig(a.astype("float64"))))))
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-5, atol=1e-6)


def test_relu_and_clip_keep_nan(runner):
    A = te.placeholder((4,), name="x")
    a = np.array([np.nan, -1.0, 0.5, 9.0], dtype="float32")
    got = runner.run(topi.x86.schedule_injective, topi.nn.relu(A), [A], [a])
    np.testing.assert_array_equal(got, np.maximum(a, 0))
    got = runner.run(topi.x86.schedule_injective, topi.nn.clip(A, 0.0, 6.0), [A], [a])
    np.testing.assert_array_equal(got, np.clip(a, 0.0, 6.0))
