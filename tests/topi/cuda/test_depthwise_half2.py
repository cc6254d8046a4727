"""float16 depthwise convolutions on CUDA in half2 (topi.gpu.group_conv2d_nchw with
``KILN_CUDA_HALF2_DEPTHWISE=1``): two channels per work-item as one float16x2 vector, each window
step one ``fma.rn.f16x2`` in the PTX (NVRTC, no GPU needed); without the switch (the default),
float32 data and odd channel counts keep float sums.
The gpu-marked tests run the kernels against a float64 numpy convolution within the bound of
float16 sums."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, te, topi
from kiln.codegen import cuda as cg
from kiln.topi.gpu import depthwise_conv2d as dw

pytestmark = pytest.mark.skipif(not cg.have_nvrtc(),
                                reason="needs NVRTC: pip install -e '.[cuda]' (cuda-bindings, nvidia-cuda-nvrtc)")

TARGET = "cuda -arch=sm_90"


@pytest.fixture(autouse=True)
def half2_on(monkeypatch):
    monkeypatch.setenv("KILN_CUDA_HALF2_DEPTHWISE", "1")
# (batch, channels, height, width, kernel, stride, pad): MobileNet-like 3x3 stride 1 and 2 (two
# columns per work-item), an odd width (one column), batch 2, a 5x5 window
SHAPES = [(1, 32, 16, 16, 3, 1, 1), (1, 16, 15, 15, 3, 2, 1), (2, 8, 7, 7, 3, 1, 1), (1, 24, 12, 12, 5, 2, 2)]


def build(shape, dtype="float16", out_dtype="float32"):
    n, c, h, w, k, stride, pad = shape
    data = te.placeholder((n, c, h, w), dtype, name="data")
    kernel = te.placeholder((c, 1, k, k), dtype, name="kernel")
    with tvm.target.Target(TARGET):
        out = dw.group_conv2d_nchw(data, kernel, stride, pad, 1, out_dtype, groups=c)
        s = topi.gpu.schedule_conv2d_nchw([out])
    return tvm.build(s, [data, kernel, out], target=TARGET, name="dw"), out


def ptx_of(f):
    (dev,) = [m for m in f.imported_modules if m.type_key == "cuda"]
    return dev.get_source(), dev.get_source("ptx")


def tile(out):
    conv = out.op.input_tensors[0] if out.op.tag == "elemwise" else out
    return conv.op.attrs["gpu_config"]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_float16_depthwise_sums_in_half2(shape):
    f, out = build(shape)
    src, ptx = ptx_of(f)
    conf = tile(out)
    assert conf["tile_f"][3] == 2 and "kiln_hfma2(" in src
    # one f16x2 FMA per window step and register column of the work-item's two channels
    k = shape[4]
    assert ptx.count("fma.rn.f16x2") == k * k * conf["tile_y"][3] * conf["tile_x"][3]
    assert str(out.dtype) == "float32" and str(out.op.input_tensors[0].dtype) == "float16"


def test_float_sums_where_half2_does_not_apply(monkeypatch):
    for shape, dtype in (((1, 32, 16, 16, 3, 1, 1), "float32"), ((1, 15, 16, 16, 3, 1, 1), "float16")):
        _, ptx = ptx_of(build(shape, dtype)[0])
        assert "f16x2" not in ptx
    for value in ("0", None):  # off, and the default
        if value is None:
            monkeypatch.delenv("KILN_CUDA_HALF2_DEPTHWISE")
        else:
            monkeypatch.setenv("KILN_CUDA_HALF2_DEPTHWISE", value)
        f, out = build(SHAPES[0])
        assert "f16x2" not in ptx_of(f)[1] and str(out.dtype) == "float32" and out.op.tag != "elemwise"


def test_bfloat16x2_register_updates_are_no_half2():
    """A bfloat16x2 update of registers is no half2 arithmetic (bfloat16 values as halves lose their
    range): it stays float arithmetic rounded when stored."""
    a = te.placeholder((64, 2), "bfloat16", name="A")
    b = te.placeholder((64, 2), "bfloat16", name="B")
    c = te.compute((64, 2), lambda i, j: a[i, j] * b[i, j] + a[i, j], name="C")
    s = te.create_schedule(c.op)
    local = s.cache_write(c, "local")
    s[c].bind(s[c].op.axis[0], te.thread_axis("threadIdx.x"))
    s[local].compute_at(s[c], s[c].op.axis[0])
    s[local].vectorize(s[local].op.axis[1])
    f = tvm.build(s, [a, b, c], target=TARGET)
    src, ptx = ptx_of(f)
    assert "kiln_h" not in src and "f16x2" not in ptx


def test_relay_float16_depthwise_takes_half2_with_its_epilogue():
    x = relay.var("x", shape=(1, 32, 16, 16))
    w = relay.const(np.random.default_rng(0).standard_normal((32, 1, 3, 3)).astype("float32"))
    b = relay.const(np.random.default_rng(1).standard_normal(32).astype("float32"))
    y = relay.nn.conv2d(x, w, padding=(1, 1), groups=32, channels=32, kernel_size=(3, 3))
    y = relay.clip(relay.nn.bias_add(y, b), 0.0, 6.0)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    mod = relay.transform.ToMixedPrecision("float16", accumulation_dtype="float32")(mod)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=tvm.target.Target(TARGET, host="llvm"))
    (dev,) = [m for m in lib.get_lib().imported_modules if m.type_key == "cuda"]
    kernels = dev.get_source().split('extern "C"')[1:]
    (conv,) = [k for k in kernels if "conv2d" in k]
    assert "kiln_hfma2(" in conv and "6.0f" in conv  # the clip fused after the half2 sums
    assert "fma.rn.f16x2" in dev.get_source("ptx")


# -- on the GPU -----------------------------------------------------------------------------------

def conv64(x, w, stride, pad):
    x, w = x.astype("float64"), w.astype("float64")
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncyxij,cij->ncyx", windows, w[:, 0])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_half2_depthwise_runs_within_the_float16_sum_bound(shape):
    n, c, h, w, k, stride, pad = shape
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, c, h, w)).astype("float16")
    wt = rng.standard_normal((c, 1, k, k)).astype("float16")
    f, _ = build(shape)
    dev = tvm.cuda(0)
    want = conv64(x, wt, stride, pad)
    got = tvm.nd.array(np.full(want.shape, np.nan, "float32"), dev)  # every element must be written
    f(tvm.nd.array(x, dev), tvm.nd.array(wt, dev), got)
    # k*k float16 roundings of a running sum (fma: one per step), each at most 2^-11 of the sum
    # so far, which is at most the sum of the |products|
    bound = 1.01 * k * k * 2.0 ** -11 * conv64(np.abs(x), np.abs(wt), stride, pad)
    err = np.abs(got.numpy() - want)
    assert np.all(err <= bound), f"max error {err.max()} against bound {bound[err > bound].min()}"
