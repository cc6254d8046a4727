import numpy as np
import pytest

import kiln as tvm
from kiln.errors import KilnError
from kiln.runtime.evaluator import ProfileResult


def _args(n):
    return tvm.nd.array(np.ones(n, "float32")), tvm.nd.empty((n,), "float32")


def test_time_evaluator_stats(c_module):
    a, b = _args(1 << 16)
    res = c_module.time_evaluator("add_one", tvm.cpu(0), number=20, repeat=4)(a, b)
    assert isinstance(res, ProfileResult) and len(res.results) == 4 and res.number == 20
    assert 0 < res.min <= res.median <= res.max < 0.1
    assert res.min <= res.mean <= res.max and res.std >= 0
    np.testing.assert_array_equal(b.numpy(), 2)  # it really ran the kernel
    assert "ProfileResult(mean=" in repr(res) and "repeat=4" in repr(res)


def test_bigger_work_takes_longer(c_module):
    small = c_module.time_evaluator("add_one", tvm.cpu(), number=50, repeat=3)(*_args(256))
    large = c_module.time_evaluator("add_one", tvm.cpu(), number=50, repeat=3)(*_args(1 << 20))
    assert large.median > 10 * small.median


def test_min_repeat_ms_grows_number(c_module):
    res = c_module.time_evaluator("add_one", tvm.cpu(), number=1, repeat=2, min_repeat_ms=20)(*_args(64))
    assert res.number > 1
    assert res.mean * res.number >= 0.020 * 0.9


def test_cache_flush_preproc(c_module):
    res = c_module.time_evaluator("add_one", tvm.cpu(), number=2, repeat=2,
                                  f_preproc="cache_flush_cpu_non_first_arg")(*_args(1024))
    assert len(res.results) == 2
    with pytest.raises(ValueError, match="unknown f_preproc 'flush'"):
        c_module.time_evaluator("add_one", tvm.cpu(), f_preproc="flush")


def test_evaluator_checks_arguments_and_errors(c_module):
    ev = c_module.time_evaluator("add_one", tvm.cpu())
    with pytest.raises(ValueError, match=r"argument 'B' has shape \(3,\), expected \(n,\) with n=2"):
        ev(tvm.nd.empty((2,)), tvm.nd.empty((3,)))
    with pytest.raises(KilnError, match="fail: deliberately failed on 2 elements"):
        c_module.time_evaluator("fail", tvm.cpu())(tvm.nd.empty((2,)))
    with pytest.raises(ValueError, match="number=0 and repeat=1 must be >= 1"):
        c_module.time_evaluator("add_one", tvm.cpu(), number=0)


def test_profile_result_math():
    res = ProfileResult((1.0, 2.0, 4.0), number=3)
    assert (res.mean, res.median, res.min, res.max) == (7 / 3, 2.0, 1.0, 4.0)
    assert res.std == pytest.approx(np.std([1.0, 2.0, 4.0]))
