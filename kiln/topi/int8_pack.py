"""Packing of int8 weights and requantize constants for the CPU int8 kernels (x86 and ARM).

All of it runs once at build time on constants (numpy):

- ``pack_conv_weight``: OIHW int8 -> ``(O/L, C/ib, KH, KW, ib/4, L, 4)``: for each 4 input
  channels and L output channels, one vector of 4L bytes whose lane l holds the 4 weights of
  output channel l (what ``vpdpbusd`` / ``sdot`` multiply with 4 data bytes broadcast).
  The exact 16-bit x86 fallback (``pmaddwd``) takes int16 ``(.., ib/4, 2, L, 2)``: pairs first.
- ``pack_dense_weight``: (N, K) -> ``(N/L, K/4, L, 4)`` (or the int16 pair form).
- ``pairs_fit_int16``: whether ``vpmaddubsw``'s saturating 16-bit pair sums are exact for these
  weights (``pair_fits``: positive weights of a pair sum to <= 128, negative ones to >= -128).
- ``plan_mixed_conv_weight``: a conv's weights split per output block into the 4-channel units
  that fit ``vpmaddubsw`` and the others (int16, ``vpmaddwd``), with the table of their places.
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
    """Whether every adjacent pair (0,1), (2,3), ... along ``axis`` (padded to even) fits
    ``vpmaddubsw`` (``pair_fits``): then its u8 x s8 pair sums are exact."""
    a = pad_channels(np.moveaxis(np.asarray(w, np.int32), axis, -1), -1, 2)
    return bool(np.all(pair_fits(a[..., 0::2], a[..., 1::2])))


def pair_fits(w0, w1):
    """Whether ``u0 * w0 + u1 * w1`` fits int16 for every u8 ``u0, u1`` (no saturation in
    ``vpmaddubsw``): the positive weights sum to at most 128 (255 * 128 <= 2**15 - 1) and the
    negative ones to at least -128 (-255 * 128 >= -2**15). A pair of opposite signs always fits;
    ``|w0| + |w1| <= 128`` is the sign-blind form of it."""
    w0, w1 = np.asarray(w0, np.int32), np.asarray(w1, np.int32)
    pos = np.maximum(w0, 0) + np.maximum(w1, 0)
    neg = np.minimum(w0, 0) + np.minimum(w1, 0)
    return (pos <= 128) & (neg >= -128)


MIXED_LEAST = 0.25  # the mixed kernel's least share of vpmaddubsw units (plan_mixed_conv_weight)


def plan_mixed_conv_weight(w: np.ndarray, ib: int, lanes: int, least: float = MIXED_LEAST):
    """The weights of the mixed AVX2 / AVX-512BW conv (x86/conv2d_int8.py ``conv2d_int8_mixed_acc``)
    or None where too few units fit ``vpmaddubsw``.

    A unit is 4 input channels at one tap (``(C/ib, KH, KW, ib/4)``, the reduction's order) for
    one output block of ``lanes`` channels; it fits when all of its ``2 * lanes`` pairs do
    (``pair_fits``). Each block takes its first ``ns`` fitting units on ``vpmaddubsw`` and the
    others on ``vpmaddwd`` (int16 weights), ``ns`` the fewest any block has (one loop extent for
    all). Returns ``(weight (O/L, ns, L, 4) int8, weight16 (O/L, n - ns, 2, L, 2) int16,
    table (O/L, n, 4) int32)``: the table's rows are the units' ``(input block, ky, kx, 4 * q)``,
    the ``ns`` vpmaddubsw units first. None unless ``ns >= least * n``: in ResNet-50 (AVX2
    code, one core, each layer's two builds timed in turns) layers with 12-22% of their units on
    vpmaddubsw ran 0.96-1.00x the all-int16 kernel's time, those with 34-60% mostly 1.04-1.22x faster."""
    o, c, kh, kw = w.shape
    assert c % ib == 0 and ib % 4 == 0 and o % lanes == 0, (w.shape, ib, lanes)
    icq = ib // 4
    units = _units(w, ib, lanes)
    n = units.shape[1]
    fits = _fits(units)
    ns = int(fits.sum(axis=1).min())
    if ns < max(1, least * n) or ns == n:
        return None
    order = np.argsort(~fits, axis=1, kind="stable")  # fitting units first, each block its own
    cb, ky, kx, q = np.unravel_index(np.arange(n), (c // ib, kh, kw, icq))
    table = np.stack([cb, ky, kx, 4 * q], axis=-1).astype(np.int32)[order]
    picked = np.take_along_axis(units, order[:, :, None, None], axis=1)
    weight = np.ascontiguousarray(picked[:, :ns].astype(np.int8))
    rest = picked[:, ns:]
    weight16 = np.ascontiguousarray(rest.reshape(rest.shape[:-1] + (2, 2)).swapaxes(-3, -2).astype(np.int16))
    return weight, weight16, np.ascontiguousarray(table)


def _units(w: np.ndarray, ib: int, lanes: int) -> np.ndarray:
    """(O/L, n, L, 4): the 4-channel units of ``w`` (OIHW) per output block, in the reduction's
    order ``(C/ib, KH, KW, ib/4)``."""
    o, c, kh, kw = w.shape
    units = np.asarray(w, np.int32).reshape(o // lanes, lanes, c // ib, ib // 4, 4, kh, kw)
    return units.transpose(0, 2, 5, 6, 3, 1, 4).reshape(o // lanes, -1, lanes, 4)


def _fits(units: np.ndarray) -> np.ndarray:
    """(O/L, n) whether each unit fits ``vpmaddubsw`` (both pairs in every lane)."""
    return pair_fits(units[..., 0::2], units[..., 1::2]).all(axis=(2, 3))


def mixed_cost(w: np.ndarray, lanes: int) -> int:
    """The x86 vector instructions per output block and pixel of the reduction of ``w`` (OIHW)
    without VNNI: 3 for each unit on ``vpmaddubsw`` (with ``vpmaddwd`` by ones and an add), 4 on
    the 16-bit path (two ``vpmaddwd``, two adds); the mixed kernel's share is the fewest fitting
    units of any block, none below ``plan_mixed_conv_weight``'s least (``MIXED_LEAST``)."""
    fits = _fits(_units(w, 4, lanes))
    n = fits.shape[1]
    ns = int(fits.sum(axis=1).min())
    if ns == n:
        return 3 * n
    return 3 * ns + 4 * (n - ns) if ns >= max(1, MIXED_LEAST * n) else 4 * n


def channel_order_for_pairs(w, lanes, most: int = 1 << 24):
    """An order of the input channels of ``w`` (OIHW, I a multiple of 4, O of ``lanes``; or lists
    of such weights over the same input and their lanes: convs that read one tensor) under which
    more of the 4-channel units fit ``vpmaddubsw`` (``pair_fits`` in every lane of an output
    block), or None where it finds none cheaper (the sum of ``mixed_cost``) or the search would
    be large (output blocks x taps x I**2 above ``most`` in all).

    A unit fits when both of its channel pairs fit in every lane of its block at its tap. The
    channels are paired greedily, the pairs that fit in the most (weight, block, tap) places first;
    then the pairs are grouped two by two, those that fit in the most places together first."""
    ws, ls = (list(w), list(lanes)) if isinstance(w, (list, tuple)) else ([w], [lanes])
    c = ws[0].shape[1]
    if c % 4 or any(v.shape[1] != c or v.shape[0] % n for v, n in zip(ws, ls)) or \
            sum(v.shape[0] // n * v.shape[2] * v.shape[3] for v, n in zip(ws, ls)) * c * c > most:
        return None
    places = np.concatenate([_pair_places(v, n) for v, n in zip(ws, ls)])

    def matching(score):
        """Disjoint index pairs, the highest scores first (ties by index: deterministic)."""
        free = np.ones(len(score), bool)
        out = []
        flat = np.argsort(-score, axis=None, kind="stable")
        for i, j in zip(*np.unravel_index(flat, score.shape)):
            if i < j and free[i] and free[j]:
                out.append((int(i), int(j)))
                free[i] = free[j] = False
        return out

    score = places.sum(0).astype(np.int64)
    np.fill_diagonal(score, -1)
    pairs = matching(score)
    fit = np.stack([places[:, i, j] for i, j in pairs], 1)  # (place, pair)
    joint = (fit[:, :, None] & fit[:, None, :]).sum(0).astype(np.int64)
    np.fill_diagonal(joint, -1)
    order = np.array([ch for a, b in matching(joint) for ch in (*pairs[a], *pairs[b])], np.int64)
    before = sum(mixed_cost(v, n) for v, n in zip(ws, ls))
    return order if sum(mixed_cost(v[:, order], n) for v, n in zip(ws, ls)) < before else None


def _pair_places(w: np.ndarray, lanes: int) -> np.ndarray:
    """(O/L x taps, I, I): whether channels (i, j) as a pair fit in every lane of a block at a tap."""
    o, c, kh, kw = w.shape
    wt = np.asarray(w, np.int16).reshape(o // lanes, lanes, c, kh * kw).transpose(1, 0, 3, 2)  # (L, O/L, taps, I)
    pos, neg = np.maximum(wt, 0), np.minimum(wt, 0)
    places = np.ones((o // lanes, kh * kw, c, c), bool)
    for p, q in zip(pos, neg):
        places &= (p[..., :, None] + p[..., None, :] <= 128) & (q[..., :, None] + q[..., None, :] >= -128)
    return places.reshape(-1, c, c)


def unpack_mixed_conv_weight(weight, weight16, table, shape, ib: int) -> np.ndarray:
    """The OIHW int8 weight of ``plan_mixed_conv_weight``'s parts (``shape``: OIHW)."""
    o, c, kh, kw = shape
    lanes = weight.shape[2]
    ns = weight.shape[1]
    w = np.zeros(shape, np.int64)
    rest = np.asarray(weight16).swapaxes(-3, -2).reshape(weight16.shape[0], weight16.shape[1], lanes, 4)
    for ob in range(o // lanes):
        for u in range(table.shape[1]):
            cb, ky, kx, q4 = (int(v) for v in table[ob, u])
            vals = weight[ob, u] if u < ns else rest[ob, u - ns]
            w[ob * lanes:(ob + 1) * lanes, cb * ib + q4:cb * ib + q4 + 4, ky, kx] = vals
    return w.astype(np.int8)


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


__all__ = ["pad_channels", "pack_conv_weight", "pack_dense_weight", "pairs_fit_int16", "pair_fits",
           "plan_mixed_conv_weight", "unpack_mixed_conv_weight", "requant_params", "mixed_cost",
           "channel_order_for_pairs"]
