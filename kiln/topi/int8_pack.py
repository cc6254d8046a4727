"""Packing of int8 weights and requantize constants for the CPU int8 kernels (x86 and ARM).

All of it runs once at build time on constants (numpy):

- ``pack_conv_weight``: OIHW int8 -> ``(O/L, C/ib, KH, KW, ib/4, L, 4)``: for each 4 input
  channels and L output channels, one vector of 4L bytes whose lane l holds the 4 weights of
  output channel l (what ``vpdpbusd`` / ``sdot`` multiply with 4 data bytes broadcast).
  The exact 16-bit x86 fallback (``pmaddwd``) takes int16 ``(.., ib/4, 2, L, 2)``: pairs first.
- ``pack_dense_weight``: (N, K) -> ``(N/L, K/4, L, 4)`` (or the int16 pair form).
- ``pairs_fit_int16``: whether ``vpmaddubsw``'s saturating 16-bit pair sums are exact for these
  weights: ``|w0| + |w1| <= 128`` for every pair it adds (255 * 128 < 2**15).
- ``requant_params``: the per-channel fixed-point multiplier and shift of qnn.requantize
  (kiln/relay/qnn/fixed_point.py), as the kernels' epilogue applies them.
"""

from __future__ import annotations

import numpy as np


def pad_channels(w: np.ndarray, axis: int, multiple: int) -> np.ndarray:
    """``w`` with zeros appended along ``axis`` up to a multiple of ``multiple``."""
    extra = -w.shape[axis] % multiple
    if not extra:
        return w
    widths = [(0, 0)] * w.ndim
    widths[axis] = (0, extra)
    return np.pad(w, widths)


def pack_conv_weight(w: np.ndarray, ib: int, lanes: int, int16_pairs: bool = False) -> np.ndarray:
    """OIHW (I a multiple of ib, ib of 4; O of lanes) -> the blocked layout of the module doc."""
    o, c, kh, kw = w.shape
    assert c % ib == 0 and ib % 4 == 0 and o % lanes == 0, (w.shape, ib, lanes)
    blocks = w.reshape(o // lanes, lanes, c // ib, ib // 4, 4, kh, kw)
    # -> (O/L, C/ib, KH, KW, ib/4, L, 4)
    packed = blocks.transpose(0, 2, 5, 6, 3, 1, 4)
    if int16_pairs:  # (.., ib/4, L, 2, 2) -> (.., ib/4, 2, L, 2)
        packed = packed.reshape(packed.shape[:-1] + (2, 2)).swapaxes(-3, -2).astype(np.int16)
    return np.ascontiguousarray(packed)


def pack_dense_weight(w: np.ndarray, lanes: int, int16_pairs: bool = False) -> np.ndarray:
    """(N, K) (K a multiple of 4, N of lanes) -> (N/L, K/4, L, 4) (or (N/L, K/4, 2, L, 2) int16)."""
    n, k = w.shape
    assert k % 4 == 0 and n % lanes == 0, (w.shape, lanes)
    packed = w.reshape(n // lanes, lanes, k // 4, 4).transpose(0, 2, 1, 3)
    if int16_pairs:
        packed = packed.reshape(packed.shape[:-1] + (2, 2)).swapaxes(-3, -2).astype(np.int16)
    return np.ascontiguousarray(packed)


def pairs_fit_int16(w: np.ndarray, axis: int) -> bool:
    """Whether adjacent pairs (0,1), (2,3), ... along ``axis`` (a multiple of 2 long) have
    ``|w0| + |w1| <= 128``: then u8 x s8 pair sums fit int16 and ``vpmaddubsw`` is exact."""
    a = np.abs(np.moveaxis(np.asarray(w, np.int32), axis, -1))
    a = pad_channels(a, -1, 2)
    return bool(np.all(a[..., 0::2] + a[..., 1::2] <= 128))


def requant_params(real: np.ndarray):
    """(multiplier q, right shift s) per channel with ``x * real ~= (x * q) >> s`` (q < 2**31),
    as qnn.requantize's fixed point; None where a shift is outside 1..62 (not fused)."""
    from kiln.relay.qnn.fixed_point import quantize_multiplier

    q, e = quantize_multiplier(np.asarray(real, np.float64))
    q = np.asarray(q, np.int64).ravel()
    s = (31 - np.asarray(e, np.int64)).ravel()
    s = np.where(q == 0, 31, s)
    if np.any(s < 1) or np.any(s > 62):
        return None
    return q, s


__all__ = ["pad_channels", "pack_conv_weight", "pack_dense_weight", "pairs_fit_int16", "requant_params"]
