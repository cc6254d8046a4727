"""bfloat16 on CPUs: conversions bit for bit against ml_dtypes, the conv kernels per CPU model
(AMX tdpbf16ps where LLVM says the CPU has AMX-BF16, else vdpbf16ps where it has AVX512-BF16,
float32 arithmetic elsewhere), executed where this machine can, within the error bound of
float32 sums of exact bfloat16 products."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.target import Target
from kiln.target.cpu_facts import cpu_facts, why_host_cannot_run

ml_dtypes = pytest.importorskip("ml_dtypes", reason="numpy's bfloat16 (pip install ml_dtypes) is the reference")

X86 = "llvm -mtriple=x86_64-linux-gnu"
# -mcpu -> the instruction its bfloat16 conv multiplies with: AMX-BF16, AVX512-BF16, float32 FMA
BF16_CPUS = {"skylake-avx512": "fma", "cooperlake": "vdpbf16ps", "sapphirerapids": "tdpbf16ps",
             "sapphirerapids -mattr=-amx-bf16": "vdpbf16ps", "znver3": "fma", "znver4": "vdpbf16ps",
             "haswell": "fma", "x86-64-v2": "mulps"}
INSTRUCTION = {"tdpbf16ps": r"\btdpbf16ps\b", "vdpbf16ps": r"\bvdpbf16ps\b", "fma": r"\bvfmadd\d+ps\b",
               "mulps": r"\bmulps\b"}
U32 = 2.0 ** -24  # float32 unit roundoff


def _x86_only():
    if cpu_facts("llvm").arch != "x86_64":
        pytest.skip("x86 code: this machine is not x86-64")


def _awkward_floats(n: int) -> np.ndarray:
    """float32 values over the whole range, with the cases rounding gets wrong: ties (even and
    odd), just above/below ties, subnormals, the largest finite (rounds to inf), inf, NaN, -0."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    special = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x00000001, 0x807FFFFF,
                        0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFA00000, 0x80000000,
                        0x00008000, 0x00018000, 0x7F7F8000, 0x7F7F7FFF], dtype=np.uint32)
    bits[:len(special)] = special
    return bits.view(np.float32)


@pytest.mark.parametrize("cpu", ["haswell", "sapphirerapids", "x86-64-v2"])
def test_conversions_round_to_nearest_even_bit_for_bit(cpu):
    """float32 -> bfloat16 -> float32, and bfloat16 arithmetic (each result rounded once), give
    ml_dtypes' bits on every CPU: no libcall (__truncsfbf2), no flush of subnormals."""
    _x86_only()
    target = Target(f"{X86} -mcpu={cpu}")
    n = 4096
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i].astype("bfloat16"), name="B")
    c = te.compute((n,), lambda i: (b[i] * b[i] + b[i]).astype("float32"), name="C")
    s = te.create_schedule([b.op, c.op])
    for t in (b, c):
        s[t].vectorize(s[t].split(t.op.axis[0], factor=16)[1])
    f = tvm.build(s, [a, b, c], target=target)
    assert "__truncsfbf2" not in f.get_source("asm")
    if why_host_cannot_run(target):
        return
    x = _awkward_floats(n)
    out_b, out_c = tvm.nd.empty((n,), "uint16"), tvm.nd.empty((n,), "float32")
    f(tvm.nd.array(x), out_b, out_c)
    with np.errstate(invalid="ignore"):  # NaN inputs
        want = x.astype(ml_dtypes.bfloat16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(out_b.numpy()[~nan], want.view(np.uint16)[~nan])
    assert np.all(np.isnan(out_b.numpy()[nan].view(ml_dtypes.bfloat16).astype(np.float32)))
    with np.errstate(all="ignore"):
        want_c = (want * want + want).astype(np.float32)  # ml_dtypes rounds after each operation
    np.testing.assert_array_equal(out_c.numpy(), want_c)


def _conv_case(cpu_target, stride: int, k: int, c: int = 32, o: int = 48, ib: int = 16):
    """A bfloat16 NCHW16c conv (pre-packed channel-pair weights) built for the target, its
    inputs, and the float64 result with its bound: the products of bfloat16 numbers are exact in
    float32 and a float32 sum of K terms is within K * u * sum |a w| (Higham, with u = 2^-24)."""
    from kiln.topi import testing
    from kiln.topi.x86.conv2d_bf16 import prepack_kernel_nchwc_bf16
    from kiln.topi.x86.conv2d_nchwc import config_for_nchwc, conv2d_NCHWc, schedule_conv2d_NCHWc

    n, h = 1, 10
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, h)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((o, c, k, k)).astype(ml_dtypes.bfloat16)
    with cpu_target:
        bn = config_for_nchwc((n, c, h, h), (o, c, k, k), stride, k // 2, 1)["oc_bn"]
        X = te.placeholder((n, c // ib, h, h, ib), "bfloat16", name="X")
        W = te.placeholder((o // bn, c // ib, k, k, ib // 2, bn, 2), "bfloat16", name="W")
        out = conv2d_NCHWc(X, W, stride, k // 2, 1, "float32", out_channels=o)
        mod = tvm.build(schedule_conv2d_NCHWc([out]), [X, W, out], target=cpu_target)
    xb = np.ascontiguousarray(x.reshape(n, c // ib, ib, h, h).transpose(0, 1, 3, 4, 2))
    wp = prepack_kernel_nchwc_bf16(w, ib, bn)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = testing.conv2d_nchw_python(x64, w64, stride, k // 2)
    bound = c * k * k * U32 * testing.conv2d_nchw_python(np.abs(x64), np.abs(w64), stride, k // 2)

    def blocked(v):
        return v.reshape(n, o // bn, bn, *v.shape[2:]).transpose(0, 1, 3, 4, 2)
    return mod, [xb.view(np.uint16), wp.view(np.uint16)], tuple(int(d) for d in out.shape), blocked(want), blocked(bound)


@pytest.mark.parametrize("cpu", list(BF16_CPUS))
def test_bf16_conv_per_cpu(cpu):
    """The CPU's bfloat16 instruction (BF16_CPUS) in the assembly, none of the others'; the
    result within the float32 rounding bound of the exact bfloat16 products, wherever this
    machine runs the code."""
    _x86_only()
    target = Target(f"{X86} -mcpu={cpu}")
    kind = BF16_CPUS[cpu]
    features = cpu_facts(target).features
    assert ("amx-bf16" in features) == (kind == "tdpbf16ps")
    assert ("avx512bf16" in features) == (kind in ("tdpbf16ps", "vdpbf16ps"))
    for stride, k in ((1, 3), (2, 3), (1, 1)):
        mod, inputs, shape, want, bound = _conv_case(target, stride, k)
        asm = mod.get_source("asm")
        for name, pattern in INSTRUCTION.items():
            if name in ("tdpbf16ps", "vdpbf16ps") or name == kind:
                assert bool(re.search(pattern, asm)) == (name == kind), f"{cpu} {k}x{k}/{stride}: {name}"
        assert "__truncsfbf2" not in asm
        if why_host_cannot_run(target):
            continue
        out = tvm.nd.empty(shape, "float32")
        mod(*[tvm.nd.array(v) for v in inputs], out)
        err = np.abs(out.numpy().astype(np.float64) - want)
        assert np.all(err <= bound), f"{cpu} {k}x{k}/{stride}: max excess {np.max(err - bound):.3g}"


@pytest.mark.parametrize("c, o, ib", [(64, 64, 32), (32, 64, 16), (64, 128, 32)])
def test_amx_conv_blocks(c, o, ib):
    """AMX with 32-channel A rows (K = 32) and output blocks of 32 and 64 channels (two C tiles at
    a time, one A load for both), against float64 within the float32 sum bound."""
    _x86_only()
    target = Target(f"{X86} -mcpu=sapphirerapids")
    why_not = why_host_cannot_run(target)
    if why_not:
        pytest.skip(f"AMX code cannot run here: {why_not} (its assembly is checked in test_bf16_conv_per_cpu)")
    from kiln.runtime import amx
    assert amx.request_permission(), "Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)"
    mod, inputs, shape, want, bound = _conv_case(target, 1, 3, c, o, ib)
    assert re.search(r"\btdpbf16ps\b", mod.get_source("asm"))
    out = tvm.nd.empty(shape, "float32")
    mod(*[tvm.nd.array(v) for v in inputs], out)
    err = np.abs(out.numpy().astype(np.float64) - want)
    assert np.all(err <= bound), f"max excess {np.max(err - bound):.3g}"


@pytest.mark.parametrize("c, k, stride", [(3, 7, 2), (1, 3, 1), (4, 5, 1)])
def test_amx_plain_input_rows(c, k, stride):
    """A plain NCHW image of few channels (ResNet's RGB 7x7/2 conv) on AMX: rows of (kernel
    column, channel) read straight from a padded NHWC4 copy, against float64."""
    _x86_only()
    from kiln.topi import testing
    from kiln.topi.x86.conv2d_nchwc import config_for_nchwc, conv2d_NCHWc, prepack_kernel_nchwc, schedule_conv2d_NCHWc

    target = Target(f"{X86} -mcpu=sapphirerapids")
    h, o = 20, 32
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, c, h, h)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((o, c, k, k)).astype(ml_dtypes.bfloat16)
    with target:
        bn = config_for_nchwc(x.shape, w.shape, stride, k // 2, 1)["oc_bn"]
        X = te.placeholder(x.shape, "bfloat16", name="X")
        W = te.placeholder((o // bn, c, k, k, 1, bn), "bfloat16", name="W")
        out = conv2d_NCHWc(X, W, stride, k // 2, 1, "float32", out_channels=o)
        mod = tvm.build(schedule_conv2d_NCHWc([out]), [X, W, out], target=target)
    assert re.search(r"\btdpbf16ps\b", mod.get_source("asm"))
    why_not = why_host_cannot_run(target)
    if why_not:
        pytest.skip(f"AMX code cannot run here: {why_not}")
    res = tvm.nd.empty(tuple(int(d) for d in out.shape), "float32")
    mod(tvm.nd.array(x.view(np.uint16)), tvm.nd.array(prepack_kernel_nchwc(w, 1, bn).view(np.uint16)), res)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = testing.conv2d_nchw_python(x64, w64, stride, k // 2)
    bound = c * k * k * U32 * testing.conv2d_nchw_python(np.abs(x64), np.abs(w64), stride, k // 2)
    got = res.numpy().transpose(0, 1, 4, 2, 3).reshape(want.shape)
    assert np.all(np.abs(got - want) <= bound), f"max excess {np.max(np.abs(got - want) - bound):.3g}"


@pytest.mark.parametrize("c, o, hw, k, stride, dilation, ib, bn, plain_output", [
    (64, 64, (7, 7), 3, 1, 1, 32, 32, False),     # flat runs across rows: 2 junk pixels per row, rows added below
    (32, 16, (9, 11), 3, 1, 2, 16, 16, False),    # dilated, one 16-channel piece (one B tile per step)
    (64, 128, (6, 6), 1, 1, 1, 32, 64, True),     # 1x1 without padding, two pairs of pieces, NCHW output
    (32, 32, (13, 13), 3, 2, 1, 32, 32, False),   # strided: row runs of 7, an odd count (one discarded run)
    (32, 48, (14, 14), 1, 2, 1, 16, 16, False),   # 1x1/2
])
def test_amx_conv_runs(c, o, hw, k, stride, dilation, ib, bn, plain_output):
    """AMX runs of 16 virtual pixels across rows (stride 1) or of one output row (strided), two
    runs x two 16-channel pieces per step, in each shape that changes the run bookkeeping;
    against float64 within the float32 sum bound."""
    _x86_only()
    from kiln.topi import testing
    from kiln.topi.x86.conv2d_bf16 import prepack_kernel_nchwc_bf16
    from kiln.topi.x86.conv2d_nchwc import conv2d_NCHWc, schedule_conv2d_NCHWc

    target = Target(f"{X86} -mcpu=sapphirerapids")
    pad = dilation * (k // 2)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, c, *hw)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((o, c, k, k)).astype(ml_dtypes.bfloat16)
    with target:
        X = te.placeholder((1, c // ib, *hw, ib), "bfloat16", name="X")
        W = te.placeholder((o // bn, c // ib, k, k, ib // 2, bn, 2), "bfloat16", name="W")
        out = conv2d_NCHWc(X, W, stride, pad, dilation, "float32", out_channels=o, plain_output=plain_output)
        mod = tvm.build(schedule_conv2d_NCHWc([out]), [X, W, out], target=target)
    assert re.search(r"\btdpbf16ps\b", mod.get_source("asm"))
    why_not = why_host_cannot_run(target)
    if why_not:
        pytest.skip(f"AMX code cannot run here: {why_not}")
    xb = np.ascontiguousarray(x.reshape(1, c // ib, ib, *hw).transpose(0, 1, 3, 4, 2))
    res = tvm.nd.empty(tuple(int(d) for d in out.shape), "float32")
    mod(tvm.nd.array(xb.view(np.uint16)), tvm.nd.array(prepack_kernel_nchwc_bf16(w, ib, bn).view(np.uint16)), res)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = testing.conv2d_nchw_python(x64, w64, stride, pad, dilation)
    bound = c * k * k * U32 * testing.conv2d_nchw_python(np.abs(x64), np.abs(w64), stride, pad, dilation)
    got = res.numpy()
    if not plain_output:
        got = got.transpose(0, 1, 4, 2, 3).reshape(want.shape)
    assert np.all(np.abs(got - want) <= bound), f"max excess {np.max(np.abs(got - want) - bound):.3g}"
