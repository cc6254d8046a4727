"""Deterministic parameter initialization for the test workloads (``create_workload``)."""

from __future__ import annotations

import numpy as np

from kiln.ir.module import IRModule

from ..analysis import as_function
from ..transform.infer_type import infer
from ..ty import np_dtype


def init_value(name: str, shape: tuple, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Xavier-uniform weights (magnitude 3: keeps activations O(1) through deep nets);
    zeros for biases, betas and running means; ones for gammas and running variances."""
    if name.endswith(("gamma", "moving_var", "_scale")):
        return np.ones(shape, dtype=np_dtype(dtype))
    if name.endswith(("bias", "beta", "moving_mean")) or len(shape) < 2:
        return np.zeros(shape, dtype=np_dtype(dtype))
    fan_in = int(np.prod(shape[1:]))
    fan_out = int(shape[0]) * int(np.prod(shape[2:]))
    bound = np.sqrt(3.0 * 2.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, size=shape).astype(np_dtype(dtype))


def create_workload(net, initializer=None, seed: int = 0):
    """``(mod, params)`` for a relay expression/Function: every parameter except ``data`` gets
    an initial value (``initializer(name, shape, dtype, rng)`` if given), as an NDArray (TVM's
    type: scripts call ``params[name].numpy()`` or ``.asnumpy()``)."""
    from kiln.runtime.ndarray import array

    func = as_function(net)
    infer(func)
    rng = np.random.default_rng(seed)
    init = initializer or init_value
    params = {}
    for p in func.params:
        if p.name_hint == "data":
            continue
        t = p.checked_type
        params[p.name_hint] = array(init(p.name_hint, t.shape, t.dtype, rng))
    return IRModule({"main": func}), params
