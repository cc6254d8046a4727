"""conv2d NCHW (direct, shared memory) and depthwise conv2d on OpenCL against numpy."""

import numpy as np
import pytest
from gpu_runner import TARGETS, TOL, package, rand, run

from kiln.topi.testing import conv2d_nchw_python, depthwise_conv2d_nchw_python

pytestmark = pytest.mark.opencl

CONV = [  # (N, C, H, W, F, K, stride, pad)
    (1, 16, 14, 14, 32, 3, 1, 1),
    (1, 3, 32, 32, 16, 7, 2, 3),   # a stem: 3 channels, stride 2, 7x7
    (2, 8, 9, 9, 12, 1, 1, 0),     # odd sizes, 1x1, batch 2
    (1, 24, 8, 8, 20, 3, 2, 1),
    # untuned defaults at batch-1 model sizes: 8 outputs per work-item, whole 3x3 window per step
    (1, 8, 56, 56, 64, 3, 1, 1),
    (1, 3, 112, 112, 16, 7, 2, 3),  # the stem: one input channel of a 7x7 stride-2 window per step
    (1, 64, 14, 14, 96, 1, 2, 0),   # strided 1x1 (ResNet's projection shortcut)
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", CONV, ids=[f"{c[1]}x{c[2]}-{c[4]}k{c[5]}s{c[6]}" for c in CONV])
def test_conv2d_nchw(target, shape):
    n, c, h, w, f, k, s, p = shape
    rng = np.random.default_rng(0)
    x, wt = rand(rng, n, c, h, w), rand(rng, f, c, k, k)
    pkg = package(target)
    got = run(target, lambda a, b: pkg.conv2d_nchw(a, b, s, p, 1, "float32"), pkg.schedule_conv2d_nchw, [x, wt])
    np.testing.assert_allclose(got, conv2d_nchw_python(x, wt, s, p), **TOL)


@pytest.mark.parametrize("target", TARGETS)
def test_conv2d_bias_relu_epilogue(target):
    """The elementwise ops after a conv (relay's fused conv + bias + relu) run in its kernel."""
    from kiln import te, topi

    rng = np.random.default_rng(1)
    x, wt, b = rand(rng, 1, 8, 12, 12), rand(rng, 16, 8, 3, 3), rand(rng, 16)
    pkg = package(target)

    def make(a, w, bias):
        conv = pkg.conv2d_nchw(a, w, 1, 1, 1, "float32")
        return topi.nn.relu(te.compute(conv.shape, lambda n, f, y, xx: conv[n, f, y, xx] + bias[f], tag="broadcast"))

    got = run(target, make, pkg.schedule_conv2d_nchw, [x, wt, b])
    want = np.maximum(conv2d_nchw_python(x, wt, 1, 1) + b[None, :, None, None], 0)
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("target", TARGETS)
def test_conv2d_tuned_config(target):
    """A config with virtual threads and several channel steps (what a tuner may pick)."""
    rng = np.random.default_rng(2)
    x, wt = rand(rng, 1, 16, 8, 8), rand(rng, 16, 16, 3, 3)
    pkg = package(target)
    cfg = {"tile_f": [-1, 2, 4, 2], "tile_y": [-1, 1, 4, 2], "tile_x": [-1, 1, 8, 1], "tile_rc": [-1, 4],
           "tile_ry": [-1, 3], "tile_rx": [-1, 1], "auto_unroll_max_step": 0, "unroll_explicit": 0}
    got = run(target, lambda a, b: pkg.conv2d_nchw(a, b, 1, 1, 1, "float32", cfg=cfg), pkg.schedule_conv2d_nchw,
              [x, wt])
    np.testing.assert_allclose(got, conv2d_nchw_python(x, wt, 1, 1), **TOL)


DEPTHWISE = [  # (C, H, W, K, stride, pad)
    (16, 14, 14, 3, 1, 1),
    (8, 15, 15, 3, 2, 1),
    (32, 7, 7, 5, 1, 2),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", DEPTHWISE, ids=[f"{d[0]}x{d[1]}k{d[3]}s{d[4]}" for d in DEPTHWISE])
def test_depthwise_conv2d_as_grouped(target, shape):
    """relay's depthwise conv: conv2d with groups == channels, OIHW kernel (C, 1, K, K)."""
    c, h, w, k, s, p = shape
    rng = np.random.default_rng(3)
    x, wt = rand(rng, 1, c, h, w), rand(rng, c, 1, k, k)
    pkg = package(target)
    got = run(target, lambda a, b: pkg.conv2d_nchw(a, b, s, p, 1, "float32", groups=c), pkg.schedule_conv2d_nchw,
              [x, wt])
    want = depthwise_conv2d_nchw_python(x, wt.reshape(c, 1, k, k), s, p)
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("target", TARGETS)
def test_depthwise_conv2d_nchw(target):
    """topi's depthwise compute (kernel C x multiplier x K x K)."""
    rng = np.random.default_rng(4)
    x, wt = rand(rng, 1, 8, 10, 10), rand(rng, 8, 1, 3, 3)
    pkg = package(target)
    got = run(target, lambda a, b: pkg.depthwise_conv2d_nchw(a, b, 1, 1, 1, "float32"),
              pkg.schedule_depthwise_conv2d_nchw, [x, wt])
    np.testing.assert_allclose(got, depthwise_conv2d_nchw_python(x, wt, 1, 1), **TOL)


@pytest.mark.parametrize("target", TARGETS)
def test_grouped_conv2d(target):
    rng = np.random.default_rng(5)
    x, wt = rand(rng, 1, 8, 9, 9), rand(rng, 12, 2, 3, 3)
    pkg = package(target)
    got = run(target, lambda a, b: pkg.conv2d_nchw(a, b, 1, 1, 1, "float32", groups=4), pkg.schedule_conv2d_nchw,
              [x, wt])
    np.testing.assert_allclose(got, conv2d_nchw_python(x, wt, 1, 1, groups=4), **TOL)


@pytest.mark.parametrize("shape", [(1, 16, 14, 14, 32), (2, 8, 7, 7, 12), (1, 4, 9, 6, 8)],
                         ids=["16x14-32", "batch2-odd", "rect"])
def test_conv2d_winograd(shape):
    """Winograd F(2x2, 3x3): four kernels in one function (transforms, 16 tiled products, inverse)."""
    from kiln import topi

    n, c, h, w, k = shape
    rng = np.random.default_rng(6)
    x, wt = rand(rng, n, c, h, w), rand(rng, k, c, 3, 3)
    got = run("opencl", lambda a, b: topi.gpu.conv2d_nchw_winograd(a, b, 1, 1, 1, "float32"),
              topi.gpu.schedule_conv2d_nchw_winograd, [x, wt])
    np.testing.assert_allclose(got, conv2d_nchw_python(x, wt, 1, 1), rtol=1e-4, atol=1e-4)


def test_conv2d_winograd_with_epilogue_and_tiles():
    from kiln import topi

    rng = np.random.default_rng(7)
    x, wt = rand(rng, 1, 8, 8, 8), rand(rng, 16, 8, 3, 3)
    cfg = {"tile_y": [-1, 1, 4, 4], "tile_x": [-1, 1, 4, 4], "tile_k": [-1, 4], "vec": 1}
    got = run("opencl", lambda a, b: topi.nn.relu(topi.gpu.conv2d_nchw_winograd(a, b, 1, 1, 1, "float32", cfg=cfg)),
              topi.gpu.schedule_conv2d_nchw_winograd, [x, wt])
    np.testing.assert_allclose(got, np.maximum(conv2d_nchw_python(x, wt, 1, 1), 0), rtol=1e-4, atol=1e-4)


RESNET50_LAYERS = [  # (C, H, W, F, K, stride): the distinct batch-1 convolutions of ResNet-50 v1.5
    (3, 224, 224, 64, 7, 2), (64, 56, 56, 64, 1, 1), (64, 56, 56, 64, 3, 1), (64, 56, 56, 256, 1, 1),
    (256, 56, 56, 128, 1, 1), (128, 56, 56, 128, 3, 2), (128, 28, 28, 512, 1, 1), (256, 56, 56, 512, 1, 2),
    (512, 28, 28, 256, 1, 1), (256, 28, 28, 256, 3, 2), (1024, 14, 14, 512, 1, 1), (512, 14, 14, 512, 3, 2),
    (512, 7, 7, 2048, 1, 1), (2048, 7, 7, 512, 1, 1), (512, 7, 7, 512, 3, 1),
]


@pytest.mark.parametrize("layer", RESNET50_LAYERS, ids=[f"{c}x{h}-{f}k{k}s{s}" for c, h, _, f, k, s in RESNET50_LAYERS])
def test_default_tiles_fill_a_large_gpu(layer):
    """Batch-1 layers get enough work-groups for ~132 compute units, legal work-groups (<= 256
    work-items, threadIdx.z <= 64) and shared-memory steps within 24 KiB."""
    from kiln.topi.gpu import conv2d as gconv
    from kiln.topi.nn.conv2d import conv2d_shape

    c, h, w, f, k, s = layer
    p = conv2d_shape("conv2d", (1, c, h, w), (f, c, k, k), s, k // 2, 1, 1)
    conf = gconv.config_for(p)
    groups = conf["tile_f"][0] * conf["tile_y"][0] * conf["tile_x"][0]
    threads = conf["tile_f"][2] * conf["tile_y"][2] * conf["tile_x"][2]
    assert groups >= 132 and 32 <= threads <= 256 and conf["tile_f"][2] <= gconv.MAX_THREADS_Z
    rci, ty, tx = conf["tile_rc"][1], conf["tile_y"][2] * conf["tile_y"][3], conf["tile_x"][2] * conf["tile_x"][3]
    patch = ((ty - 1) * s + k) * ((tx - 1) * s + k) if conf["tile_ry"][1] == k else ty * tx
    weights = conf["tile_f"][2] * conf["tile_f"][3] * (k * k if conf["tile_ry"][1] == k else 1)
    assert rci * (patch + weights) <= gconv.SHARED_FLOATS
