"""The int8 epilogue's arithmetic on x86: ``int32(round(x))`` as one ``cvtps2dq`` (the LLVM
backend's ``rounded_to_int32``), checked in the assembly of several CPU models and run against
numpy's half-to-even ``rint``; AArch64 keeps ``roundeven`` + ``fptosi``."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln as tvm
from kiln import te, tir
from kiln.target.cpu_facts import why_host_cannot_run


def _round_kernel(src: str, lanes: int):
    n = 64
    a = te.placeholder((n,), src, name="A")
    b = te.compute((n,), lambda i: tir.round(a[i]).astype("int32"), name="B")
    s = te.create_schedule(b.op)
    _, xi = s[b].split(b.op.axis[0], factor=lanes)
    s[b].vectorize(xi)
    return s, [a, b]


@pytest.mark.parametrize("mcpu,lanes,cvt", [("haswell", 8, r"vcvtps2dq\s.*%ymm"), ("znver3", 8, r"vcvtps2dq\s.*%ymm"),
                                            ("skylake-avx512", 16, r"vcvtps2dq\s.*%zmm"),
                                            ("sapphirerapids", 16, r"vcvtps2dq\s.*%zmm"), ("x86-64", 1, r"cvtss2si|cvtps2dq")])
def test_round_to_int32_is_one_conversion_on_x86(mcpu, lanes, cvt):
    target = f"llvm -mcpu={mcpu}"
    f = tvm.build(*_round_kernel("float32", lanes), target=target)
    asm = f.get_source("asm")
    assert re.search(cvt, asm), f"-mcpu={mcpu}: no {cvt}"
    assert not re.search(r"\broundps|\broundss|cvttps2dq|cvttss2si", asm), f"-mcpu={mcpu}: round + truncation left"
    if why_host_cannot_run(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (checked its assembly only)")
    # ties both ways, values a step either side of a tie, the int32 range's ends (exact in float32)
    ties = np.arange(-8, 8, dtype=np.float32) + np.float32(0.5)
    near = np.concatenate([np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))])
    ends = np.array([-2.0 ** 31, 2.0 ** 31 - 128, -1e9 - 0.5, 123456.5], np.float32)
    x = np.concatenate([ties, near, ends]).astype(np.float32)
    x = np.resize(x, 64)
    y = tvm.nd.empty((64,), "int32")
    f(tvm.nd.array(x), y)
    np.testing.assert_array_equal(y.numpy(), np.rint(x).astype(np.int32))


def test_round_to_int32_from_float64_on_x86():
    target = "llvm -mcpu=haswell"
    f = tvm.build(*_round_kernel("float64", 4), target=target)
    asm = f.get_source("asm")
    assert re.search(r"vcvtpd2dq", asm) and "vroundpd" not in asm
    if why_host_cannot_run(target):
        pytest.skip(why_host_cannot_run(target))
    x = np.resize(np.arange(-20, 20, dtype=np.float64) / 4, 64)
    y = tvm.nd.empty((64,), "int32")
    f(tvm.nd.array(x), y)
    np.testing.assert_array_equal(y.numpy(), np.rint(x).astype(np.int32))


def test_aarch64_keeps_round_to_nearest_even_then_truncation():
    """No lrint there (it would round in the current mode: frintx); frintn + fcvtzs as before."""
    f = tvm.build(*_round_kernel("float32", 4), target="llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    asm = f.get_source("asm")
    assert re.search(r"frintn\s", asm) or re.search(r"fcvtns\s", asm), asm[:2000]
    assert "frintx" not in asm
