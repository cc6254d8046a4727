"""The Cortex-M int8 convolutions relay picks by -mcpu (kiln/topi/cortex_m, issue 36): the KxK conv
as im2col rows on the DSP/MVE dot product (DS-CNN's stem; 80 taps: zero-padded to the MVE
width), the depthwise conv and the 1x1 conv in tiles of 2 pixels x 2 channels (an odd pixel count), each with a shift-and-clamp epilogue fused,
on the M4F and M55 boards against numpy's integers; and the float32 round half to even the
M4F's FPU lacks (onnxruntime-rounded requantizes), against numpy."""

import re
import subprocess

import numpy as np
import pytest

import kiln as tvm
from kiln import micro, relay
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu
from kiln.relay.backend import Executor

AOT = Executor("aot", {"interface-api": "c", "unpacked-api": True})


def _board():
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)


def _conv_ref(x, w, stride, pad, groups):
    """int64 NCHW/OIHW convolution with zero padding."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    per = o // groups
    for j in range(o):
        g = j // per
        xs = x[:, g * ci:(g + 1) * ci]
        for y in range(oh):
            for z in range(ow):
                win = xs[:, :, y * stride:y * stride + kh, z * stride:z * stride + kw]
                out[:, j, y, z] = (win * w[j].astype(np.int64)).sum(axis=(1, 2, 3))
    return out


def _shift_clip(v, s):
    return np.clip(v >> s, -128, 127).astype(np.int8)


def _model(rng):
    x = rng.integers(-128, 128, (1, 1, 13, 10), dtype=np.int8)
    w0 = rng.integers(-128, 128, (16, 1, 5, 4), dtype=np.int8)   # direct: rows of 4 taps, stride 2, padded
    w1 = rng.integers(-128, 128, (16, 1, 3, 3), dtype=np.int8)   # depthwise 3x3, padding 1
    w2 = rng.integers(-128, 128, (16, 16, 1, 1), dtype=np.int8)   # pointwise
    w0[0, 0, 0, :4] = -128  # -128 x -128 pairs summed by smlad
    x[0, 0, 2, 2:6] = -128
    data = relay.var("x", shape=x.shape, dtype="int8")

    def requant(e, s):
        return relay.cast(relay.clip(relay.op.math_ops.right_shift(e, relay.const(s, "int32")), -128, 127), "int8")

    y = requant(relay.nn.conv2d(data, relay.const(w0), strides=(2, 2), padding=(2, 1, 2, 1), kernel_size=(5, 4),
                                channels=16, out_dtype="int32"), 9)
    y = requant(relay.nn.conv2d(y, relay.const(w1), padding=(1, 1, 1, 1), groups=16, kernel_size=(3, 3), channels=16,
                                out_dtype="int32"), 7)
    y = requant(relay.nn.conv2d(y, relay.const(w2), kernel_size=(1, 1), channels=16, out_dtype="int32"), 8)
    want = _shift_clip(_conv_ref(x, w0, 2, (2, 1, 2, 1), 1), 9)
    want = _shift_clip(_conv_ref(want, w1, 1, (1, 1, 1, 1), 16), 7)
    want = _shift_clip(_conv_ref(want, w2, 1, (0, 0, 0, 0), 1), 8)
    return x, tvm.IRModule.from_expr(relay.Function([data], y)), want


@pytest.mark.parametrize("cpu,template,arch,insns", [
    ("cortex-m4", "qemu-mps2-an386", "arm", ("\tsmlad", "\tldrd", "\tsmlabb")),  # 1x1/im2col: ldrd + smlad; depthwise
    # M55: 1x1/im2col vmladava; the depthwise rows 4 output pixels a vector, vldrb.s32 + vmla.s32 per tap
    ("cortex-m55", "qemu-mps3-an547", "armv8.1-m.main", ("\tvmlava.s8", "\tvldrb.s32", "\tvmla.s32"))])
def test_int8_convs_on_the_board(cpu, template, arch, insns, tmp_path):
    _board()
    x, mod, want = _model(np.random.default_rng(5))
    assert want.shape == (1, 16, 7, 5)  # 35 pixels: the 1x1's last tile of two is half padding
    lib = relay.build(mod, target=f"c -keys=arm_cpu -mcpu={cpu}", executor=AOT)
    src = "\n".join(lib.sources.values())
    # the im2col and 1x1 kernels each copy pixels to data_pc; the depthwise sums in dw_acc
    assert "dw_acc" in src and len(re.findall(r"int(?:8|16)_t\*? data_pc\b", src)) == 2, "a Cortex-M kernel was not picked"
    project = micro.generate_project(micro.get_microtvm_template_projects(template), lib, tmp_path / "fw",
                                     {"inputs": {"x": x}})
    project.build()
    asm = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", arch, project.elf], capture_output=True,
                         text=True).stdout
    for insn in insns:
        assert insn in asm, insn
    np.testing.assert_array_equal(next(iter(project.run()["outputs"].values())), want)


def test_the_same_kernels_off_the_core():
    """The host's cc builds the same C (the intrinsics' portable definitions): the same integers."""
    from kiln.contrib import graph_executor
    x, mod, want = _model(np.random.default_rng(6))
    m = graph_executor.GraphModule(relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m4")["default"](tvm.cpu(0)))
    m.set_input(x=x)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), want)


def test_float32_round_half_to_even_on_the_m4(tmp_path):
    """relay round (rint) of float32 on the M4F: FPv4 has no VRINT; kiln_rintf (kiln/codegen/c.py)
    rounds in the FPU without newlib's rintf, bit for bit numpy's rint (ties, -0.0, large values)."""
    _board()
    v = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.4, 3.7, -3.7, 2.0 ** 22 + 0.5, -(2.0 ** 22) - 0.5,
                  2.0 ** 23 + 1, 1e30, -1e30, 0.0, -0.0, 8388607.5, 126.5, -127.5], np.float32)
    data = relay.var("x", shape=v.shape, dtype="float32")
    lib = relay.build(tvm.IRModule.from_expr(relay.Function([data], relay.round(data))),
                      target="c -keys=arm_cpu -mcpu=cortex-m4", executor=AOT)
    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), lib, tmp_path / "fw",
                                     {"inputs": {"x": v}})
    project.build()
    asm = subprocess.run(["arm-none-eabi-objdump", "-d", project.elf], capture_output=True, text=True).stdout
    assert "<rintf>" not in asm
    got = next(iter(project.run()["outputs"].values()))
    np.testing.assert_array_equal(got.view(np.uint32), np.rint(v).view(np.uint32))


@pytest.mark.parametrize("rows,cols,unroll", [(2, 2, True), (2, 2, False), (1, 4, False), (4, 1, True), (8, 3, False)])
def test_dsp_tiles_of_every_shape_off_the_core(rows, cols, unroll):
    """The DSP's int16 tile intrinsic (dot16_intrin) in every tile shape the tuning space has, its
    reduction unrolled or a loop, built by the host's cc (portable LDRD/SMLAD): numpy's integers."""
    from kiln import te
    from kiln.topi.cortex_m.conv2d_int8 import conv2d_1x1_int8, schedule_conv2d_1x1_int8
    rng = np.random.default_rng(rows * 10 + cols)
    x = rng.integers(-128, 128, (1, 24, 3, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 24), dtype=np.int8)
    x[0, :4, 0, 0] = -128
    w[0, :4] = -128
    data = te.placeholder(x.shape, "int8", name="data")
    kernel = te.placeholder(w.shape, "int16", name="kernel")
    out = conv2d_1x1_int8(data, kernel, "dsp", rows=rows, cols=cols, unroll=unroll)
    f = tvm.build(schedule_conv2d_1x1_int8(out), [data, kernel, out], target="c -keys=arm_cpu -mcpu=cortex-m4")
    got = tvm.nd.empty(out.shape, "int32")
    f(tvm.nd.array(x), tvm.nd.array(w.astype(np.int16)), got)
    np.testing.assert_array_equal(got.numpy(), _conv_ref(x, w[:, :, None, None], 1, (0, 0, 0, 0), 1))


@pytest.mark.parametrize("khw,stride,pad,unroll", [((3, 3), 1, 0, True), ((3, 3), 1, 0, False),
                                                   ((5, 4), 2, 0, True), ((3, 3), 2, 1, False)])
def test_dsp_depthwise_rows_off_the_core(khw, stride, pad, unroll):
    """The depthwise row intrinsic (SMLABB/SMLABT over int16 tap pairs, dw_row_intrin): odd and
    even tap counts, strides, a padded input, the row unrolled or a loop, built by the host's cc."""
    _depthwise_rows_off_the_core(khw, stride, pad, 11, unroll, "cortex-m4", seed=khw[0] + stride)


def _depthwise_rows_off_the_core(khw, stride, pad, width, unroll, mcpu, seed, expect_in_source=None):
    """depthwise_int8 on 6 channels of 9 rows x ``width`` (extremes included), built for ``mcpu``
    by the host's cc (portable DSP/MVE definitions), against numpy's integers."""
    from kiln import te
    from kiln.topi.cortex_m.conv2d_direct import DW_TAG, depthwise_int8, prepack_depthwise, schedule_depthwise_int8
    from kiln.topi.cortex_m.conv2d_int8 import _find
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, 6, 9, width), dtype=np.int8)
    w = rng.integers(-128, 128, (6, 1) + khw, dtype=np.int8)
    x[0, 0] = -128
    w[0] = -128
    data = te.placeholder(x.shape, "int8", name="data")
    k16 = prepack_depthwise(w)
    kernel = te.placeholder(k16.shape, "int16", name="kernel")
    out = depthwise_int8(data, kernel, (stride, stride), (pad,) * 4, unroll, "dsp", khw, mve=mcpu == "cortex-m55")
    f = tvm.build(schedule_depthwise_int8(out, _find(out, DW_TAG)), [data, kernel, out],
                  target=f"c -keys=arm_cpu -mcpu={mcpu}")
    if expect_in_source:
        assert expect_in_source in f.get_source()
    got = tvm.nd.empty(out.shape, "int32")
    f(tvm.nd.array(x), tvm.nd.array(k16), got)
    np.testing.assert_array_equal(got.numpy(), _conv_ref(x, w, stride, (pad,) * 4, 6))


@pytest.mark.parametrize("khw,pad,width", [((3, 3), 1, 5), ((3, 3), 0, 11), ((5, 4), 1, 9), ((3, 3), 1, 8),
                                           ((1, 3), 0, 5), ((1, 1), 0, 3)])
def test_mve_depthwise_rows_off_the_core(khw, pad, width):
    """The MVE depthwise row intrinsic (dw_row_mve_intrin: 4 output pixels a vector, the scalar tap
    weight): rows of 5 and 9 (a last vector overlapping the one before), 8 (whole vectors), 11, and
    under 4 (a predicated vector), built by the host's cc (portable MVE definitions): numpy's integers."""
    _depthwise_rows_off_the_core(khw, 1, pad, width, True, "cortex-m55", seed=width + khw[1],
                                 expect_in_source="vmlaq_n_s32")


def test_mve_depthwise_rows_on_the_m55(tmp_path):
    """Depthwise convs whose rows are 7 (overlapping vectors), 5 and 3 (a predicated vector) wide and
    one of stride 2 (the DSP rows: MVE takes stride 1), requantized by a shift, on the M55 board:
    vldrb.s32 + vmla.s32 in the firmware, numpy's integers."""
    _board()
    rng = np.random.default_rng(36)
    x = rng.integers(-128, 128, (1, 8, 6, 9), dtype=np.int8)
    ws = [rng.integers(-128, 128, (8, 1) + k, dtype=np.int8) for k in ((3, 3), (3, 3), (1, 3), (3, 3))]
    x[0, 0, :3, :3] = -128
    ws[0][0] = -128
    data = relay.var("x", shape=x.shape, dtype="int8")
    y, want = data, x
    for w, (stride, pad) in zip(ws, ((1, 0), (1, 0), (1, 0), (2, 1))):
        conv = relay.nn.conv2d(y, relay.const(w), strides=(stride, stride), padding=(pad,) * 4, groups=8,
                               kernel_size=w.shape[2:], channels=8, out_dtype="int32")
        y = relay.cast(relay.clip(relay.op.math_ops.right_shift(conv, relay.const(7, "int32")), -128, 127), "int8")
        want = _shift_clip(_conv_ref(want, w, stride, (pad,) * 4, 8), 7)
    assert want.shape == (1, 8, 1, 2)
    lib = relay.build(tvm.IRModule.from_expr(relay.Function([data], y)), target="c -keys=arm_cpu -mcpu=cortex-m55",
                      executor=AOT)
    src = "\n".join(lib.sources.values())
    assert "vmlaq_n_s32" in src and "__smlabb" in src  # stride 1: MVE rows; stride 2: DSP rows
    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps3-an547"), lib, tmp_path / "fw",
                                     {"inputs": {"x": x}})
    project.build()
    asm = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", project.elf], capture_output=True,
                         text=True).stdout
    assert "\tvldrb.s32" in asm and "\tvmla.s32" in asm and "\tvldrbt.s32" in asm  # vldrbt: the predicated row
    np.testing.assert_array_equal(next(iter(project.run()["outputs"].values())), want)
