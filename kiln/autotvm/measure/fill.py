"""Random inputs made on the device: one kernel per argument that fills it from a hash of the
element index and a seed.

The runner uploads these kernels with the candidate and calls them on the arrays it allocated
there, so no input is ever timed uninitialized (NaNs and denormals skew timings) and no array
data crosses the network. The values are deterministic per (argument, element), so an output
can be compared with the untuned kernel's on the same inputs.
"""

from __future__ import annotations

import math

# Three rounds modulo 2**32 in int64 (there are no bitwise ops in te): multiplicative, then
# h times an odd number made of its own high bits (the nonlinear step that breaks the lattice
# a purely multiplicative hash leaves), then multiplicative again. index < 2**31 and the
# factors keep every product below 2**63.
_M1, _M2, _ADD = 2654435761, 1597334677, 374761393
_MOD = 1 << 32


def _hash(flat, seed: int):
    h = (flat * _M1 + (seed * 7919 + 12345)) % _MOD
    h = (h % 2147483648) * ((h // 65536) * 2 + 1) % _MOD
    return (h % 2147483648 * _M2 + _ADD) % _MOD


def fill_compute(shape, dtype: str, seed: int, name: str):
    """A te stage whose element i is a pseudo-random value of ``dtype`` (floats in [0, 1))."""
    from kiln import te
    from kiln.ir.expr import cast, const

    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]

    def body(*idx):
        flat = const(0, "int64")
        for i, s in zip(idx, strides):
            flat = flat + cast(i, "int64") * const(s, "int64")
        h = _hash(flat, seed)
        if dtype.startswith("float"):
            return cast(h // 256, dtype) * const(1.0 / (1 << 24), dtype)
        if dtype == "bool":
            return cast(h % 2, dtype)
        return cast(h // 256 % 16, dtype)

    return te.compute(tuple(shape), body, name=name)


def fill_values(shape, dtype: str, seed: int):
    """The same values computed with numpy (to check the kernels and fill local arrays)."""
    import numpy as np
    flat = np.arange(math.prod(shape), dtype=np.int64)
    h = _hash(flat, seed)
    if dtype.startswith("float"):
        return ((h // 256).astype(dtype) * np.asarray(1.0 / (1 << 24), dtype)).reshape(shape)
    if dtype == "bool":
        return (h % 2).astype(bool).reshape(shape)
    return (h // 256 % 16).astype(dtype).reshape(shape)


def build_fill_module(arg_info, target):
    """One module with ``fill_<i>(out)`` for each argument i of ``arg_info`` [(shape, dtype, _)]."""
    import kiln as tvm
    from kiln import te
    from kiln.ir.module import IRModule
    from kiln.te.lower import lower_to_primfunc

    funcs = {}
    for i, (shape, dtype, _) in enumerate(arg_info):
        out = fill_compute(shape, dtype, seed=i, name=f"fill{i}")
        s = te.create_schedule(out.op)
        axes = list(s[out].op.axis)
        if len(axes) > 1:
            fused = s[out].fuse(*axes)
        else:
            fused = axes[0]
        s[out].parallel(fused)
        funcs[f"fill_{i}"] = lower_to_primfunc(s, [out], f"fill_{i}")
    return tvm.build(IRModule(funcs), target=target)
