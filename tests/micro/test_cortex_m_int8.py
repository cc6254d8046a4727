"""int8 kernels that use the Cortex-M core (issue 36 item 2): the dot product tensorized with
intrinsics declared in TE (kiln/topi/cortex_m), printed as ACLE ``__smlad`` (M4/M7) or MVE
``vmladavaq_s8`` (M55) by the C printer, run on the emulated boards against numpy."""

import subprocess

import numpy as np
import pytest

import kiln as tvm
from kiln import micro, te
from kiln.micro.project import generate_crt_project, get_microtvm_template_projects
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu
from kiln.target import Target
from kiln.topi.cortex_m import dense_int8, isa_tier, schedule_dense_int8

M, N, K = 8, 8, 48


def _dense(tier, rows, cpu):
    a = te.placeholder((M, K), "int8", name="A")
    w = te.placeholder((N, K), "int8", name="W")
    c = dense_int8(a, w)
    return tvm.build(schedule_dense_int8(c, tier, rows=rows), [a, w, c], target=f"c -mcpu={cpu}",
                     name="default_function")


def _operands():
    rng = np.random.default_rng(0)
    a, w = rng.integers(-128, 128, (M, K), dtype=np.int8), rng.integers(-128, 128, (N, K), dtype=np.int8)
    a[0, :4] = -128  # the extremes: -128 * -128 pairs summed by smlad
    w[0, :4] = -128
    return a, w, a.astype(np.int32) @ w.astype(np.int32).T


def test_tier_follows_mcpu():
    assert [isa_tier(Target(f"c -mcpu={c}")) for c in ("cortex-m3", "cortex-m4", "cortex-m7", "cortex-m55")] == \
        [None, "dsp", "dsp", "mve"]


@pytest.mark.parametrize("tier", ["dsp", "mve"])
def test_off_the_core_the_intrinsics_compute_the_same_integers(tier):
    """The host's cc builds every c module: there the C printer's portable definitions stand in."""
    a, w, want = _operands()
    f = _dense(tier, 2, "cortex-m4")
    out = tvm.nd.empty((M, N), "int32")
    f(tvm.nd.array(a), tvm.nd.array(w), out)
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("tier,cpu,template,insn", [("dsp", "cortex-m4", "qemu-mps2-an386", "smlad"),
                                                    ("dsp", "cortex-m7", "qemu-mps2-an500", "smlad"),
                                                    ("mve", "cortex-m55", "qemu-mps3-an547", "vmlava.s8")])
def test_dense_int8_on_the_board_uses_the_core(tier, cpu, template, insn, tmp_path):
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    project = generate_crt_project(get_microtvm_template_projects(template), _dense(tier, 4, cpu).get_source(),
                                   ["default_function"], tmp_path / "p")
    project.build()
    # objdump prints MVE only when told the architecture (docs/microtvm.md)
    asm = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main" if tier == "mve" else "arm",
                          project.exe], capture_output=True, text=True, check=True).stdout
    assert f"\t{insn}" in asm
    a, w, want = _operands()
    with micro.Session(project.transport()) as sess:
        out = sess.empty((M, N), "int32")
        sess.get_system_lib()["default_function"](sess.array(a), sess.array(w), out)
        np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("cpu,template,insn,arch", [("cortex-m4", "qemu-mps2-an386", "smlad", "arm"),
                                                   ("cortex-m55", "qemu-mps3-an547", "vmlava.s8", "armv8.1-m.main")])
def test_relay_picks_the_core_kernel_for_int8_pointwise_convs(cpu, template, insn, arch, tmp_path):
    """An int8 1x1 conv with a shift and clamp after it, built by relay for the M4 / M55: the fused
    kernel uses the DSP / MVE dot product, and the board's output equals numpy's integers."""
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    from kiln import relay
    from kiln.relay.backend import Executor

    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (1, 16, 5, 3), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 16, 1, 1), dtype=np.int8)
    data = relay.var("x", shape=x.shape, dtype="int8")
    conv = relay.nn.conv2d(data, relay.const(w), kernel_size=(1, 1), channels=8, out_dtype="int32")
    body = relay.cast(relay.clip(relay.op.math_ops.right_shift(conv, relay.const(7, "int32")), -128, 127), "int8")
    mod = tvm.IRModule.from_expr(relay.Function([data], body))
    lib = relay.build(mod, target=f"c -keys=arm_cpu -mcpu={cpu}",
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    project = micro.generate_project(get_microtvm_template_projects(template), lib, tmp_path / "fw",
                                     {"inputs": {"x": x}})
    project.build()
    asm = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", arch, project.elf], capture_output=True,
                         text=True).stdout
    assert f"\t{insn}" in asm
    acc = np.einsum("nchw,oc->nohw", x.astype(np.int64), w[:, :, 0, 0].astype(np.int64))
    want = np.clip(acc >> 7, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(next(iter(project.run()["outputs"].values())), want)
