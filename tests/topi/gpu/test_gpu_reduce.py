"""softmax, layer norm, reductions, pooling and injective chains on OpenCL against numpy."""

import numpy as np
import pytest
from gpu_runner import TARGETS, TOL, package, rand, run

from kiln import topi
from kiln.topi.testing import layer_norm_python, log_softmax_python, pool2d_python, softmax_python

pytestmark = pytest.mark.opencl


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(4, 1000), (2, 3, 128), (6, 10)], ids=["4x1000", "2x3x128", "short-rows"])
def test_softmax(target, shape):
    rng = np.random.default_rng(0)
    x = rand(rng, *shape) * 4
    pkg = package(target)
    got = run(target, lambda a: pkg.softmax(a, -1), pkg.schedule_softmax, [x])
    np.testing.assert_allclose(got, softmax_python(x, -1), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_inner_axis_and_log_softmax(target):
    rng = np.random.default_rng(1)
    x = rand(rng, 2, 8, 5)
    pkg = package(target)
    got = run(target, lambda a: pkg.softmax(a, 1), pkg.schedule_softmax, [x])
    np.testing.assert_allclose(got, softmax_python(x, 1), rtol=1e-4, atol=1e-6)
    y = rand(rng, 3, 256)
    got = run(target, lambda a: pkg.log_softmax(a, -1), pkg.schedule_softmax, [y])
    np.testing.assert_allclose(got, log_softmax_python(y, -1), **TOL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(16, 64), (2, 8, 768), (5, 12)], ids=["16x64", "2x8x768", "short"])
def test_layer_norm(target, shape):
    rng = np.random.default_rng(2)
    x, g, b = rand(rng, *shape), rand(rng, shape[-1]), rand(rng, shape[-1])
    pkg = package(target)
    got = run(target, lambda a, gg, bb: pkg.layer_norm(a, gg, bb, -1, 1e-5), pkg.schedule_layer_norm, [x, g, b])
    np.testing.assert_allclose(got, layer_norm_python(x, g, b, -1, 1e-5), **TOL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", ["row_sum_wide", "row_max_long", "global_sum", "scalar_sum", "mean_relu"])
def test_reduce(target, case):
    rng = np.random.default_rng(3)
    pkg = package(target)
    if case == "row_sum_wide":  # many outputs, short rows: one work-item each
        x = rand(rng, 5000, 7)
        got = run(target, lambda a: topi.sum(a, 1), pkg.schedule_reduce, [x])
        want = x.sum(1)
    elif case == "row_max_long":  # few outputs, long rows: a cross-thread reduction per row
        x = rand(rng, 3, 4096)
        got = run(target, lambda a: topi.max(a, 1), pkg.schedule_reduce, [x])
        want = x.max(1)
    elif case == "global_sum":
        x = rand(rng, 64, 32)
        got = run(target, lambda a: topi.sum(a, (0, 1), keepdims=True), pkg.schedule_reduce, [x])
        want = x.sum(keepdims=True)
    elif case == "scalar_sum":  # a 0-d output: the whole reduction in one work-group
        x = rand(rng, 64, 37)
        got = run(target, lambda a: topi.sum(a), pkg.schedule_reduce, [x])
        want = x.sum()
    else:
        x = rand(rng, 4, 512)
        got = run(target, lambda a: topi.nn.relu(topi.mean(a, 1)), pkg.schedule_reduce, [x])
        want = np.maximum(x.mean(1), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


POOLS = [  # (kind, kernel, stride, padding, ceil)
    ("max", (3, 3), (2, 2), (1, 1, 1, 1), False),
    ("avg", (2, 2), (2, 2), (0, 0, 0, 0), False),
    ("avg", (3, 3), (1, 1), (1, 1, 1, 1), False),
    ("max", (3, 3), (2, 2), (0, 0, 0, 0), True),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pool", POOLS, ids=[f"{p[0]}{p[1][0]}s{p[2][0]}{'c' if p[4] else ''}" for p in POOLS])
def test_pool2d(target, pool):
    kind, kernel, stride, padding, ceil = pool
    rng = np.random.default_rng(4)
    x = rand(rng, 1, 8, 15, 15)
    pkg = package(target)
    got = run(target, lambda a: pkg.pool2d(a, kernel, stride, (1, 1), padding, kind, ceil, "NCHW", True),
              pkg.schedule_pool, [x])
    want = pool2d_python(x, kernel, stride, padding, kind, ceil_mode=ceil, count_include_pad=True)
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_global_pool(target, kind):
    rng = np.random.default_rng(5)
    x = rand(rng, 2, 16, 7, 7)
    got = run(target, lambda a: topi.nn.global_pool(a, kind, "NCHW"), package(target).schedule_global_pool, [x])
    want = x.mean((2, 3), keepdims=True) if kind == "avg" else x.max((2, 3), keepdims=True)
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("target", TARGETS)
def test_injective_chain_and_resize(target):
    rng = np.random.default_rng(6)
    x, y = rand(rng, 3, 5, 7), rand(rng, 5, 1)
    pkg = package(target)
    got = run(target, lambda a, b: topi.transpose(topi.tanh(topi.add(a, b)), (2, 0, 1)), pkg.schedule_injective,
              [x, y])
    np.testing.assert_allclose(got, np.tanh(x + y).transpose(2, 0, 1), **TOL)
    img = rand(rng, 1, 3, 6, 5)
    got = run(target, lambda a: topi.image.resize2d(a, (12, 10), "NCHW", "linear", "half_pixel"),
              pkg.schedule_resize, [img])
    from kiln.topi.testing import resize2d_python
    np.testing.assert_allclose(got, resize2d_python(img, (12, 10), "NCHW", "linear", "half_pixel"), **TOL)
