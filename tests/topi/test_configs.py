"""Schedule knobs: defaults follow the target, a cfg mapping overrides them, the loop nest shows it."""

import pytest

import kiln as tvm
from kiln import te, topi
from kiln.topi.nn.conv2d import conv2d_shape
from kiln.topi.x86 import conv2d as x86_conv2d


def _conv(target=None, cfg=None):
    A = te.placeholder((1, 64, 56, 56), name="data")
    W = te.placeholder((64, 64, 3, 3), name="kernel")
    if target is None:
        out = topi.x86.conv2d_nchw(A, W, 1, 1, 1, cfg=cfg)
    else:
        with tvm.target.Target(target):
            out = topi.arm_cpu.conv2d_nchw(A, W, 1, 1, 1, cfg=cfg)
    blocked = x86_conv2d.find_tagged(out, x86_conv2d.TAG)
    return A, W, out, blocked.op.attrs["config"]


def test_arm_target_gets_neon_sized_tiles_and_builds():
    target = "llvm -mtriple=aarch64-linux-gnu"
    A, W, out, conf = _conv(target)
    assert conf["oc_bn"] == 8  # two 4-lane vectors per pixel
    assert conf["tile_ow"] * 2 <= 24 and 56 % conf["tile_ow"] == 0  # accumulators fit in 32 q-registers
    with tvm.target.Target(target):
        s = topi.arm_cpu.schedule_conv2d_nchw([out])
        tvm.build(s, [A, W, out], target=target)


def test_cfg_overrides_default_knobs_and_reaches_the_loops():
    A, W, out, conf = _conv(None, {"oc_bn": 8, "tile_ow": 7, "ic_unroll": 2})
    assert conf["oc_bn"] == 8 and conf["tile_ow"] == 7 and conf["ic_unroll"] == 2
    text = str(tvm.lower(topi.x86.schedule_conv2d_nchw([out]), [A, W, out]))
    assert "T.parallel" in text
    assert "T.Ramp(" in text and ", 1, 8)" in text  # 8-lane vectors of output channels


def test_config_space_lists_valid_values():
    p = conv2d_shape("conv2d", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, 1)
    space = x86_conv2d.config_space(p)
    assert 16 in space["oc_bn"] and 14 in space["tile_ow"] and all(56 % t == 0 or t == 28 for t in space["tile_ow"])


def test_autotvm_style_entities_are_read_through_val_and_size():
    class Knob:
        def __init__(self, val):
            self.val = val

    A, W, out, conf = _conv(None, {"tile_ow": Knob(8)})
    assert conf["tile_ow"] == 8


def test_dense_default_tiles_for_gemv_and_gemm():
    from kiln.topi.x86.dense import default_config

    assert default_config(1, 1000, 512)["tile_m"] == 1
    assert default_config(128, 768, 768)["tile_m"] == 4


@pytest.mark.parametrize("target,lanes", [("llvm -mtriple=aarch64-linux-gnu", 4), ("llvm -mcpu=haswell", 8),
                                          ("llvm -mcpu=skylake-avx512", 16)])
def test_vector_lanes_follow_the_target(target, lanes):
    assert topi.cpu.vector_lanes(32, tvm.target.Target(target)) == lanes
