"""save_param_dict / load_param_dict round trip and format checks."""

import numpy as np
import pytest

from kiln import nd, relay
from kiln.errors import KilnError


def test_round_trip_numpy_and_ndarray():
    params = {"w": np.random.default_rng(0).standard_normal((3, 4)).astype("float32"),
              "idx": np.arange(5, dtype="int64"), "flag": np.array([True, False]),
              "scalar": np.array(2.5, "float64"), "nd": nd.array(np.ones((2, 2), "float32"))}
    blob = relay.save_param_dict(params)
    assert isinstance(blob, bytes) and blob[:8] == b"KILNPRM1"
    loaded = relay.load_param_dict(blob)
    assert list(loaded) == list(params)
    for k, v in params.items():
        want = v.numpy() if hasattr(v, "numpy") and not isinstance(v, np.ndarray) else v
        got = loaded[k].numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_bad_blobs():
    with pytest.raises(KilnError, match="bad magic"):
        relay.load_param_dict(b"nonsense")
    blob = relay.save_param_dict({"w": np.ones(10, "float32")})
    with pytest.raises(KilnError, match="truncated"):
        relay.load_param_dict(blob[:-4])
