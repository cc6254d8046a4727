"""Property: a call is accepted exactly when the symbolic dims agree, and then it is correct."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln as tvm

dim = st.integers(min_value=1, max_value=6)


@settings(max_examples=60, deadline=None)
@given(m=dim, k=dim, k2=dim, n=dim, m2=dim, n2=dim)
def test_matmul_accepts_exactly_consistent_shapes(c_kernels, m, k, k2, n, m2, n2):
    mod = _module(c_kernels)
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = tvm.nd.array(rng.standard_normal((m, k)).astype("float32"))
    b = tvm.nd.array(rng.standard_normal((k2, n)).astype("float32"))
    c = tvm.nd.empty((m2, n2), "float32")
    if (k, m, n) == (k2, m2, n2):
        mod["matmul"](a, b, c)
        np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)
    else:
        with pytest.raises(ValueError, match=r"matmul: argument '[BC]' has shape .* expected \((k, n|m, n)\) with"):
            mod["matmul"](a, b, c)


_cache = {}


def _module(c_kernels):
    # One linked module for all examples (hypothesis reruns the body; linking takes ~50 ms).
    if "mod" not in _cache:
        _cache["mod"] = c_kernels.module()
    return _cache["mod"]
