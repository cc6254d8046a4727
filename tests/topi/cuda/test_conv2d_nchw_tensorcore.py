"""float16 NCHW convolutions on tensor cores (topi.cuda.conv2d_nchw_tensorcore): the implicit
GEMM's compute equals a float64 numpy convolution on the CPU (its index arithmetic, the zero padding of
channels, reduction terms and pixels, split-K); its kernels compile to PTX with wmma and 128-bit
tile loads wherever NVRTC is installed; relay puts whole float16 models' convolutions there.
The gpu-marked tests run the kernels against that reference."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, te, topi
from kiln.codegen import cuda as cg
from kiln.topi.cuda import conv2d_tensorcore as ctc, tensorcore as tc

pytestmark = pytest.mark.skipif(not cg.have_nvrtc(),
                                reason="needs NVRTC: pip install -e '.[cuda]' (cuda-bindings, nvidia-cuda-nvrtc)")

TARGET = "cuda -arch=sm_90"
# (batch, channels, height, width, filters, kernel, stride, pad): a ResNet stem (3 channels,
# 147 reduction terms), 1x1 pixel-contiguous, 3x3 with 14 x 14 pixels (rows padded to 16),
# 7 x 7 with split-K (rows padded to 8), 24 filters (padded to 32), strided with batch 2, 28 x 28
# in runs of 4 pixels, two images of padded rows
SHAPES = [(1, 3, 32, 32, 64, 7, 2, 3), (1, 64, 16, 16, 64, 1, 1, 0), (1, 64, 14, 14, 64, 3, 1, 1),
          (1, 128, 7, 7, 128, 3, 1, 1), (1, 32, 8, 8, 24, 1, 1, 0), (2, 16, 9, 9, 32, 3, 2, 1),
          (1, 32, 28, 28, 32, 3, 1, 1), (2, 64, 14, 14, 64, 3, 1, 1)]


def conv(shape, out_dtype="float32", dtype="float16"):
    n, c, h, w, f, k, stride, pad = shape
    data = te.placeholder((n, c, h, w), dtype, name="data")
    kernel = te.placeholder((f, c, k, k), dtype, name="kernel")
    return data, kernel, ctc.conv2d_nchw_tensorcore(data, kernel, stride, pad, 1, out_dtype)


def reference(shape, x, w):
    """The convolution in float64 numpy (CI has no torch): windows of the padded input times the filters."""
    *_, stride, pad = shape
    return conv64(x, w, stride, pad)


def conv64(x, w, stride, pad):
    x, w = x.astype("float64"), w.astype("float64")  # (bfloat16 through ml_dtypes: exact)
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncyxij,fcij->nfyx", windows, w)


def inputs(shape, seed=0, dtype="float16"):
    n, c, h, w, f, k, *_ = shape
    rng = np.random.default_rng(seed)
    if dtype == "bfloat16":
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    return rng.standard_normal((n, c, h, w)).astype(dtype), rng.standard_normal((f, c, k, k)).astype(dtype)


def _gemm(out):
    return tc._find(out)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_compute_equals_float64_on_the_cpu(shape):
    """The compute alone (no tensorization), built for the host: the gather of the input by
    (channel, ky, kx) x pixel, the padding of every size to the tiles, the split-K sum."""
    data, kernel, out = conv(shape)
    f = tvm.build(te.create_schedule(out.op), [data, kernel, out], target="llvm")
    x, w = inputs(shape)
    got = tvm.nd.empty(tuple(int(d) for d in out.shape), "float32")
    f(tvm.nd.array(x), tvm.nd.array(w), got)
    want = reference(shape, x, w)
    # float32 sums of float16 products: rounding of at most k terms of |x w|
    bound = 1e-6 * np.abs(x).max() * np.abs(w).max() * w[0].size
    np.testing.assert_allclose(got.numpy(), want, atol=bound, rtol=0)


def _bound(x, w):
    """float32 sums of exact products: k roundings of at most 2^-24 of a partial sum."""
    x, w = np.abs(x.astype("float64")), np.abs(w.astype("float64"))
    return w[0].size * 2.0 ** -24 * x.max() * w.max() * w[0].size


BF16 = (1, 32, 14, 14, 64, 3, 1, 1)


def test_bfloat16_conv_compiles_to_bf16_wmma():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="numpy's bfloat16 (pip install ml_dtypes)")
    del ml_dtypes
    f = build(BF16, dtype="bfloat16")
    ptx = [m for m in f.imported_modules if m.type_key == "cuda"][0].get_source("ptx")
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16.bf16.f32" in ptx
    assert "wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16" in ptx
    with pytest.raises(ValueError, match="accumulate in float32"):
        conv(BF16, out_dtype="bfloat16", dtype="bfloat16")


def test_split_k_and_padding_are_chosen_for_batch_one_layers():
    _, _, out = conv((1, 512, 7, 7, 512, 3, 1, 1))
    gemm = _gemm(out)
    conf = gemm.op.attrs["tensorcore_config"]
    assert conf["split_k"] > 1 and conf["b_layout"] == "row_major"
    assert [int(d) for d in gemm.shape] == [conf["split_k"], 512, 64]  # 49 pixels padded to 64
    _, _, out = conv((1, 3, 32, 32, 64, 7, 2, 3))
    assert int(_gemm(out).op.reduce_axis[0].dom.extent) * _gemm(out).op.attrs["tensorcore_config"]["split_k"] == 160


def test_gathered_pixels_come_in_runs_within_a_row():
    """3x3 convs gather their pixels in runs of 8 (4) that never cross an output row: 56 and 28
    columns hold whole runs, 14 and 7 columns are padded to rows of 16 and 8 where the reduction
    is split (the product's columns stay 224 and 64); 1x1 stride-1 convs read their input rows."""
    def layout(shape):
        with tvm.target.Target(TARGET):
            gemm = _gemm(conv(shape)[2])
        conf = gemm.op.attrs["tensorcore_config"]
        return gemm.op.attrs["conv_nchw_output"][4], conf.get("column_runs", 1), int(gemm.shape[2]), conf["split_k"]

    assert layout((1, 64, 56, 56, 64, 3, 1, 1))[:3] == (56, 8, 3136)
    assert layout((1, 32, 28, 28, 32, 3, 1, 1))[:3] == (28, 4, 832)
    assert layout((1, 256, 14, 14, 256, 3, 1, 1)) == (16, 8, 224, 8)
    assert layout((1, 512, 7, 7, 512, 3, 1, 1)) == (8, 8, 64, 16)
    assert layout((1, 64, 16, 16, 64, 1, 1, 0))[:2] == (16, 1)
    # the fetch finds a run's output row once: no division by the row length per element
    src = [m for m in build((1, 128, 7, 7, 128, 3, 1, 1)).imported_modules if m.type_key == "cuda"][0].get_source()
    fetch = [line for line in src.splitlines() if "conv_im2col_shared[" in line and "] = " in line]
    assert fetch and not any(re.search(r"[/%] 7\b", line) for line in fetch)


def build(shape, target=TARGET, dtype="float16"):
    with tvm.target.Target(target):
        data, kernel, out = conv(shape, dtype=dtype)
        s = topi.gpu.schedule_conv2d_nchw([out])
    return tvm.build(s, [data, kernel, out], target=target, name="conv_tc")


@pytest.mark.parametrize("shape", SHAPES[:4], ids=str)
def test_kernels_compile_to_wmma_with_row_major_pixels(shape):
    dev = [m for m in build(shape).imported_modules if m.type_key == "cuda"][0]
    src, ptx = dev.get_source(), dev.get_source("ptx")
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32" in ptx  # B (pixels) row-major
    assert "wmma.load.b.sync.aligned.row.m16n16k16.shared.f16" in ptx
    if shape[5] == 1:  # 1x1 stride 1: the input rows are loaded 8 halves at a time
        assert "*((uint4*)(conv_im2col_shared + " in src
    if shape[1] * shape[5] ** 2 % 16 == 0:  # OIHW rows: 16-byte copies (cp.async on sm_80+)
        assert "cp.async.cg.shared.global" in src or "*((uint4*)(conv_weight_shared + " in src


def test_topi_gpu_takes_tensor_cores_for_float16_on_cuda_only():
    data = te.placeholder((1, 16, 8, 8), "float16")
    kernel = te.placeholder((32, 16, 3, 3), "float16")
    with tvm.target.Target("cuda"):
        assert tc.is_tensorcore(topi.gpu.conv2d_nchw(data, kernel, 1, 1, 1, "float32"))
        k32 = te.placeholder((32, 16, 3, 3), "float32")
        assert not tc.is_tensorcore(topi.gpu.conv2d_nchw(te.placeholder((1, 16, 8, 8)), k32, 1, 1, 1))
        depthwise = te.placeholder((16, 1, 3, 3), "float16")
        assert not tc.is_tensorcore(topi.gpu.conv2d_nchw(data, depthwise, 1, 1, 1, "float32", groups=16))
    with tvm.target.Target("opencl"):
        assert not tc.is_tensorcore(topi.gpu.conv2d_nchw(data, kernel, 1, 1, 1, "float32"))


def relay_conv_block(dtype="float16"):
    """conv (3 channels) + bias + relu, conv + batch-norm-like scale + residual add, like a ResNet."""
    x = relay.var("x", shape=(1, 3, 32, 32), dtype=dtype)
    w1 = relay.var("w1", shape=(32, 3, 3, 3), dtype=dtype)
    b1 = relay.var("b1", shape=(32,), dtype=dtype)
    w2 = relay.var("w2", shape=(32, 32, 3, 3), dtype=dtype)
    s2 = relay.var("s2", shape=(32, 1, 1), dtype=dtype)
    y = relay.nn.relu(relay.nn.bias_add(relay.cast(relay.nn.conv2d(x, w1, padding=(1, 1), out_dtype="float32"), dtype), b1))
    z = relay.cast(relay.nn.conv2d(y, w2, padding=(1, 1), out_dtype="float32"), dtype) * s2 + y
    return tvm.IRModule.from_expr(relay.Function([x, w1, b1, w2, s2], relay.nn.relu(z)))


def build_relay(mod, target=TARGET):
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target=tvm.target.Target(target, host="llvm"))


def test_relay_float16_convs_take_tensor_cores_with_fused_epilogues():
    lib = build_relay(relay_conv_block())
    src = lib.get_lib().get_source("cu")
    kernels = src.split('extern "C" __global__')[1:]
    names = [re.search(r"void (?:__launch_bounds__\(\d+\) )?(\w+)\(", k).group(1) for k in kernels]
    on_tensor_cores = [n for n, k in zip(names, kernels) if "kiln_wmma_mma" in k]
    assert len(on_tensor_cores) == 2 and all("conv2d" in n for n in on_tensor_cores)
    # the reductions are not split (1024 pixels fill the blocks): each conv is one kernel, the
    # product's tile in shared memory, then its whole epilogue (cast, bias, relu, residual)
    assert len(kernels) == 2 and any("conv2d_cast_multiply_add_nn_relu" in n for n in names)
    assert all("__shared__ float conv2d_gemm[" in k for k in kernels)


def test_relay_bfloat16_convs_take_tensor_cores_with_fused_epilogues():
    """The float32 block after ToMixedPrecision("bfloat16") (as whole bfloat16 models are made)."""
    mod = relay.transform.InferType()(relay_conv_block("float32"))
    mod = relay.transform.ToMixedPrecision("bfloat16", accumulation_dtype="float32")(mod)
    dev = [m for m in build_relay(mod).get_lib().imported_modules if m.type_key == "cuda"][0]
    kernels = dev.get_source().split('extern "C" __global__')[1:]
    convs = [k for k in kernels if "kiln_wmma_mma" in k]  # (the others cast the float32 parameters)
    assert len(convs) == 2 and all("__shared__ float conv2d_gemm[" in k and "_conv2d_" in k for k in convs)
    assert "kiln_bf16* __restrict__" in convs[1]  # bfloat16 tensors between the kernels
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16.bf16.f32" in dev.get_source("ptx")


@pytest.mark.parametrize("height", [1, 8])
def test_relay_broadcast_epilogues_fuse_unless_an_axis_is_one_pixel(height):
    """A batch-norm-like scale of shape (C, 1, 1) reads the conv at batch 0 (and at row 0 of a
    one-row image): the fused epilogue's loops must still cover exactly the product's tile, else
    the conv keeps its epilogue kernel (one row: the pixel index would not fold back)."""
    x = relay.var("x", shape=(1, 32, height, 64), dtype="float16")
    w = relay.var("w", shape=(32, 32, 1, 1), dtype="float16")
    scale = relay.const(np.full((32, 1, 1), 0.5, "float16"))
    y = relay.nn.relu(relay.cast(relay.nn.conv2d(x, w, out_dtype="float32"), "float16") * scale)
    src = build_relay(tvm.IRModule.from_expr(relay.Function([x, w], y))).get_lib().get_source("cu")
    assert len(src.split('extern "C" __global__')[1:]) == (2 if height == 1 else 1)


def test_relay_split_k_convs_sum_their_slices_in_the_epilogue_kernel():
    """A 7 x 7 layer's reduction is split over blocks (few pixels): the slices meet in a second
    kernel, which applies the epilogue; the product kernel writes its float slices to global memory."""
    x = relay.var("x", shape=(1, 256, 7, 7), dtype="float16")
    w = relay.var("w", shape=(256, 256, 3, 3), dtype="float16")
    b = relay.var("b", shape=(256,), dtype="float16")
    y = relay.nn.relu(relay.nn.bias_add(relay.cast(relay.nn.conv2d(x, w, padding=(1, 1), out_dtype="float32"),
                                                   "float16"), b))
    src = build_relay(tvm.IRModule.from_expr(relay.Function([x, w, b], y))).get_lib().get_source("cu")
    kernels = src.split('extern "C" __global__')[1:]
    assert len(kernels) == 2 and "kiln_wmma_mma" in kernels[0] and "kiln_wmma_mma" not in kernels[1]
    assert "__shared__ float conv2d_gemm[" not in kernels[0] and "float* __restrict__ conv2d_gemm" in kernels[1]


# -- on the GPU -----------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_conv_runs(shape):
    dev = tvm.cuda(0)
    f = build(shape)
    x, w = inputs(shape, seed=1)
    want = reference(shape, x, w)
    got = tvm.nd.array(np.full(want.shape, np.nan, "float32"), dev)  # every element must be written
    f(tvm.nd.array(x, dev), tvm.nd.array(w, dev), got)
    bound = 1e-6 * np.abs(x).max() * np.abs(w).max() * w[0].size
    np.testing.assert_allclose(got.numpy(), want, atol=bound, rtol=0)


@pytest.mark.gpu
def test_bfloat16_conv_runs():
    pytest.importorskip("ml_dtypes", reason="numpy's bfloat16 (pip install ml_dtypes)")
    dev = tvm.cuda(0)
    f = build(BF16, dtype="bfloat16")
    x, w = inputs(BF16, seed=3, dtype="bfloat16")
    want = reference(BF16, x, w)
    got = tvm.nd.array(np.full(want.shape, np.nan, "float32"), dev)
    # kiln holds bfloat16 tensors as their bits (uint16 arrays)
    f(tvm.nd.array(x.view(np.uint16), dev), tvm.nd.array(w.view(np.uint16), dev), got)
    np.testing.assert_allclose(got.numpy(), want, atol=_bound(x, w), rtol=0)


@pytest.mark.gpu
def test_relay_block_runs_and_matches_float64():
    from kiln.contrib import graph_executor

    lib = build_relay(relay_conv_block())
    rng = np.random.default_rng(2)
    vals = {"x": rng.standard_normal((1, 3, 32, 32)), "w1": rng.standard_normal((32, 3, 3, 3)) * 0.3,
            "b1": rng.standard_normal(32) * 0.1, "w2": rng.standard_normal((32, 32, 3, 3)) * 0.1,
            "s2": rng.standard_normal((32, 1, 1)) * 0.5}
    vals = {k: v.astype("float16") for k, v in vals.items()}
    m = graph_executor.GraphModule(lib["default"](tvm.cuda(0)))
    m.set_input(**vals)
    m.run()
    m.run()  # the CUDA graph's replay
    got = m.get_output(0).numpy().astype("float64")
    t = {k: v.astype("float64") for k, v in vals.items()}
    y = np.maximum(conv64(t["x"], t["w1"], 1, 1) + t["b1"].reshape(1, -1, 1, 1), 0)
    want = np.maximum(conv64(y, t["w2"], 1, 1) * t["s2"] + y, 0)
    # float16 storage of y and of the output: a few ulps of float16 relative to the largest value
    np.testing.assert_allclose(got, want, atol=4e-3 * np.abs(want).max(), rtol=0)
