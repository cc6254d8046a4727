"""x86 expand (1x1 conv + bias + clip) fused with the depthwise conv after it, against numpy."""

import numpy as np
import pytest

from kiln import te, topi
from kiln.errors import ShapeError
from kiln.target import Target
from kiln.topi import testing
from kiln.topi.x86.conv2d_nchwc import prepack_kernel_nchwc
from kiln.topi.x86.depthwise_conv2d_nchwc import prepack_depthwise_kernel
from kiln.topi.x86.expand_depthwise import BUFFER_BYTES, default_config


def to_blocked(x, b):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def reference(x, w1, b1, w2, stride, pad, act):
    """numpy: the three ops as relay runs them unfused (NCHW)."""
    e = testing.conv2d_nchw_python(x, w1, 1, 0) + b1.reshape(1, -1, 1, 1)
    if act is not None:
        e = np.clip(e, act[0] if act[0] is not None else -np.inf, act[1] if act[1] is not None else np.inf)
    return testing.depthwise_conv2d_nchw_python(e.astype("float32"), w2, stride, pad)


def _run(runner, c1, c2, hw, k, stride, ib, b, act=(0.0, 6.0), cfg=None, epilogue=False):
    x, w1, b1, w2 = runner.rand(1, c1, hw, hw), runner.rand(c2, c1, 1, 1), runner.rand(c2), runner.rand(c2, 1, k, k)
    pad = k // 2
    X = te.placeholder((1, c1 // ib, hw, hw, ib), name="data")
    W1 = te.placeholder((c2 // b, c1 // ib, 1, 1, ib, b), name="expand_weight")
    B1 = te.placeholder((1, c2 // b, 1, 1, b), name="expand_bias")
    W2 = te.placeholder((c2 // b, k, k, b), name="depthwise_weight")
    out = topi.x86.expand_depthwise_NCHWc(X, W1, B1, W2, stride, pad, act[0] if act else None,
                                          act[1] if act else None, cfg=cfg)
    args = [X, W1, B1, W2]
    inputs = [to_blocked(x, ib), prepack_kernel_nchwc(w1, ib, b), b1.reshape(1, c2 // b, 1, 1, b),
              prepack_depthwise_kernel(w2, b)]
    want = reference(x, w1, b1, w2, stride, pad, act)
    if epilogue:  # the depthwise conv's own bias and ReLU6, fused onto the output tile
        b2 = runner.rand(c2)
        B2 = te.placeholder((1, c2 // b, 1, 1, b), name="bias")
        out = topi.nn.clip(topi.add(out, B2), 0.0, 6.0)
        args.append(B2)
        inputs.append(b2.reshape(1, c2 // b, 1, 1, b))
        want = np.clip(want + b2.reshape(1, c2, 1, 1), 0, 6)
    got = runner.run(topi.x86.schedule_expand_depthwise_NCHWc, out, args, inputs)
    np.testing.assert_allclose(got, to_blocked(want, b), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("c1,c2,hw,k,stride,ib,b", [
    (16, 96, 28, 3, 2, 8, 8),    # MobileNetV2's first expand, at a quarter of its size
    (24, 144, 14, 3, 1, 8, 8),
    (16, 48, 15, 3, 2, 16, 16),  # odd rows: the last row group and the padding meet
    (8, 32, 9, 5, 1, 8, 16),     # 5x5 depthwise, input and output blocks differ
    (16, 64, 7, 3, 1, 16, 32),   # a block of two vectors (or four)
])
def test_expand_depthwise_matches_numpy(runner, c1, c2, hw, k, stride, ib, b):
    _run(runner, c1, c2, hw, k, stride, ib, b)


@pytest.mark.parametrize("act", [None, (0.0, None), (-1.0, 1.0)])
def test_expand_depthwise_activations(runner, act):
    _run(runner, 16, 32, 10, 3, 1, 8, 8, act=act)


@pytest.mark.parametrize("cfg", [
    {"rows": 1, "chunks": 1, "tile_e": 1, "tile_ow": 1},
    {"rows": 3, "chunks": 2, "tile_e": 5, "tile_ow": 4},    # neither divides 14: tails everywhere
    {"rows": 14, "chunks": 4, "tile_e": 3, "tile_ow": 7},   # one row group: no recomputed rows
    {"rows": 2, "chunks": 3, "tile_e": 4, "tile_ow": 14},   # 3 does not divide 4 blocks: falls back to 1
])
def test_expand_depthwise_knobs_and_fused_epilogue(runner, cfg):
    _run(runner, 16, 32, 14, 3, 1, 8, 8, cfg=cfg, epilogue=True)
    _run(runner, 16, 32, 14, 3, 2, 8, 8, cfg=cfg, epilogue=True)


@pytest.mark.parametrize("cpu", ["haswell", "skylake-avx512"])
def test_default_config_keeps_the_buffer_small_and_the_tasks_many(cpu):
    with Target(f"llvm -mcpu={cpu}"):
        lanes = 16 if "avx512" in cpu else 8
        conf = default_config(56, 56, 114, 2, 3, 96 // lanes, lanes)
        rows_needed = conf["rows"] * 2 + 1
        assert rows_needed * 114 * conf["chunks"] * lanes * 4 <= BUFFER_BYTES
        assert conf["rows"] >= 4  # at most one recomputed row in eight
        assert (56 // conf["rows"]) * (96 // lanes // conf["chunks"]) >= 8
        assert 56 % conf["rows"] == 0 and (96 // lanes) % conf["chunks"] == 0
        # the register tiles fit the registers (16 on AVX2, 32 on AVX-512)
        assert conf["tile_e"] * conf["chunks"] + conf["chunks"] + 1 <= (16 if lanes == 8 else 32)
        assert conf["tile_ow"] <= (8 if lanes == 8 else 24)


def test_expand_depthwise_rejects_mismatched_weights():
    X = te.placeholder((1, 2, 8, 8, 8), name="data")
    W1 = te.placeholder((4, 2, 1, 1, 8, 8), name="expand_weight")
    B1 = te.placeholder((1, 4, 1, 1, 8), name="expand_bias")
    with pytest.raises(ShapeError, match="'depthwise_weight' .* must be \\(4, KH, KW, 8\\)"):
        topi.x86.expand_depthwise_NCHWc(X, W1, B1, te.placeholder((2, 3, 3, 8), name="w2"))
    with pytest.raises(ShapeError, match="'expand_weight' .* must be \\(4, 2, 1, 1, 8, 8\\)"):
        topi.x86.expand_depthwise_NCHWc(X, te.placeholder((4, 1, 1, 1, 16, 8)), B1, te.placeholder((4, 3, 3, 8)))
    with pytest.raises(ShapeError, match="'expand_bias' has 2 dims; expected 5"):
        topi.x86.expand_depthwise_NCHWc(X, W1, te.placeholder((1, 32)), te.placeholder((4, 3, 3, 8)))


U32 = 2.0 ** -24  # float32 unit roundoff
X86 = "llvm -mtriple=x86_64-linux-gnu"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("cpu", ["haswell", "skylake-avx512", "sapphirerapids", "znver3"])
def test_expand_depthwise_low_precision_per_cpu(cpu, dtype):
    """bfloat16 / float16 data and weights, computed in float32 and rounded once at the store:
    within the float32 bound (Higham: K terms, K * u * the sum of |terms|) plus one rounding of
    the output, against float64 numpy on the same (rounded) inputs; built for each CPU model,
    run where this machine can."""
    import kiln as tvm
    from kiln.target.cpu_facts import why_host_cannot_run

    ml_dtypes = pytest.importorskip("ml_dtypes", reason="numpy's bfloat16 (pip install ml_dtypes)")
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    u_out = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11  # unit roundoff of the output type
    c1, c2, hw, k, stride, ib, b = 16, 48, 15, 3, 2, 16, 16
    rng = np.random.default_rng(5)
    x, w1, b1, w2 = (rng.standard_normal(s).astype(np_dtype).astype(np.float64)
                     for s in ((1, c1, hw, hw), (c2, c1, 1, 1), (c2,), (c2, 1, k, k)))
    e = np.clip(testing.conv2d_nchw_python(x, w1, 1, 0) + b1.reshape(1, -1, 1, 1), 0, 6)
    want = testing.depthwise_conv2d_nchw_python(e, w2, stride, k // 2)
    e_abs = testing.conv2d_nchw_python(np.abs(x), np.abs(w1), 1, 0) + np.abs(b1).reshape(1, -1, 1, 1)
    terms = testing.depthwise_conv2d_nchw_python(e_abs, np.abs(w2), stride, k // 2)
    bound = to_blocked((c1 + 1 + k * k) * U32 * terms + u_out * np.abs(want), b)
    target = Target(f"{X86} -mcpu={cpu}")
    with target:
        X = te.placeholder((1, c1 // ib, hw, hw, ib), dtype, name="data")
        W1 = te.placeholder((c2 // b, c1 // ib, 1, 1, ib, b), dtype, name="expand_weight")
        B1 = te.placeholder((1, c2 // b, 1, 1, b), dtype, name="expand_bias")
        W2 = te.placeholder((c2 // b, k, k, b), dtype, name="depthwise_weight")
        out = topi.x86.expand_depthwise_NCHWc(X, W1, B1, W2, stride, k // 2, 0.0, 6.0)
        assert out.dtype == dtype
        mod = tvm.build(topi.x86.schedule_expand_depthwise_NCHWc([out]), [X, W1, B1, W2, out], target=target)
    asm = mod.get_source("asm")
    assert "__truncsfbf2" not in asm and "__extendhfsf2" not in asm and "__truncsfhf2" not in asm
    if why_host_cannot_run(target):
        return

    def arg(v):
        v = np.ascontiguousarray(v.astype(np_dtype))
        return tvm.nd.array(v.view(np.uint16) if dtype == "bfloat16" else v)

    inputs = [to_blocked(x, ib), prepack_kernel_nchwc(w1, ib, b), b1.reshape(1, c2 // b, 1, 1, b),
              prepack_depthwise_kernel(w2, b)]
    got = tvm.nd.empty(tuple(int(d) for d in out.shape), "uint16" if dtype == "bfloat16" else dtype)
    mod(*[arg(v) for v in inputs], got)
    got = got.numpy().view(np_dtype) if dtype == "bfloat16" else got.numpy()
    err = np.abs(got.astype(np.float64) - to_blocked(want, b))
    assert np.all(err <= bound), f"{cpu} {dtype}: max excess {np.max(err - bound):.3g}"
