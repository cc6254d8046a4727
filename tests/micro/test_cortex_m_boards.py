"""The emulated boards beside the M3/M4F: mps2-an500 (Cortex-M7, FPv5-D16) and mps3-an547
(Cortex-M55, SSE-300, its own memory map and UART). Standalone AOT firmware vs onnxruntime, float
code on the FPU, and each board's clock: board seconds are instructions (qemu -icount shift=0)."""

import subprocess

import numpy as np
import pytest
from kws_model import kws_cnn, run_ort

from kiln import micro, relay
from kiln.micro.project import BOARDS, generate_crt_project, get_microtvm_template_projects
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu
from kiln.relay.backend import Executor


@pytest.fixture(autouse=True)
def _tools():
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)


BOARD_CPUS = [("qemu-mps2-an385", "cortex-m3"), ("qemu-mps2-an386", "cortex-m4"), ("qemu-mps2-an500", "cortex-m7"),
              ("qemu-mps3-an547", "cortex-m55")]
# A packed function whose body is a known number of instructions: 2 per iteration (subs, bne).
SPIN = r'''
#include "crt.h"
char __kiln_last_error[4];
int32_t spin(const KilnValue* args, const int32_t* type_codes, int32_t num_args) {
  uint32_t n = (uint32_t)args[0].v_int64;
  __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
  return 0;
}
'''


@pytest.mark.parametrize("template,cpu", BOARD_CPUS)
def test_board_time_counts_one_nanosecond_per_instruction(template, cpu, tmp_path):
    """Under -icount shift=0 an instruction is 1 ns of board time whatever the board's SysTick clock
    (25 MHz on MPS2, 32 MHz on the AN547): a wrong KILN_CORE_HZ shows as another slope."""
    assert BOARDS[template].cpu == cpu
    project = generate_crt_project(get_microtvm_template_projects(template), SPIN, ["spin"], tmp_path / "spin")
    project.build()
    with micro.Session(project.transport()) as sess:
        timer = sess.get_system_lib().time_evaluator("spin", sess.device, number=1)
        short, long = timer(1_000_000).results[0], timer(3_000_000).results[0]
    # 4M more instructions; one SysTick tick (40 or 31.25 ns) of quantisation at each end.
    assert abs((long - short) * 1e9 - 4_000_000) <= 2 * 40


@pytest.mark.parametrize("template,cpu,fpu_insn", [("qemu-mps2-an500", "cortex-m7", "vfma.f32"),
                                                   ("qemu-mps3-an547", "cortex-m55", "vfma.f32")])
def test_standalone_kws_on_m7_and_m55_matches_onnxruntime_on_the_fpu(template, cpu, fpu_insn, tmp_path):
    model, inputs = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target=f"c -keys=arm_cpu -mcpu={cpu}",
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}), params=params)
    project = micro.generate_project(get_microtvm_template_projects(template), lib, tmp_path / "fw", {"inputs": inputs})
    project.build()
    result = project.run()
    # Hardware float with fused multiply-adds: a few ulps from onnxruntime's rounding.
    np.testing.assert_allclose(result["outputs"]["output"], run_ort(model, inputs)[0], rtol=1e-5, atol=1e-6)
    assert result["cycles"] > 0
    asm = subprocess.run(["arm-none-eabi-objdump", "-d", project.elf], capture_output=True, text=True).stdout
    assert fpu_insn in asm and "__aeabi_fmul" not in asm and "__aeabi_fadd" not in asm  # no soft-float calls


def _aot(body_fn, shape, target, runtime):
    import kiln as tvm
    from kiln.relay.backend import Runtime

    x = relay.var("x", shape=shape, dtype="float32")
    mod = tvm.IRModule.from_expr(relay.Function([x], body_fn(x)))
    return relay.build(mod, target=target, executor=Executor("aot"),
                       runtime=Runtime("crt", {"system-lib": True}) if runtime == "system-lib" else Runtime("crt"))


def test_a_model_too_big_for_the_board_is_one_line_naming_the_sizes(tmp_path):
    from kiln.errors import KilnError

    # RAM: a 6 MiB intermediate (exp(x) feeds a sum and an add) on a board with 4 MiB of RAM.
    def exp_plus_sum(x):
        e = relay.exp(x)
        return relay.add(e, relay.sum(e))
    big = _aot(exp_plus_sum, (1536 * 1024,), "c -mcpu=cortex-m3", "system-lib")
    project = micro.generate_project(get_microtvm_template_projects("qemu-mps2-an385"), big, tmp_path / "ram")
    with pytest.raises(KilnError, match=r"does not fit the qemu-mps2-an385 board: it needs [\d,]+ bytes of ram "
                                        r"\(the board has 4,194,304\) \(the model's AOT arena 6,291,456 B") as info:
        project.build()
    assert "\n" not in str(info.value)
    # Flash: 640 KB of float32 weights for the M55 board's 512 KiB of code memory (standalone firmware).
    w = relay.const(np.ones((400, 400), "float32") / 400)
    heavy = _aot(lambda x: relay.nn.dense(x, w), (1, 400), "c -mcpu=cortex-m55", "crt")
    project = micro.generate_project(get_microtvm_template_projects("qemu-mps3-an547"), heavy, tmp_path / "flash")
    with pytest.raises(KilnError, match=r"it needs [\d,]+ bytes of flash \(the board has 524,288\) .*constants "
                                        r"640,000 B") as info:
        project.build()
    assert "\n" not in str(info.value)


def test_host_driven_inputs_larger_than_the_default_crt_arena(tmp_path):
    """600 KB of inputs and outputs: the CRT arena is sized for them (256 KiB + the model's I/O).
    On the host template: 600 KB through qemu's emulated UART takes a minute."""
    lib = _aot(lambda x: relay.exp(x), (75_000,), "c", "system-lib")
    project = micro.generate_project(get_microtvm_template_projects("crt"), lib, tmp_path / "io")
    assert project.arena_bytes() == 256 * 1024 + 2 * 300_032
    project.build()
    x = np.linspace(-3, 3, 75_000, dtype="float32")
    with micro.Session(project.transport(), timeout_override=30) as session:
        aot = micro.create_local_aot_executor(session)
        aot.set_input("x", x)
        aot.run()
        # libm's expf vs numpy's float32 exp: each within an ulp or two of the true value
        np.testing.assert_allclose(aot.get_output(0).numpy(), np.exp(x), rtol=4 * 2.0 ** -23)


MVE_DOT = r'''
#include <arm_mve.h>
#include "crt.h"
char __kiln_last_error[4];
int32_t dot(const KilnValue* args, const int32_t* type_codes, int32_t num_args) {
  const int8_t* a = (const int8_t*)((DLTensor*)args[0].v_handle)->data;
  const int8_t* b = (const int8_t*)((DLTensor*)args[1].v_handle)->data;
  int32_t* out = (int32_t*)((DLTensor*)args[2].v_handle)->data;
  int32_t acc = 0;
  for (int i = 0; i < 64; i += 16) acc = vmladavaq_s8(acc, vld1q_s8(a + i), vld1q_s8(b + i));
  out[0] = acc;
  return 0;
}
'''


def test_the_m55_board_runs_mve(tmp_path):
    """Helium on the Cortex-M55 board: an int8 dot product with vmladava (MVE is enabled with the
    FPU at reset) against numpy. objdump shows MVE only when told the architecture (-m armv8.1-m.main)."""
    project = generate_crt_project(get_microtvm_template_projects("qemu-mps3-an547"), MVE_DOT, ["dot"], tmp_path / "mve")
    project.build()
    asm = subprocess.run(["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", project.exe], capture_output=True,
                         text=True).stdout
    assert "vmlava.s8" in asm  # objdump's spelling of vmladava.s8
    rng = np.random.default_rng(0)
    a, b = rng.integers(-128, 128, 64, dtype=np.int8), rng.integers(-128, 128, 64, dtype=np.int8)
    with micro.Session(project.transport()) as sess:
        out = sess.empty((1,), "int32")
        sess.get_system_lib()["dot"](sess.array(a), sess.array(b), out)
        assert int(out.numpy()[0]) == int(a.astype(np.int32) @ b.astype(np.int32))
