"""Scales for relay.quantize, from calibration data (activations) or the weights themselves.

All scales are symmetric (zero point 0) for int8: ``real = scale * q`` with ``q`` in [-127, 127].

- ``kl_divergence``: the clipping threshold whose 128-level quantization of the histogram of
  ``|x|`` loses least information (smallest KL divergence from the clipped histogram), as
  TensorRT's entropy calibration; 2048 bins over ``[0, max|x|]``.
- ``percentile``: the given percentile of ``|x|`` (99.99 by default).
- ``global_scale``: one range ``[-g, g]`` for every activation: scale ``g / 127``.
- weights, ``max``: ``max|w| / 127``; ``power2``: ``2**ceil(log2 max|w|) / 128``, a power of two.
  Per output channel (axis 0) when ``per_channel``.
"""

from __future__ import annotations

import numpy as np

QMAX = 127


def kl_threshold(hist: np.ndarray, edges: np.ndarray, levels: int = 128) -> float:
    """The threshold (an upper bin edge) minimizing KL(clipped histogram || its ``levels``-level quantization)."""
    hist = np.asarray(hist, np.float64)
    best, best_i = np.inf, len(hist)
    for i in range(levels, len(hist) + 1):
        kept = hist[:i]
        p = kept.copy()
        p[-1] += hist[i:].sum()  # the reference: outliers clipped into the last bin
        # the candidate: the kept bins (without the outliers) merged into `levels` groups, each
        # group's count spread evenly over its nonzero bins
        nonzero = kept > 0
        q = np.zeros(i)
        for g in np.array_split(np.arange(i), levels):
            nz = nonzero[g]
            if nz.any():
                q[g[nz]] = kept[g].sum() / nz.sum()
        if p.sum() == 0:
            continue
        pn, qn = p / p.sum(), q / max(q.sum(), 1e-300)
        mask = pn > 0
        if np.any(qn[mask] == 0):
            continue
        kl = float(np.sum(pn[mask] * np.log(pn[mask] / qn[mask])))
        if kl < best:
            best, best_i = kl, i
    return float(edges[best_i])


def activation_scale(samples: list, mode: str, global_scale: float = 8.0, percentile: float = 99.99,
                     bins: int = 2048) -> float:
    """The int8 scale of one activation from its calibration ``samples`` (arrays)."""
    if mode == "global_scale":
        return float(global_scale) / QMAX
    values = np.abs(np.concatenate([np.asarray(s, np.float64).ravel() for s in samples]))
    top = float(values.max()) if values.size else 0.0
    if top == 0.0:
        return 1.0 / QMAX  # an all-zero activation: any positive scale represents it exactly
    if mode == "percentile":
        return max(float(np.percentile(values, percentile)), top * 1e-6) / QMAX
    if mode == "kl_divergence":
        hist, edges = np.histogram(values, bins=bins, range=(0.0, top))
        return kl_threshold(hist, edges) / QMAX
    raise ValueError(f"calibrate_mode {mode!r}; use 'kl_divergence', 'percentile' or 'global_scale'")


def weight_scale(w: np.ndarray, mode: str, per_channel: bool) -> np.ndarray:
    """The int8 scale of a weight (one per output channel, axis 0, when ``per_channel``)."""
    w = np.abs(np.asarray(w, np.float64))
    top = w.reshape(w.shape[0], -1).max(axis=1) if per_channel else np.asarray(w.max())
    top = np.where(top > 0, top, 1.0)
    if mode == "max":
        return (top / QMAX).astype("float32")
    if mode == "power2":
        return (np.exp2(np.ceil(np.log2(top))) / 128).astype("float32")
    raise ValueError(f"weight_scale {mode!r}; use 'max' or 'power2'")
