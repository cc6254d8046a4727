"""x86 depthwise conv2d in the blocked NCHW{b}c layout against numpy."""

import numpy as np
import pytest

from kiln import te, topi
from kiln.errors import ShapeError
from kiln.topi import testing
from kiln.topi.x86.depthwise_conv2d_nchwc import default_config, prepack_depthwise_kernel


def to_blocked(x, b):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _run(runner, c, hw, k, stride, pad, b, cfg=None, packed=False, epilogue=False):
    a, wt = runner.rand(1, c, hw, hw), runner.rand(c, 1, k, k)
    kernel = prepack_depthwise_kernel(wt, b) if packed else wt
    A = te.placeholder((1, c // b, hw, hw, b), name="data")
    W = te.placeholder(kernel.shape, name="kernel")
    out = topi.x86.depthwise_conv2d_NCHWc(A, W, stride, pad, 1, cfg=cfg)
    assert out.op.tag == "depthwise_conv2d_NCHWc" and "tile_ow" in out.op.attrs["config"]
    args, inputs = [A, W], [to_blocked(a, b), kernel]
    ref = testing.depthwise_conv2d_nchw_python(a, wt, stride, pad)
    if epilogue:
        bias = runner.rand(c)
        B = te.placeholder((c // b, 1, 1, b), name="bias")
        out = topi.nn.clip(topi.add(out, B), 0.0, 6.0)
        args.append(B)
        inputs.append(bias.reshape(c // b, 1, 1, b))
        ref = np.clip(ref + bias.reshape(1, c, 1, 1), 0, 6)
    got = runner.run(topi.x86.schedule_depthwise_conv2d_NCHWc, out, args, inputs)
    np.testing.assert_allclose(got, to_blocked(ref, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,hw,k,stride,pad,b", [
    (16, 14, 3, 1, 1, 16),
    (16, 14, 3, 2, 1, 16),
    (16, 7, 3, 1, 1, 8),
    (16, 7, 5, 1, 2, 8),
    (32, 14, 5, 2, 2, 16),
    (64, 13, 3, 2, 1, 32),     # odd size, two vectors per pixel
    (32, 112, 3, 2, 1, 16),    # a realistic MobileNetV2 size
])
def test_depthwise_nchwc(runner, c, hw, k, stride, pad, b):
    _run(runner, c, hw, k, stride, pad, b)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("pad_at", ["root", "tile"])
def test_depthwise_nchwc_fused_bias_clip(runner, packed, pad_at):
    _run(runner, 32, 14, 3, 1, 1, 16, cfg={"pad_at": pad_at, "tile_ow": 4}, packed=packed, epilogue=True)
    _run(runner, 16, 14, 3, 2, 1, 8, cfg={"pad_at": pad_at, "tile_ow": 5}, packed=packed, epilogue=True)


def test_depthwise_nchwc_residual_add_and_padding_forms(runner):
    b = 16
    a, wt, r = runner.rand(1, 32, 9, 9), runner.rand(32, 1, 3, 3), runner.rand(1, 32, 9, 9)
    A = te.placeholder((1, 2, 9, 9, b), name="data")
    W = te.placeholder(wt.shape, name="kernel")
    R = te.placeholder((1, 2, 9, 9, b), name="residual")
    out = topi.add(topi.x86.depthwise_conv2d_NCHWc(A, W, 1, (1, 0, 1, 2), 1), R)
    ref = testing.conv2d_nchw_python(a, wt, 1, (1, 0, 1, 2), groups=32)
    got = runner.run(topi.x86.schedule_depthwise_conv2d_NCHWc, out, [A, W, R],
                     [to_blocked(a, b), wt, to_blocked(r, b)])
    # (top, left, bottom, right) = (1, 0, 1, 2): the output keeps the 9x9 size
    np.testing.assert_allclose(got, to_blocked(ref, b) + to_blocked(r, b), rtol=1e-4, atol=1e-4)


def test_prepack_depthwise_kernel_layout(runner):
    wt = runner.rand(32, 1, 3, 3)
    packed = prepack_depthwise_kernel(wt, 16)
    assert packed.shape == (2, 3, 3, 16)
    assert packed[1, 2, 0, 5] == wt[16 + 5, 0, 2, 0]


def test_depthwise_nchwc_rejects_bad_kernels():
    A = te.placeholder((1, 2, 8, 8, 16), name="data")
    with pytest.raises(ShapeError, match="multiplier"):
        topi.x86.depthwise_conv2d_NCHWc(A, te.placeholder((64, 1, 3, 3), name="kernel"), 1, 1, 1)
    with pytest.raises(ShapeError, match="'kernel'"):
        topi.x86.depthwise_conv2d_NCHWc(A, te.placeholder((2, 3, 3, 8), name="kernel"), 1, 1, 1)
    with pytest.raises(ShapeError, match="'data'"):
        topi.x86.depthwise_conv2d_NCHWc(te.placeholder((1, 32, 8, 8), name="data"),
                                        te.placeholder((32, 1, 3, 3), name="kernel"), 1, 1, 1)


@pytest.mark.parametrize("cpu, tile_ow, large_rows", [("skylake-avx512", 7, "root"), ("znver4", 7, "root"),
                                                     ("haswell", 4, "tile"), ("znver3", 4, "tile"),
                                                     ("x86-64-v2", 2, "tile")])
def test_default_config_places_padding(cpu, tile_ow, large_rows):
    # A 16-channel block is one AVX-512 vector (7 pixels fit), two AVX2 vectors (4 pixels of
    # 2 accumulators in 16 registers) or four SSE vectors. Large stride-1 rows pad in one pass
    # where the registers take wide tiles, else per tile (no wider tile to lose).
    from kiln.target import Target

    with Target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}"):
        assert default_config(56, 16, 3, 1)["pad_at"] == large_rows
        assert default_config(28, 16, 3, 2)["pad_at"] == "tile"
        assert default_config(7, 16, 3, 1) == {"tile_ow": tile_ow, "unroll_kh": True, "pad_at": "tile"}


U32 = 2.0 ** -24  # float32 unit roundoff


@pytest.mark.parametrize("dtype,out_dtype", [("bfloat16", "float32"), ("bfloat16", "bfloat16"), ("float16", "float16")])
@pytest.mark.parametrize("cpu", ["haswell", "skylake-avx512", "sapphirerapids", "znver3"])
def test_depthwise_nchwc_low_precision_per_cpu(cpu, dtype, out_dtype):
    """bfloat16 / float16 data and weights summed in float32 (converted once, in the padding
    stage, where the output is narrow too), or in float16 where AVX512-FP16 has half FMAs:
    within K * u * sum |a w| plus one rounding of the output type, against float64 numpy on the same rounded inputs; both padding
    placements; built for each CPU model, run where this machine can."""
    import kiln as tvm
    from kiln.target import Target
    from kiln.target.cpu_facts import cpu_facts, why_host_cannot_run

    ml_dtypes = pytest.importorskip("ml_dtypes", reason="numpy's bfloat16 (pip install ml_dtypes)")
    target = Target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    np_types = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
    u_out = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": U32}[out_dtype]
    c, hw, k, b = 48, 13, 3, 16
    native_half = dtype == "float16" and "avx512fp16" in cpu_facts(target).features
    u_sum = 2.0 ** -11 if native_half else U32  # AVX512-FP16 sums float16 taps in float16
    rng = np.random.default_rng(7)
    a, wt = (rng.standard_normal(s).astype(np_types[dtype]).astype(np.float64) for s in ((1, c, hw, hw), (c, 1, k, k)))
    for stride, pad_at in ((1, "root"), (2, "tile"), (1, "tile")):
        want = testing.depthwise_conv2d_nchw_python(a, wt, stride, 1)
        terms = testing.depthwise_conv2d_nchw_python(np.abs(a), np.abs(wt), stride, 1)
        bound = to_blocked(k * k * u_sum * terms + u_out * np.abs(want), b)
        with target:
            A = te.placeholder((1, c // b, hw, hw, b), dtype, name="data")
            W = te.placeholder((c // b, k, k, b), dtype, name="kernel")
            out = topi.x86.depthwise_conv2d_NCHWc(A, W, stride, 1, 1, out_dtype=out_dtype, cfg={"pad_at": pad_at})
            assert out.dtype == out_dtype
            mod = tvm.build(topi.x86.schedule_depthwise_conv2d_NCHWc([out]), [A, W, out], target=target)
        asm = mod.get_source("asm")
        assert "__truncsfbf2" not in asm and "__extendhfsf2" not in asm and "__truncsfhf2" not in asm
        if why_host_cannot_run(target):
            continue

        def arg(v, t):
            v = np.ascontiguousarray(v.astype(np_types[t]))
            return tvm.nd.array(v.view(np.uint16) if t == "bfloat16" else v)

        got = tvm.nd.empty(tuple(int(d) for d in out.shape), "uint16" if out_dtype == "bfloat16" else out_dtype)
        mod(arg(to_blocked(a, b), dtype), arg(prepack_depthwise_kernel(wt, b), dtype), got)
        got = got.numpy().view(np_types[out_dtype]) if out_dtype == "bfloat16" else got.numpy()
        err = np.abs(got.astype(np.float64) - to_blocked(want, b))
        assert np.all(err <= bound), f"{cpu} {dtype}->{out_dtype} {stride} {pad_at}: max excess {np.max(err - bound):.3g}"
