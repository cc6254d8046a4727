"""Normalizations: layer_norm (two passes: mean, then variance of the centred values) and
inference-time batch_norm / instance_norm."""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import const

from ..reduction import normalize_axes


def _moments(data, axes, name):
    ndim = len(data.shape)
    count = 1
    for a in axes:
        count = count * data.shape[a]
    inv = const(1.0, data.dtype) / tir.cast(count, data.dtype)
    keep = tuple(1 if d in axes else data.shape[d] for d in range(ndim))

    def red(fvalue, suffix):
        ks = {a: te.reduce_axis((0, data.shape[a]), name=f"k{a}") for a in axes}

        def fcompute(*i):
            src = [ks[d].var if d in ks else i[d] for d in range(ndim)]
            return te.sum(fvalue(src, i), axis=[ks[a] for a in axes])

        return te.compute(keep, fcompute, name=f"{name}_{suffix}", tag="norm_reduce")

    def pin(i):
        return [const(0, "int32") if d in axes else i[d] for d in range(ndim)]

    total = red(lambda src, i: data(*src), "sum")
    mean = te.compute(keep, lambda *i: total(*i) * inv, name=f"{name}_mean", tag="elemwise")
    sq = red(lambda src, i: (data(*src) - mean(*pin(i))) * (data(*src) - mean(*pin(i))), "sqsum")
    var = te.compute(keep, lambda *i: sq(*i) * inv, name=f"{name}_var", tag="elemwise")
    return mean, var, pin


def layer_norm(data, gamma, beta, axis=-1, epsilon=1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the trailing axes; gamma/beta cover them."""
    ndim = len(data.shape)
    axes = normalize_axes(ndim, axis, op="layer_norm")
    mean, var, pin = _moments(data, axes, "T_layer_norm")
    eps = const(epsilon, data.dtype)
    first = axes[0]

    def fcompute(*i):
        v = (data(*i) - mean(*pin(i))) * tir.rsqrt(var(*pin(i)) + eps)
        affine_idx = i[first:first + len(gamma.shape)] if gamma is not None else ()
        if gamma is not None:
            v = v * gamma(*affine_idx)
        if beta is not None:
            v = v + beta(*i[first:first + len(beta.shape)])
        return v

    return te.compute(data.shape, fcompute, name="T_layer_norm", tag="layer_norm_output")


def instance_norm(data, gamma, beta, axis=(2, 3), epsilon=1e-5):
    """Normalize each (n, c) plane over the spatial axes; gamma/beta are per channel (axis 1)."""
    axes = normalize_axes(len(data.shape), axis, op="instance_norm")
    mean, var, pin = _moments(data, axes, "T_instance_norm")
    eps = const(epsilon, data.dtype)
    return te.compute(data.shape, lambda *i: (data(*i) - mean(*pin(i))) * tir.rsqrt(var(*pin(i)) + eps)
                      * gamma(i[1]) + beta(i[1]), name="T_instance_norm", tag="layer_norm_output")


def batch_norm_inference(data, gamma, beta, moving_mean, moving_var, axis=1, epsilon=1e-5, center=True, scale=True):
    """(x - mean) / sqrt(var + eps) * gamma + beta with per-channel statistics along axis."""
    axis = axis % len(data.shape)
    eps = const(epsilon, data.dtype)

    def fcompute(*i):
        c = i[axis]
        v = (data(*i) - moving_mean(c)) * tir.rsqrt(moving_var(c) + eps)
        if scale:
            v = v * gamma(c)
        if center:
            v = v + beta(c)
        return v

    return te.compute(data.shape, fcompute, name="T_batch_norm", tag="broadcast")
