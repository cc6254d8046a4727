"""CPU-dependent defaults for a matrix of CPUs, whatever the machine running the tests.

Each CPU is named to LLVM (``-mcpu`` / ``-mattr``); its facts come from kiln.target.cpu_facts,
and every default tile must fit its vector registers and sit in its template's tuning space.
Code for CPUs this machine can run is executed and compared with numpy; the rest is compiled
and its assembly inspected.
"""

import importlib

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, te, topi
from kiln.target import Target
from kiln.target.cpu_facts import cpu_facts
from kiln.topi.cpu import tile_fits
from kiln.topi.nn.conv2d import conv2d_shape

# The modules (kiln.topi.x86 re-exports functions of the same names).
conv2d, conv2d_nchwc, conv2d_nhwc, conv2d_winograd, dense, depthwise_conv2d, depthwise_conv2d_nchwc, matmul_nn = (
    importlib.import_module(f"kiln.topi.x86.{m}") for m in (
        "conv2d", "conv2d_nchwc", "conv2d_nhwc", "conv2d_winograd", "dense", "depthwise_conv2d",
        "depthwise_conv2d_nchwc", "matmul_nn"))

X86 = "llvm -mtriple=x86_64-linux-gnu"
AVX512_CPUS = ["skylake-avx512", "tigerlake", "sapphirerapids", "znver4", "x86-64-v4"]
AVX2_CPUS = ["haswell", "broadwell", "core-avx2", "znver2", "znver3", "x86-64-v3"]
CPUS = [f"{X86} -mcpu={c}" for c in ["x86-64-v2"] + AVX2_CPUS + AVX512_CPUS] + [
    f"{X86} -mcpu=skylake-avx512 -mattr=-avx512f",
    "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72",
    "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53",
    "llvm -mtriple=armv7l-linux-gnueabihf -mattr=+neon",
]

# ResNet-18 / MobileNetV2 layers: (data NCHW, kernel OIHW, stride, pad, groups)
CONVS = [((1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1), ((1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
         ((1, 128, 28, 28), (256, 128, 3, 3), 2, 1, 1), ((1, 256, 14, 14), (256, 256, 3, 3), 1, 1, 1),
         ((1, 512, 7, 7), (512, 512, 3, 3), 1, 1, 1), ((1, 32, 112, 112), (16, 32, 1, 1), 1, 0, 1),
         ((1, 96, 56, 56), (24, 96, 1, 1), 1, 0, 1), ((1, 144, 28, 28), (144, 1, 3, 3), 1, 1, 144),
         ((1, 40, 9, 9), (40, 40, 3, 3), 1, 1, 1)]
GEMMS = [(1, 1000, 512), (8, 64, 48), (64, 256, 128), (196, 512, 1024)]  # (M, N, K)


def _shape(data, kernel, stride, pad, groups):
    return conv2d_shape("conv2d", data, kernel, stride, pad, 1, groups)


def _assert_space_holds(space, default, what):
    for name, value in default.items():
        if name in space:
            assert value in space[name], f"{what}: default {name}={value} not among {space[name]}"


@pytest.mark.parametrize("target", CPUS)
def test_default_tiles_fit_the_registers_and_sit_in_their_spaces(target):
    f = cpu_facts(target)
    lanes, regs = f.lanes(), f.vector_registers
    with Target(target):
        for m, n, k in GEMMS:
            d = matmul_nn.default_config(m, n)
            _assert_space_holds(matmul_nn.config_space(m, n), d, f"matmul_nn {m}x{n}")
            assert d["tile_n"] % lanes == 0 and tile_fits(d["tile_m"], d["tile_n"] // lanes, regs), d
            _assert_space_holds(dense.config_space(m, n, k), dense.default_config(m, n, k), f"dense {m}x{n}x{k}")
        for shape in CONVS:
            p = _shape(*shape)
            if p.groups == 1:
                d = conv2d.default_config(p)
                _assert_space_holds(conv2d.config_space(p), d, f"conv2d {shape}")
                vectors = d["oc_bn"] // lanes
                assert d["oc_bn"] % lanes == 0 and tile_fits(d["tile_ow"], vectors, regs) or d["tile_ow"] == 1, d
                _assert_space_holds(conv2d_nchwc.config_space(p), conv2d_nchwc.default_config(p), f"NCHWc {shape}")
                _assert_space_holds(conv2d_nhwc.config_space(p), conv2d_nhwc.default_config(p), f"NHWC {shape}")
                if conv2d_winograd.applies(p):
                    d = conv2d_winograd.config_for_shape(p)
                    _assert_space_holds(conv2d_winograd.config_space(p), d, f"winograd {shape}")
            else:
                _assert_space_holds(depthwise_conv2d.config_space(p.out_width, p.out_height),
                                    depthwise_conv2d.default_config(p.out_width, p.out_height), f"depthwise {shape}")
                for block in (4, 8, 16):
                    d = depthwise_conv2d_nchwc.default_config(p.out_width, block, 3, p.stride_w)
                    _assert_space_holds(depthwise_conv2d_nchwc.config_space(p.out_width, block, 3, p.stride_w), d,
                                        f"depthwise NCHW{block}c {shape}")
                    assert tile_fits(d["tile_ow"], -(-block // lanes), regs), (block, d)


# (matmul_nn tile for M=64, N=256; conv2d oc_bn and tile_ow for 64 channels at 56 and at 14 pixels)
EXPECTED = {
    "avx512": ({"tile_m": 8, "tile_n": 32}, (16, 14), (32, 7)),
    "avx2": ({"tile_m": 6, "tile_n": 16}, (8, 14), (8, 14)),
    "sse": ({"tile_m": 6, "tile_n": 8}, (8, 4), (8, 6)),
    "neon64": ({"tile_m": 8, "tile_n": 8}, (8, 8), (8, 7)),
    "neon32": ({"tile_m": 6, "tile_n": 8}, (8, 4), (8, 6)),
}


def _cpu_class(target):
    f = cpu_facts(target)
    if f.arch == "aarch64":
        return "neon64"
    if f.arch == "arm":
        return "neon32"
    return {16: "avx512", 8: "avx2", 4: "sse"}[f.lanes()]


@pytest.mark.parametrize("target", CPUS)
def test_defaults_per_cpu_class(target):
    gemm, conv56, conv14 = EXPECTED[_cpu_class(target)]
    with Target(target):
        assert matmul_nn.default_config(64, 256) == gemm
        for (bn, ow), hw in ((conv56, 56), (conv14, 14)):
            d = conv2d.default_config(_shape((1, 64, hw, hw), (64, 64, 3, 3), 1, 1, 1))
            assert (d["oc_bn"], d["tile_ow"]) == (bn, ow), hw


TEMPLATE_WORKLOADS = {
    "conv2d_nchw": [((1, 64, 56, 56), (64, 64, 3, 3), (1, 1)), ((1, 128, 28, 28), (256, 128, 3, 3), (2, 2)),
                    ((1, 40, 9, 9), (40, 40, 3, 3), (1, 1)), ((1, 3, 32, 32), (16, 3, 3, 3), (1, 1))],
    "depthwise_conv2d_nchw": [((1, 144, 28, 28), (144, 1, 3, 3), (1, 1)), ((1, 96, 56, 56), (96, 1, 3, 3), (2, 2))],
    "conv2d_nhwc": [((1, 28, 28, 32), (3, 3, 32, 64), (1, 1))],
}


def _template_tasks(family, target):
    def tensor(shape):
        return ("TENSOR", shape, "float32")

    for name, cases in TEMPLATE_WORKLOADS.items():
        for data, kernel, stride in cases:
            groups = data[1] if name.startswith("depthwise") else 1
            yield autotvm.task.create(f"{name}.{family}", (tensor(data), tensor(kernel), stride, (1, 1, 1, 1),
                                                             (1, 1), groups, "float32"), target)
    for m, n, k in GEMMS:
        yield autotvm.task.create(f"dense_nopack.{family}", (tensor((m, k)), tensor((n, k)), "float32"), target)
    yield autotvm.task.create(f"batch_matmul.{family}", (tensor((2, 64, 48)), tensor((2, 48, 96)), "float32",
                                                          False), target)
    yield autotvm.task.create(f"batch_matmul.{family}", (tensor((2, 64, 48)), tensor((2, 96, 48)), "float32",
                                                          True), target)


@pytest.mark.parametrize("target", CPUS)
def test_every_templates_space_holds_its_declared_default(target):
    family = "x86" if cpu_facts(target).arch == "x86_64" else "arm_cpu"
    for task in _template_tasks(family, target):
        assert task.config_space.default_index() is not None, (task.name, task.args)


# -- code generated for other CPUs -----------------------------------------------------------------
def _host_runs(target) -> str:
    """'' when this machine can execute code for ``target``, else why not."""
    host, want = cpu_facts("llvm"), cpu_facts(target)
    if host.arch != want.arch:
        return f"this machine is {host.arch}, the code {want.arch}"
    missing = set(want.features) - set(host.features)
    return f"this machine lacks {', '.join(sorted(missing))}" if missing else ""


def _kernels(runner):
    """(name, schedule builder, inputs, numpy reference) for the kernels with CPU-derived tiles."""
    a, b = runner.rand(96, 80), runner.rand(72, 80)
    x, w = runner.rand(1, 32, 14, 14), runner.rand(48, 32, 3, 3)
    dw_x, dw_w = runner.rand(1, 32, 15, 15), runner.rand(32, 1, 3, 3)
    from kiln.topi import testing

    def dense_case():
        A, B = te.placeholder(a.shape, name="A"), te.placeholder(b.shape, name="B")
        out = topi.x86.dense(A, B)
        return topi.x86.schedule_dense([out]), [A, B, out]

    def conv_case():
        X, W = te.placeholder(x.shape, name="X"), te.placeholder(w.shape, name="W")
        out = topi.nn.relu(topi.x86.conv2d_nchw(X, W, 1, 1, 1))
        return topi.x86.schedule_conv2d_nchw([out]), [X, W, out]

    def depthwise_case():
        X, W = te.placeholder(dw_x.shape, name="X"), te.placeholder(dw_w.shape, name="W")
        out = topi.x86.conv2d_nchw(X, W, 2, 1, 1, groups=32)
        return topi.x86.schedule_conv2d_nchw([out]), [X, W, out]

    return [("dense", dense_case, [a, b], a @ b.T),
            ("conv2d", conv_case, [x, w], np.maximum(testing.conv2d_nchw_python(x, w, 1, 1), 0)),
            ("depthwise", depthwise_case, [dw_x, dw_w], testing.depthwise_conv2d_nchw_python(dw_x, dw_w, 2, 1))]


@pytest.mark.parametrize("cpu", ["haswell", "znver3", "x86-64-v3", "skylake-avx512", "znver4"])
def test_code_for_other_cpus_matches_numpy(cpu, runner):
    if cpu_facts("llvm").arch != "x86_64":
        pytest.skip("x86 code: this machine is not x86-64")
    target = Target(f"llvm -mcpu={cpu}")
    f = cpu_facts(target)
    why_not = _host_runs(target)
    for name, case, inputs, want in _kernels(runner):
        with target:
            s, args = case()
            mod = tvm.build(s, args, target=target)
        asm = mod.get_source("asm")
        # AVX2 code uses ymm and never zmm; AVX-512 code uses zmm.
        assert ("zmm" in asm) == (f.lanes() == 16) and "ymm" in asm, (cpu, name)
        if why_not:
            continue
        out = tvm.nd.empty(tuple(int(d) for d in args[-1].shape))
        mod(*[tvm.nd.array(v) for v in inputs], out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3, err_msg=f"{cpu} {name}")
    if why_not:
        pytest.skip(f"{cpu} code compiled and inspected, not run: {why_not}")
