"""The int16 Winograd kernel's register tiles (kiln/topi/x86/conv2d_int8_winograd.py) at topi
level: every (tiles, output blocks) shape, with tile counts padded to a multiple of the tile and
tile groups that cross tile rows, gives the direct conv's int32 sums exactly (numpy int64
reference: integers, no tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.target.cpu_facts import why_host_cannot_run
from kiln.topi.x86.conv2d_int8_winograd import (conv2d_int8_winograd_acc, pack_weight, register_tile,
                                                schedule_conv2d_int8_winograd)


def reference(x, w, pad, zx):
    """int64 direct 3x3 stride-1 conv of u8 NCHW ``x`` (padded with ``zx``) and OIHW ``w``."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=zx)
    oh, ow = h + 2 * pad - 2, wd + 2 * pad - 2
    out = np.zeros((n, w.shape[0], oh, ow), np.int64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j].astype(np.int64))
    return out


def blocked(a, b):
    """NCHW -> NCHW[b]c."""
    n, c, h, w = a.shape
    return np.ascontiguousarray(a.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


@pytest.mark.parametrize("mcpu,lanes,tile,oc,hw,pad", [
    ("haswell", 8, (4, 2), 16, 9, 1),   # 25 tiles padded to 28, groups across tile rows
    ("haswell", 8, (7, 1), 24, 14, 1),  # 49 tiles, 3 output blocks
    ("znver3", 8, (3, 1), 8, 8, 0),     # 9 tiles, no padding of the image
    ("haswell", 8, (4, 2), 32, 7, 1),   # odd output: the last tile row and column half outside
    ("skylake-avx512", 16, (8, 2), 32, 11, 1),
])
def test_register_tiles_exact(mcpu, lanes, tile, oc, hw, pad):
    target = f"llvm -mcpu={mcpu}"
    rng = np.random.default_rng(hw * oc)
    ic, ib, zx = 16, 8, 201
    x = rng.integers(0, 256, (1, ic, hw, hw)).astype(np.uint8)
    w = rng.integers(-128, 128, (oc, ic, 3, 3)).astype(np.int8)
    oh = hw + 2 * pad - 2
    data = te.placeholder((1, ic // ib, hw, hw, ib), "uint8", name="data")
    u = te.placeholder((oc // lanes, 16, ic // ib, ib // 4, 2, lanes, 2), "int16", name="u")
    acc = conv2d_int8_winograd_acc(data, u, (pad, pad, pad, pad), zx, (oh, oh), tile=tile)
    s = schedule_conv2d_int8_winograd([acc])
    lib = tvm.build(s, [data, u, acc], target=target)
    assert "vpmaddwd" in lib.get_source("asm")
    if why_host_cannot_run(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (compiled only)")
    dev = tvm.cpu(0)
    out = tvm.nd.empty(tuple(int(d) for d in acc.shape), "int32", dev)
    lib(tvm.nd.array(blocked(x, ib), dev), tvm.nd.array(pack_weight(w, ib, lanes), dev), out)
    np.testing.assert_array_equal(out.numpy(), blocked(reference(x, w, pad, zx), lanes))


def test_default_register_tile():
    """4 tiles x 2 blocks (AVX2) or 8 x 2 (AVX-512) where 4 divides the tile count, 7 x 1 where
    only 7 does (256@14: 49 tiles), one block for an odd number of output blocks."""
    assert register_tile(784, 8, 8) == (4, 2) and register_tile(16, 64, 8) == (4, 2)
    assert register_tile(49, 32, 8) == (7, 1) and register_tile(49, 32, 16) == (7, 1)
    assert register_tile(196, 16, 16) == (8, 2) and register_tile(25, 3, 8) == (4, 1)
