"""Helpers for the topi tests: build a schedule for the host and run it on numpy inputs."""

import numpy as np
import pytest

import kiln as tvm


def _shape(t):
    return tuple(int(s.value) if hasattr(s, "value") else int(s) for s in t.shape)


class Runner:
    rng = np.random.default_rng(0)

    def rand(self, *shape, dtype="float32", low=-100, high=100):
        if np.dtype(dtype).kind in "iu":
            return self.rng.integers(low if np.dtype(dtype).kind == "i" else 0, high, size=shape).astype(dtype)
        return self.rng.standard_normal(shape).astype(dtype)

    def run(self, schedule, out, args, inputs):
        """Build ``schedule([out])`` over args + [out] and return the output as numpy."""
        outs = out if isinstance(out, (list, tuple)) else [out]
        s = schedule(list(outs))
        f = tvm.build(s, list(args) + list(outs), target="llvm")
        nd_out = [tvm.nd.empty(_shape(o), str(o.dtype)) for o in outs]
        f(*[tvm.nd.array(x) for x in inputs], *nd_out)
        results = [o.numpy() for o in nd_out]
        return results if isinstance(out, (list, tuple)) else results[0]


@pytest.fixture
def runner():
    return Runner()
