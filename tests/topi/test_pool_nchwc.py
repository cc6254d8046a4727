"""Pooling in blocked layouts (NCHW{b}c): generic and x86 computes against numpy."""

import numpy as np
import pytest

from kiln import te, topi
from kiln.errors import ShapeError
from kiln.topi import testing


def to_blocked(x, b):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


POOL_CASES = [
    # (C, HW, kernel, stride, padding, pool_type, ceil_mode, count_include_pad, b)
    (32, 14, 3, 2, (1, 1, 1, 1), "max", False, True, 16),
    (16, 13, 3, 2, (1, 1, 1, 1), "max", True, True, 8),
    (16, 13, 3, 2, (1, 1, 1, 1), "avg", True, False, 8),
    (16, 13, 3, 2, (1, 1, 1, 1), "avg", True, True, 16),
    (32, 10, 3, 1, (1, 0, 2, 1), "avg", False, False, 16),
    (64, 9, 2, 2, (0, 0, 0, 0), "max", True, True, 32),
    (64, 112, 3, 2, (1, 1, 1, 1), "max", False, True, 16),  # ResNet-18's stem pool, realistic size
]


# The generic compute with the default schedule is slow to build at 112x112: x86 only there.
@pytest.mark.parametrize("impl,c,hw,k,s,pad,pool_type,ceil,cip,b",
                         [(impl, *case) for case in POOL_CASES for impl in ("generic", "x86")
                          if impl == "x86" or case[1] <= 20])
def test_pool2d_blocked(runner, impl, c, hw, k, s, pad, pool_type, ceil, cip, b):
    a = runner.rand(1, c, hw, hw)
    A = te.placeholder((1, c // b, hw, hw, b), name="data")
    mod, sched = (topi.nn, topi.generic.schedule_pool) if impl == "generic" else (topi.x86, topi.x86.schedule_pool)
    out = mod.pool2d(A, (k, k), (s, s), (1, 1), pad, pool_type, ceil, f"NCHW{b}c", cip)
    got = runner.run(sched, out, [A], [to_blocked(a, b)])
    ref = testing.pool2d_python(a, (k, k), (s, s), pad, pool_type, ceil_mode=ceil, count_include_pad=cip)
    np.testing.assert_allclose(got, to_blocked(ref, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_pool2d_blocked_dilated(runner, pool_type):
    a = runner.rand(1, 16, 11, 11)
    A = te.placeholder((1, 2, 11, 11, 8), name="data")
    out = topi.x86.pool2d(A, (3, 3), (2, 2), (2, 2), (2, 2, 2, 2), pool_type, False, "NCHW8c", False)
    got = runner.run(topi.x86.schedule_pool, out, [A], [to_blocked(a, 8)])
    ref = testing.pool2d_python(a, (3, 3), (2, 2), (2, 2, 2, 2), pool_type, (2, 2), count_include_pad=False)
    np.testing.assert_allclose(got, to_blocked(ref, 8), rtol=1e-5, atol=1e-5)


def test_pool2d_blocked_fused_epilogue(runner):
    a = runner.rand(1, 32, 12, 12)
    A = te.placeholder((1, 2, 12, 12, 16), name="data")
    out = topi.nn.relu(topi.x86.pool2d(A, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "avg", False, "NCHW16c", True))
    got = runner.run(topi.x86.schedule_pool, out, [A], [to_blocked(a, 16)])
    ref = np.maximum(testing.pool2d_python(a, (3, 3), (2, 2), (1, 1, 1, 1), "avg"), 0)
    np.testing.assert_allclose(got, to_blocked(ref, 16), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pool_type", ["avg", "max"])
@pytest.mark.parametrize("schedule", ["schedule_pool", "schedule_global_pool_NCHWc"])
def test_global_pool_blocked(runner, pool_type, schedule):
    a = runner.rand(2, 64, 7, 7)
    A = te.placeholder((2, 4, 7, 7, 16), name="data")
    out = topi.nn.global_pool(A, pool_type, "NCHW16c")
    got = runner.run(getattr(topi.x86, schedule), out, [A], [to_blocked(a, 16)])
    ref = a.mean(axis=(2, 3), keepdims=True) if pool_type == "avg" else a.max(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(got, to_blocked(ref, 16), rtol=1e-5, atol=1e-5)


def test_adaptive_pool_blocked(runner):
    a = runner.rand(1, 16, 9, 9)
    A = te.placeholder((1, 2, 9, 9, 8), name="data")
    out = topi.nn.adaptive_pool(A, (2, 3), "avg", "NCHW8c")
    got = runner.run(topi.x86.schedule_adaptive_pool, out, [A], [to_blocked(a, 8)])
    np.testing.assert_allclose(got, to_blocked(testing.adaptive_pool_python(a, (2, 3), "avg"), 8), rtol=1e-5, atol=1e-5)


def test_blocked_pool_layout_errors():
    with pytest.raises(ShapeError, match="unsplit H and W"):
        topi.nn.pool2d(te.placeholder((1, 4, 8, 8, 2), name="data"), 2, 2, layout="NCHW2h")
    with pytest.raises(ShapeError, match="'data' has 4 dims"):
        topi.nn.global_pool(te.placeholder((1, 4, 8, 8), name="data"), "avg", "NCHW16c")
