"""Build a topi GPU schedule for OpenCL and run it on the first OpenCL device (PoCL in CI)."""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import topi

# (target string, topi package): every kernel is checked with the generic GPU schedules and
# with Mali's.
TARGETS = [pytest.param("opencl", id="gpu"), pytest.param("opencl -device=mali", id="mali")]


def package(target: str):
    return topi.mali if "mali" in target else topi.gpu


def shape_of(t) -> tuple:
    return tuple(int(getattr(s, "value", s)) for s in t.shape)


def run(target: str, make, schedule, inputs: list, cfg=None):
    """``make(*placeholders)`` -> output tensor(s); ``schedule(outs)``; built for ``target`` and
    run on cl(0). Returns the output(s) as numpy."""
    dev = tvm.cl(0)
    tgt = tvm.target.Target(target, host="llvm")
    with tgt:
        args = [tvm.te.placeholder(x.shape, name=f"in{i}", dtype=str(x.dtype)) for i, x in enumerate(inputs)]
        out = make(*args)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        s = schedule(outs) if cfg is None else schedule(outs, cfg)
        f = tvm.build(s, args + outs, target=tgt)
    nd_out = [tvm.nd.empty(shape_of(o), str(o.dtype), dev) for o in outs]
    f(*[tvm.nd.array(x, dev) for x in inputs], *nd_out)
    res = [o.numpy() for o in nd_out]
    return res if isinstance(out, (list, tuple)) else res[0]


def rand(rng, *shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


TOL = dict(rtol=1e-4, atol=1e-4)
