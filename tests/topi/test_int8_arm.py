"""ARM int8 kernels: AArch64 ``sdot`` with the dot-product extension, the NEON fallback without it,
and 32-bit ARMv7-A NEON (widened bytes multiplied and accumulated, ``vmla``); built by relay, the
instructions checked in the assembly, and the model run by kiln_rpc under qemu-aarch64 (``-cpu
max``: it has the extension) or qemu-arm, exactly against the numpy int64 reference of the qnn
ops."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, rpc
from kiln.contrib import graph_executor
from kiln.runtime.params import save_params

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "crossdev"))
sys.path.insert(0, os.path.join(HERE, "..", "relay", "qnn"))
import boards  # noqa: E402
from boards import svc  # noqa: E402
from qnn_run import anchor_ops, reference  # noqa: E402
from test_int8_x86 import conv_graph, tflite_gemm_graph  # noqa: E402

ATTRS = {"sdot": "+neon,+dotprod", "neon": "+neon"}
WANT = {"sdot": [r"^\s*sdot\s+v\d+\.4s"], "neon": [r"^\s*(mla|smlal2?|smull2?)\s+v\d+"]}


def _build(tier: str, mod):
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target=f"llvm -mtriple=aarch64-linux-gnu -mattr={ATTRS[tier]}")


@pytest.mark.parametrize("tier", sorted(ATTRS))
def test_aarch64_tier_instructions(tier):
    mod, _ = conv_graph(np.random.default_rng(0))
    lib = _build(tier, mod)
    assert {op for op, _, _ in anchor_ops(lib)} == {"nn.contrib_conv2d_int8", "nn.contrib_dense_int8"}
    asm = lib.get_lib().get_source("asm")
    for pattern in WANT[tier]:
        assert re.search(pattern, asm, re.M), f"{tier}: no {pattern}"
    if tier == "neon":
        assert not re.search(r"^\s*sdot\s", asm, re.M)


def _board(tmp_path_factory, name):
    arch = boards.ARCHES[name]
    missing = arch.missing()
    if missing:
        pytest.skip(f"{name} board {missing}")
    out = boards.build_runtime(str(tmp_path_factory.mktemp(f"kiln-rpc-{name}-int8")), arch.cross)
    return boards.start_board(os.path.join(out, "kiln_rpc"), arch)


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    b = _board(tmp_path_factory, "aarch64")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def armv7_board(tmp_path_factory):
    b = _board(tmp_path_factory, "armv7")
    yield b
    b.stop()


def _run_on(board, lib, inputs, tmp_path):
    path = str(tmp_path / "mod.so")
    lib.get_lib().export_library(path)
    with rpc.connect(svc.HOST, board.port) as remote:
        remote.upload(path)
        m = graph_executor.create(lib.get_graph_json(), remote.load_module("mod.so"), remote.cpu())
        m.load_params(save_params(lib.get_params()))  # the packed weights and requantize constants
        m.set_input("x", inputs["x"])
        m.run()
        return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


ARMV7 = "llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a9 -mattr=+neon"


@pytest.mark.qemu
@pytest.mark.parametrize("rounding", ["UPWARD", "FLOAT32"])
def test_armv7_neon_int8_exact_on_qemu(armv7_board, rounding, tmp_path):
    """32-bit ARMv7-A with NEON (a Cortex-A9): the int8 conv and dense kernels (NEON tier: bytes
    widened, multiplied and accumulated in int32 lanes, vmla), with the fixed-point and the
    onnxruntime (float32) requantize, run under qemu-arm exactly as the numpy reference."""
    from kiln.relay import qnn

    rng = np.random.default_rng(11)
    mod, inputs = conv_graph(rng, stride=2, zx=200)
    if rounding == "FLOAT32":  # the same graph with the ONNX importer's rounding
        from kiln.relay.expr import Call
        from kiln.relay.visitor import ExprMutator

        class R(ExprMutator):
            def visit_Call(self, call):
                new = super().visit_Call(call)
                if isinstance(new, Call) and new.op is qnn.op.core.REQUANTIZE:
                    return Call(new.op, new.args, new.attrs.with_changes(rounding="FLOAT32"))
                return new
        from kiln.ir.module import IRModule
        mod = IRModule.from_expr(R().visit(mod["main"]))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=ARMV7)
    assert {op for op, _, _ in anchor_ops(lib)} == {"nn.contrib_conv2d_int8", "nn.contrib_dense_int8"}
    assert re.search(r"^\s*vmla\.i32\s+q\d+", lib.get_lib().get_source("asm"), re.M)
    for g, want in zip(_run_on(armv7_board, lib, inputs, tmp_path), reference(mod, inputs)):
        np.testing.assert_array_equal(g, want)


@pytest.mark.qemu
@pytest.mark.parametrize("tier", sorted(ATTRS))
def test_aarch64_int8_exact_on_qemu(board, tier, tmp_path):
    rng = np.random.default_rng(7)
    mod, inputs = conv_graph(rng, stride=2, zx=200)
    lib = _build(tier, mod)
    for g, want in zip(_run_on(board, lib, inputs, tmp_path), reference(mod, inputs)):
        np.testing.assert_array_equal(g, want)


@pytest.mark.qemu
@pytest.mark.parametrize("tier", sorted(ATTRS))
def test_aarch64_tflite_two_rounding_rescale_on_qemu(board, tier, tmp_path):
    """TFLite's two-rounding conv / depthwise / fully connected rescale fused into the AArch64
    int8 kernels (rounding GEMM: 64-bit high multiply, 32-bit rounding shift), run under qemu
    exactly as the reference executor."""
    mod, inputs = tflite_gemm_graph(np.random.default_rng(5))
    lib = _build(tier, mod)
    assert {op for op, _, _ in anchor_ops(lib)} == {"nn.contrib_conv2d_int8", "nn.contrib_depthwise_conv2d_int8",
                                                    "nn.contrib_dense_int8"}
    for g, want in zip(_run_on(board, lib, inputs, tmp_path), reference(mod, inputs)):
        np.testing.assert_array_equal(g, want)
