"""qnn.Legalize per target, qnn.CanonicalizeOps, their place in relay.build (KILN_DEBUG=2), and the
integer graph on every target kind: host llvm for several -mcpu, aarch64 (cross-built), OpenCL."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from qnn_run import anchor_ops, build, module, reference, run

import kiln as tvm
from kiln import config, relay
from kiln.contrib import cc
from kiln.relay import qnn
from kiln.relay.qnn.legalize import legalize
from kiln.relay.qnn.op import nn as qnn_nn
from kiln.relay.transform.infer_type import infer
from kiln.relay.visitor import ExprVisitor
from kiln.target import Target
from kiln.target.cpu_facts import cpu_facts

RNG = np.random.default_rng(3)


def _calls(expr, name):
    found = []

    class V(ExprVisitor):
        def visit_Call(self, call):
            super().visit_Call(call)
            if getattr(call.op, "name", "") == name:
                found.append(call)
    V().visit(expr)
    return found


def small_net(data_dtype="int8"):
    """conv (per-channel) -> requantize -> add -> sigmoid table -> dense -> requantize."""
    x = relay.var("x", shape=(1, 4, 6, 6), dtype=data_dtype)
    zx = 0 if data_dtype == "int8" else 128
    w = relay.const(RNG.integers(-127, 128, (8, 4, 3, 3)).astype("int8"))
    ws = np.linspace(0.01, 0.02, 8).astype("float32")
    y = qnn.op.conv2d(x, w, zx, 0, 0.05, ws, kernel_size=(3, 3), channels=8, padding=(1, 1))
    y = qnn.op.requantize(y, np.float32(0.05) * ws, 0, 0.2, 3, axis=1, out_dtype="int8")
    y = qnn.op.add(y, y, 0.2, 3, 0.2, 3, 0.3, -1)
    y = qnn.op.sigmoid(y, 0.3, -1, 1 / 256, -128)
    y = relay.reshape(y, (1, 288))
    d = relay.const(RNG.integers(-127, 128, (10, 288)).astype("int8"))
    y = qnn.op.dense(y, d, -128, 0, 1 / 256, 0.01, units=10)
    y = qnn.op.requantize(y, 0.01 / 256, 0, 0.05, 0, out_dtype="int8")
    return module(y), {"x": RNG.integers(np.iinfo(data_dtype).min, np.iinfo(data_dtype).max + 1,
                                         (1, 4, 6, 6)).astype(data_dtype)}


@pytest.mark.parametrize("target,want", [
    ("llvm -mcpu=haswell", ("uint8", "int8")),
    ("llvm -mcpu=x86-64", None),
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod", ("int8", "int8")),
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+neon,-dotprod", None),
])
def test_legalize_signedness_per_target(target, want):
    mod, _ = small_net("int8")
    out = infer(legalize(infer(mod["main"]), Target(target)))
    convs = _calls(out, "qnn.conv2d") + _calls(out, "qnn.dense")
    dtypes = {(infer(c.args[0]).checked_type.dtype, infer(c.args[1]).checked_type.dtype) for c in convs}
    if want is None:
        assert out is not None and dtypes == {("int8", "int8")}
    else:
        assert dtypes == {want}


def test_legalize_keeps_the_integers():
    """Data shifted by 128 with its zero point: the same int32 result as the original op."""
    mod, inputs = small_net("int8")
    ref = reference(mod, inputs)[0]
    with Target("llvm -mcpu=haswell"):
        legal = infer(legalize(infer(mod["main"]), Target("llvm -mcpu=haswell")))
    assert _calls(legal, "qnn.conv2d")[0].args[0] is not mod["main"].body  # it did shift
    from kiln.ir.module import IRModule
    np.testing.assert_array_equal(reference(IRModule({"main": legal}), inputs)[0], ref)


@pytest.mark.parametrize("mcpu", ["x86-64", "haswell", "host"])
@pytest.mark.parametrize("data_dtype", ["int8", "uint8"])
def test_integer_graph_exact_on_host_cpus(mcpu, data_dtype):
    if mcpu == "haswell" and "avx2" not in cpu_facts("llvm").features:
        pytest.skip("this machine cannot run AVX2 code")
    mod, inputs = small_net(data_dtype)
    target = "llvm" if mcpu == "host" else f"llvm -mcpu={mcpu}"
    np.testing.assert_array_equal(run(mod, inputs, target)[0], reference(mod, inputs)[0])


def test_passes_visible_with_kiln_debug_2():
    mod, _ = small_net()
    buf = io.StringIO()
    with config.override(debug=2), contextlib.redirect_stdout(buf):
        build(mod, "llvm")
    text = buf.getvalue()
    for name in ("FakeQuantizationToInteger", "qnn.Legalize", "qnn.CanonicalizeOps"):
        assert f"after pass {name}\n" in text
    after = text.split("after pass qnn.CanonicalizeOps\n", 1)[1].split("# kiln: after pass", 1)[0]
    assert "qnn." not in after and ("nn.conv2d" in after or "nn.contrib_conv2d_int8" in after)


def test_no_float_conv_or_dense_in_lowered_kernels():
    lib = build(small_net()[0], "llvm -mcpu=haswell", config={"relay.qnn.int8_kernels": False})  # canonical path
    ops = anchor_ops(lib)
    assert sorted({name for name, _, _ in ops}) == ["nn.conv2d", "nn.dense"]
    for name, ins, out in ops:
        assert set(ins) <= {"int8", "uint8"} and out == "int32", (name, ins, out)


def test_int8_kernels_replace_conv_and_dense_on_avx2():
    """With the CPU int8 kernels (the default), the conv and dense anchors are theirs: u8 data."""
    lib = build(small_net()[0], "llvm -mcpu=haswell")
    ops = anchor_ops(lib, ("nn.conv2d", "nn.dense", "nn.contrib_conv2d_int8", "nn.contrib_dense_int8"))
    assert sorted({name for name, _, _ in ops}) == ["nn.contrib_conv2d_int8", "nn.contrib_dense_int8"]
    assert {ins[0] for _, ins, _ in ops} == {"uint8"}


@pytest.mark.skipif(cc.find_lld() is None, reason="needs ld.lld to link an aarch64 library")
def test_aarch64_builds_integer_graph(tmp_path):
    mod, _ = small_net("uint8")
    lib = build(mod, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod")
    path = tmp_path / "q.so"
    lib.export_library(str(path))
    from kiln.runtime.elf import elf_arch
    assert "aarch64" in str(elf_arch(str(path))).lower()


@pytest.mark.opencl
@pytest.mark.parametrize("data_dtype", ["int8", "uint8"])
def test_integer_graph_exact_on_opencl(data_dtype):
    mod, inputs = small_net(data_dtype)
    np.testing.assert_array_equal(run(mod, inputs, "opencl")[0], reference(mod, inputs)[0])


def test_legalize_skips_gpu_targets():
    mod, _ = small_net("int8")
    out = legalize(infer(mod["main"]), Target("opencl", host="llvm"))
    assert all(infer(c.args[0]).checked_type.dtype == "int8" for c in _calls(out, "qnn.conv2d"))
    assert qnn_nn.CONV2D.name == "qnn.conv2d"


def _cuda_lib(data_dtype):
    from kiln.codegen import cuda as cg
    if not cg.have_nvrtc():
        pytest.skip("needs NVRTC: pip install -e '.[cuda]'")
    mod, inputs = small_net(data_dtype)
    return build(mod, "cuda"), mod, inputs


@pytest.mark.parametrize("data_dtype", ["int8", "uint8"])
def test_cuda_builds_integer_graph(data_dtype):
    """NVRTC compiles every kernel of the integer graph (no GPU needed)."""
    lib, _, _ = _cuda_lib(data_dtype)
    ops = anchor_ops(lib)
    assert ops and all(set(i) <= {"int8", "uint8"} and o == "int32" for _, i, o in ops), ops


@pytest.mark.gpu
@pytest.mark.parametrize("data_dtype", ["int8", "uint8"])
def test_integer_graph_exact_on_cuda(data_dtype):
    import kiln as tvm
    from kiln.contrib import graph_executor
    lib, mod, inputs = _cuda_lib(data_dtype)
    m = graph_executor.GraphModule(lib["default"](tvm.cuda(0)))
    m.set_input(**inputs)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), reference(mod, inputs)[0])
