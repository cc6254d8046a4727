"""CPU-dependent defaults for a matrix of CPUs, whatever the machine running the tests.

Each CPU is named to LLVM (``-mcpu`` / ``-mattr``); its facts come from kiln.target.cpu_facts,
and every default tile must fit its vector registers and sit in its template's tuning space.
Code for CPUs this machine can run is executed and compared with numpy; the rest is compiled
and its assembly inspected.
"""

import importlib
import re

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, te, topi
from kiln.target import Target
from kiln.target.cpu_facts import cpu_facts, why_host_cannot_run
from kiln.topi.cpu import pixel_major, tile_fits, tile_operands
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
                d = conv2d_nchwc.default_config(p)
                _assert_space_holds(conv2d_nchwc.config_space(p), d, f"NCHWc {shape}")
                vectors = max(1, d["oc_bn"] // lanes)
                window = not conv2d_nchwc.input_block(p.in_channel) and p.kernel_w > 1
                operands = tile_operands(d["tile_ow"], d["oc_chunks"], vectors, window)
                assert d["tile_ow"] * d["oc_chunks"] * vectors + operands <= regs or d["tile_ow"] == 1, d
                assert (p.out_channel // d["oc_bn"]) % d["oc_chunks"] == 0, d
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
    "avx512": ({"tile_m": 6, "tile_n": 64}, (16, 14), (32, 7)),
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


@pytest.mark.parametrize("cpu,full", [("skylake-avx512", True), ("sapphirerapids", True), ("x86-64-v4", True),
                                      ("znver4", False), ("znver3", False), ("haswell", False)])
def test_full_width_avx512_and_where_winograd_gives_way(cpu, full):
    """Intel's AVX-512 (no sse4a) runs 512-bit FMAs whole; there a 7x7 image (16 Winograd tiles)
    takes the direct kernel, a 14x14 one (49) stays Winograd; elsewhere nothing changes."""
    target = f"{X86} -mcpu={cpu}"
    assert cpu_facts(target).full_width_avx512 is full
    assert conv2d_winograd.direct_is_faster("float32", target, (7, 7)) is full
    assert conv2d_winograd.direct_is_faster("float32", target, (14, 14)) is False
    assert conv2d_winograd.direct_is_faster("float32", target, (33, 33)) is full  # rows of 17 tiles
    assert conv2d_winograd.direct_is_faster("float32", target) is False
    with Target(target):
        conf = conv2d_nchwc.default_config(_shape((1, 512, 7, 7), (512, 512, 3, 3), 1, 1, 1))
        assert bool(conf["ic_pass"]) is full  # 590 KB of weights per task: channel passes
        conf = conv2d_nchwc.default_config(_shape((1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1))
        assert conf["ic_pass"] == 0


# conv2d_NCHWc defaults (oc_bn, oc_chunks, tile_ow) for 1x1 convs 576->96 @14, 144->144 @56 and
# 960->320 @7, and the block a 144-channel tensor enters the blocked layout in. With 16 registers
# and 8 lanes (AVX2) the register tile spans several 8-channel blocks; 32 registers keep one.
NCHWC_CONVS = [((1, 576, 14, 14), (96, 576, 1, 1)), ((1, 144, 56, 56), (144, 144, 1, 1)),
               ((1, 960, 7, 7), (320, 960, 1, 1))]
NCHWC_EXPECTED = {
    "avx512": ([(32, 1, 7), (16, 1, 14), (32, 1, 7)], 16),
    # 512-bit FMAs run whole (Intel): two vectors per pixel over 14 pixels, three over 8
    "avx512-full": ([(32, 1, 14), (16, 3, 8), (32, 1, 7)], 16),
    "avx2": ([(8, 4, 3), (8, 3, 4), (8, 4, 3)], 8),  # 1x1 at 7x7: blocks of one vector, not 16
    "sse": ([(8, 1, 5), (8, 1, 4), (8, 1, 4)], 4),
    "neon64": ([(8, 1, 7), (8, 1, 8), (8, 1, 7)], 4),
    "neon32": ([(8, 1, 5), (8, 1, 4), (8, 1, 4)], 4),
}


@pytest.mark.parametrize("target", CPUS)
def test_nchwc_defaults_per_cpu_class(target):
    cls = _cpu_class(target)
    tiles, block = NCHWC_EXPECTED["avx512-full" if cpu_facts(target).full_width_avx512 else cls]
    with Target(target):
        got = [conv2d_nchwc.default_config(_shape(d, k, 1, 0, 1)) for d, k in NCHWC_CONVS]
        assert [(c["oc_bn"], c["oc_chunks"], c["tile_ow"]) for c in got] == tiles
        assert conv2d_nchwc.input_block(144) == block
        for (d, k), conf in zip(NCHWC_CONVS, got):
            space = conv2d_nchwc.config_space(_shape(d, k, 1, 0, 1))
            if cpu_facts(target).vector_registers < 32:  # tuning keeps the layout, varies the tile
                assert space["oc_bn"] == [conf["oc_bn"]] and space["oc_chunks"] == [1, 2, 3, 4]
            elif cpu_facts(target).full_width_avx512:
                assert len(space["oc_bn"]) > 1 and space["oc_chunks"] == [1, 2, 3]
            else:
                assert len(space["oc_bn"]) > 1 and space["oc_chunks"] == [1]


def test_chunk_tile_cost_model():
    # 16 registers, one vector per block: the tile shares broadcasts among 3 blocks (4 pixels)
    # or 4 blocks (3 pixels); never 14 pixels of one block, whose broadcasts outnumber its FMAs.
    assert conv2d_nchwc.chunk_tile(56, 18, 1, 16) == (3, 4)
    assert conv2d_nchwc.chunk_tile(14, 12, 1, 16) == (4, 3)
    assert conv2d_nchwc.chunk_tile(14, 2, 1, 16) == (2, 5)  # 5 + 5 + 4: no latency-bound tail
    assert conv2d_nchwc.chunk_tile(7, 1, 1, 16) == (1, 7)   # one block: nothing to share
    for width in (7, 14, 28, 56, 112):
        for chunks in (1, 2, 3, 4, 6, 12):
            k, r = conv2d_nchwc.chunk_tile(width, chunks, 1, 16)
            assert chunks % k == 0 and r * k + tile_operands(r, k, 1) <= 16, (width, chunks)


def test_a_plain_input_keeps_the_window_of_broadcasts_live():
    # ResNet's 7x7/2 stem on RGB: the taps run innermost and LLVM keeps every broadcast of the
    # tile for the taps that reread its pixel, so block-major 4 x 2 blocks, not pixel-major 6 x 2
    # (which spilled on AVX2: 1.28x slower).
    assert conv2d_nchwc.chunk_tile(112, 8, 1, 16) == (2, 6)
    assert conv2d_nchwc.chunk_tile(112, 8, 1, 16, window=True) == (2, 4)
    assert tile_operands(6, 2, 1, window=True) == 7 and not pixel_major(4, 2, 1, window=True)
    with Target("llvm -mcpu=haswell"):
        stem = conv2d_nchwc.default_config(_shape((1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1))
        blocked = conv2d_nchwc.default_config(_shape((1, 64, 56, 56), (64, 64, 3, 3), 2, 1, 1))
    assert (stem["oc_chunks"], stem["tile_ow"]) == (2, 4)
    assert blocked["tile_ow"] * blocked["oc_chunks"] + tile_operands(blocked["tile_ow"], blocked["oc_chunks"], 1) <= 16
    # full-width AVX-512 (conv2d_nchwc.full_width_tile): 7 pixels x 2 blocks of one vector; AMD's
    # AVX-512 keeps one block of 14
    with Target("llvm -mcpu=sapphirerapids"):
        stem = conv2d_nchwc.default_config(_shape((1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1))
    assert (stem["oc_bn"], stem["oc_chunks"], stem["tile_ow"]) == (16, 2, 7)
    with Target("llvm -mcpu=znver4"):
        stem = conv2d_nchwc.default_config(_shape((1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1))
    assert (stem["oc_chunks"], stem["tile_ow"]) == (1, 14)


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

    nc_x, nc_w = runner.rand(1, 48, 14, 14), runner.rand(48, 48, 1, 1)

    def nchwc_case():  # 1x1 conv on blocked data: AVX2 tiles span several blocks
        ib = conv2d_nchwc.input_block(48)
        X, W = te.placeholder((1, 48 // ib, 14, 14, ib), name="X"), te.placeholder(nc_w.shape, name="W")
        out = topi.x86.conv2d_NCHWc(X, W, 1, 0, 1, "float32")
        return topi.x86.schedule_conv2d_NCHWc([out]), [X, W, out]

    def blocked(x, b):
        n, c, h, w = x.shape
        return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))

    def nchwc_input():  # the blocks depend on the target: resolved under it
        return blocked(nc_x, conv2d_nchwc.input_block(48))

    def nchwc_want():
        bn = conv2d_nchwc.config_for_nchwc(nc_x.shape, nc_w.shape, 1, 0, 1)["oc_bn"]
        return blocked(testing.conv2d_nchw_python(nc_x, nc_w, 1, 0), bn)

    ex_x, ex_w1, ex_b1, ex_w2 = runner.rand(1, 16, 15, 15), runner.rand(96, 16, 1, 1), runner.rand(96), \
        runner.rand(96, 1, 3, 3)

    def expand_block():  # the expanded tensor's block: resolved under the target, like oc_bn
        return conv2d_nchwc.input_block(96)

    def expand_case():  # the fused expand + depthwise conv: its tiles and row groups derive from the CPU
        b = expand_block()
        X = te.placeholder((1, 2, 15, 15, 8), name="X")
        W1 = te.placeholder((96 // b, 2, 1, 1, 8, b), name="W1")
        B1 = te.placeholder((1, 96 // b, 1, 1, b), name="B1")
        W2 = te.placeholder((96 // b, 3, 3, b), name="W2")
        out = topi.x86.expand_depthwise_NCHWc(X, W1, B1, W2, 2, 1, 0.0, 6.0)
        return topi.x86.schedule_expand_depthwise_NCHWc([out]), [X, W1, B1, W2, out]

    from kiln.topi.x86.conv2d_nchwc import prepack_kernel_nchwc
    from kiln.topi.x86.depthwise_conv2d_nchwc import prepack_depthwise_kernel

    expand_inputs = [lambda: blocked(ex_x, 8), lambda: prepack_kernel_nchwc(ex_w1, 8, expand_block()),
                     lambda: ex_b1.reshape(1, 96 // expand_block(), 1, 1, expand_block()),
                     lambda: prepack_depthwise_kernel(ex_w2, expand_block())]

    def expand_want():
        e = np.clip(testing.conv2d_nchw_python(ex_x, ex_w1, 1, 0) + ex_b1.reshape(1, 96, 1, 1), 0, 6)
        return blocked(testing.depthwise_conv2d_nchw_python(e.astype("float32"), ex_w2, 2, 1),
                       expand_block())

    return [("dense", dense_case, [a, b], a @ b.T),
            ("expand_depthwise", expand_case, expand_inputs, expand_want),
            ("conv2d_NCHWc", nchwc_case, [nchwc_input, nc_w], nchwc_want),
            ("conv2d", conv_case, [x, w], np.maximum(testing.conv2d_nchw_python(x, w, 1, 1), 0)),
            ("depthwise", depthwise_case, [dw_x, dw_w], testing.depthwise_conv2d_nchw_python(dw_x, dw_w, 2, 1))]


@pytest.mark.parametrize("cpu", ["haswell", "znver3", "x86-64-v3", "skylake-avx512", "znver4"])
def test_code_for_other_cpus_matches_numpy(cpu, runner):
    if cpu_facts("llvm").arch != "x86_64":
        pytest.skip("x86 code: this machine is not x86-64")
    target = Target(f"llvm -mcpu={cpu}")
    f = cpu_facts(target)
    why_not = why_host_cannot_run(target)
    for name, case, inputs, want in _kernels(runner):
        with target:
            s, args = case()
            mod = tvm.build(s, args, target=target)
            inputs = [v() if callable(v) else v for v in inputs]
            want = want() if callable(want) else want
        asm = mod.get_source("asm")
        # AVX2 code uses ymm and never zmm; AVX-512 code uses zmm.
        assert ("zmm" in asm) == (f.lanes() == 16) and ("ymm" in asm or f.lanes() == 16), (cpu, name)
        if why_not:
            continue
        out = tvm.nd.empty(tuple(int(d) for d in args[-1].shape))
        mod(*[tvm.nd.array(v) for v in inputs], out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3, err_msg=f"{cpu} {name}")
    if why_not:
        pytest.skip(f"{cpu} code compiled and inspected, not run: {why_not}")



# -- float16 for each CPU --------------------------------------------------------------------------
# How each CPU computes in float16: native half arithmetic (AVX512-FP16), float32 arithmetic between
# F16C vector conversions, or scalar conversions without F16C (x86-64-v2).
F16_CPUS = {"haswell": "f16c", "znver3": "f16c", "x86-64-v3": "f16c", "skylake-avx512": "f16c", "znver4": "f16c",
            "sapphirerapids": "native", "x86-64-v4 -mattr=+avx512fp16": "native",
            "sapphirerapids -mattr=-avx512fp16": "f16c", "x86-64-v2": "soft"}
HALF_ARITH = re.compile(r"\bv(?:add|sub|mul|f[n]?madd\d*)[ps]h\b")
HALF_CONVERT = re.compile(r"\bvcvtph2psx?\b")
U16 = 2.0 ** -11 + 2.0 ** -24  # one float16 rounding (plus a float32 one where F16C computes in float)


def _gamma(n: int) -> float:
    """Bound on the relative error of a sum of n rounded terms, in any order (Higham, Lemma 3.1):
    a float16 dot product of K terms, rounded once more to store it, is within _gamma(K + 1) * sum |a b|."""
    return n * U16 / (1 - n * U16)


def _f16(*shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype("float16")


def _blocked(v, block):
    n, c, h, w = v.shape
    return np.ascontiguousarray(v.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def _float16_kernels():
    """(name, schedule builder, inputs, () -> (exact float64 result, its error bound)) for the
    float16 kernels with CPU-derived tiles; what depends on the target is resolved under it."""
    a, b = _f16(24, 96, seed=1), _f16(40, 96, seed=2)
    x, w = _f16(1, 32, 14, 14, seed=3), _f16(48, 32, 1, 1, seed=4)

    def dense_case():
        A, B = te.placeholder(a.shape, "float16", name="A"), te.placeholder(b.shape, "float16", name="B")
        out = topi.x86.dense(A, B, out_dtype="float16")
        return topi.x86.schedule_dense([out]), [A, B, out]

    def dense_exact():
        a64, b64 = a.astype("float64"), b.astype("float64")
        return a64 @ b64.T, _gamma(97) * (np.abs(a64) @ np.abs(b64).T)

    def nchwc_case():
        ib = conv2d_nchwc.input_block(32)
        X = te.placeholder((1, 32 // ib, 14, 14, ib), "float16", name="X")
        W = te.placeholder(w.shape, "float16", name="W")
        out = topi.x86.conv2d_NCHWc(X, W, 1, 0, 1, "float16")
        return topi.x86.schedule_conv2d_NCHWc([out]), [X, W, out]

    def nchwc_exact():
        bn = conv2d_nchwc.config_for_nchwc(x.shape, w.shape, 1, 0, 1)["oc_bn"]
        x64, w64 = x.astype("float64"), w[:, :, 0, 0].astype("float64")
        conv = np.einsum("nchw,oc->nohw", x64, w64)
        bound = _gamma(33) * np.einsum("nchw,oc->nohw", np.abs(x64), np.abs(w64))
        return _blocked(conv, bn), _blocked(bound, bn)

    return [("dense", dense_case, [a, b], dense_exact),
            ("conv2d_NCHWc", nchwc_case, [lambda: _blocked(x, conv2d_nchwc.input_block(32)), w], nchwc_exact)]


def _float16_model():
    """A ToMixedPrecision float16 model (conv 3x3 + bias + relu, dense to 10 classes), its input,
    and per logit the exact float64 result with the error bound float16 arithmetic allows."""
    from kiln import relay
    from kiln.topi import testing

    x, w1, b1, w2 = _f16(1, 4, 4, 4, seed=5), _f16(4, 4, 3, 3, seed=6), _f16(4, seed=7), _f16(10, 64, seed=8)
    data = relay.var("x", shape=x.shape)
    y = relay.nn.conv2d(data, relay.const(w1.astype("float32")), padding=(1, 1), channels=4, kernel_size=(3, 3))
    y = relay.nn.relu(relay.nn.bias_add(y, relay.const(b1.astype("float32"))))
    y = relay.nn.dense(relay.nn.batch_flatten(y), relay.const(w2.astype("float32")))
    mod = relay.transform.ToMixedPrecision("float16")(tvm.IRModule.from_expr(relay.Function([data], y)))
    # the inputs and weights are float16 numbers already, so the casts to float16 are exact
    x64, w1_64, b1_64, w2_64 = (v.astype("float64") for v in (x, w1, b1, w2))
    conv = testing.conv2d_nchw_python(x64, w1_64, 1, 1) + b1_64.reshape(1, 4, 1, 1)
    conv_err = _gamma(4 * 9 + 2) * (testing.conv2d_nchw_python(np.abs(x64), np.abs(w1_64), 1, 1)
                                    + np.abs(b1_64).reshape(1, 4, 1, 1))
    h, h_err = np.maximum(conv, 0).reshape(1, -1), conv_err.reshape(1, -1)   # relu: 1-Lipschitz
    logits = h @ w2_64.T
    bound = h_err @ np.abs(w2_64).T + _gamma(64 + 1) * ((np.abs(h) + h_err) @ np.abs(w2_64).T)
    return mod, x.astype("float32"), logits, bound


@pytest.mark.parametrize("cpu", list(F16_CPUS))
def test_float16_code_for_each_cpu(cpu):
    """float16 dense, conv2d_NCHWc and a whole ToMixedPrecision model for each CPU: native half
    arithmetic where the CPU has AVX512-FP16, F16C conversions around float arithmetic where it
    has F16C; run where this machine can, within the bound of float16 rounding."""
    from kiln import relay
    from kiln.contrib import graph_executor
    from helpers.ranking import assert_ranking_kept

    if cpu_facts("llvm").arch != "x86_64":
        pytest.skip("x86 code: this machine is not x86-64")
    target = Target(f"{X86} -mcpu={cpu}")
    kind, why_not = F16_CPUS[cpu], why_host_cannot_run(target)
    assert ({"f16c", "avx512fp16"} & cpu_facts(target).features) == {
        "native": {"f16c", "avx512fp16"}, "f16c": {"f16c"}, "soft": set()}[kind]

    def check_code(asm, what):
        # dense sums float16 in float32 on every CPU (x86/dense.py, since 883c09c: a float16 sum
        # of 256 terms was 10x one rounding off), so its code converts where others compute in half
        kind_here = "f16c" if what == "dense" and kind == "native" else kind
        assert bool(HALF_ARITH.search(asm)) == (kind_here == "native"), f"{cpu} {what}: half arithmetic"
        if kind_here == "f16c":
            assert HALF_CONVERT.search(asm), f"{cpu} {what}: no F16C conversion"
        if kind == "soft":
            assert not HALF_CONVERT.search(asm), f"{cpu} {what}: F16C on a CPU without it"

    for name, case, inputs, exact in _float16_kernels():
        with target:
            s, args = case()
            mod = tvm.build(s, args, target=target)
            inputs = [v() if callable(v) else v for v in inputs]
            want, bound = exact()
        check_code(mod.get_source("asm"), name)
        if why_not:
            continue
        out = tvm.nd.empty(tuple(int(d) for d in args[-1].shape), "float16")
        mod(*[tvm.nd.array(v) for v in inputs], out)
        err = np.abs(out.numpy().astype("float64") - want)
        assert (err <= bound).all(), f"{cpu} {name}: error {err.max():.3g} beyond the float16 bound"

    model, x, want, bound = _float16_model()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(model, target=target)
    check_code(lib.get_lib().get_source("asm"), "model")
    if why_not:
        pytest.skip(f"{cpu} float16 code compiled and inspected, not run: {why_not}")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    m.set_input("x", x)
    m.run()
    got = m.get_output(0).numpy().astype("float64")
    assert (np.abs(got - want) <= bound).all(), f"{cpu} model: error beyond the float16 bound"
    print(assert_ranking_kept(got[0], want[0], bound[0]))
