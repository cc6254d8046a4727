"""The C target: tvm.build / relay.build with target "c" vs numpy and onnxruntime; the source
compiles for a Cortex-M3 when arm-none-eabi-gcc is installed."""

import os
import subprocess
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import KilnError
from kiln.target import Target

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "micro"))


def _scale_add(target, name="scale_add"):
    n = te.var("n")
    A = te.placeholder((n, 16), name="A")
    B = te.placeholder((n, 16), name="B")
    C = te.compute((n, 16), lambda i, j: te.max(A[i, j] * 2.0 + B[i, j], 0.25), name="C")
    s = te.create_schedule(C.op)
    s[C].vectorize(C.op.axis[1])
    s[C].parallel(C.op.axis[0])
    return tvm.build(s, [A, B, C], target=target, name=name)


@pytest.mark.parametrize("target", ["c", "c -mcpu=cortex-m4", "c -keys=arm_cpu -mcpu=cortex-m4",
                                    Target("c", host="c")])
def test_elementwise_matches_numpy(target):
    f = _scale_add(target)
    src = f.get_source()
    assert "int32_t scale_add(const KilnValue* args" in src and "scale_add_unpacked(float* restrict A" in src
    assert "malloc" not in src
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((7, 16)).astype("float32") for _ in range(2))
    c = tvm.nd.empty((7, 16), "float32")
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), np.maximum(a * 2 + b, 0.25), rtol=1e-6)


def _matmul_with_scratch(n=48):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    T = te.compute((n, n), lambda i, j: B[j, i] * 1.0, name="T")  # 9 KiB of scratch: the workspace
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * T[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    return s, [A, B, C]


def test_large_scratch_comes_from_the_workspace_not_the_heap(tmp_path):
    s, args = _matmul_with_scratch()
    f = tvm.build(s, args, target="c", name="mm")
    src = f.get_source()
    assert "KilnBackendAllocWorkspace(" in src and "malloc" not in src
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((48, 48)).astype("float32") for _ in range(2))
    c = tvm.nd.empty((48, 48), "float32")
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    # A second call reuses the arena (LIFO): still right.
    f(tvm.nd.array(b), tvm.nd.array(a), c)
    np.testing.assert_allclose(c.numpy(), b @ a, rtol=1e-4, atol=1e-4)
    # Exported and loaded again like an llvm module.
    path = str(tmp_path / "mm.so")
    f.export_library(path)
    g = tvm.runtime.load_module(path)
    g(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_workspace_exhausted_is_an_error_not_a_crash():
    from kiln.codegen.c import compile_object, generate_source
    from kiln.runtime.compiled import CompiledModule

    s, args = _matmul_with_scratch()
    src, _, meta = generate_source(tvm.lower(s, args, name="mm"), Target("c"))
    f = CompiledModule([compile_object(src, ["-DKILN_WORKSPACE_BYTES=1024"])], meta, {"c": src}, type_key="c")
    a = tvm.nd.array(np.ones((48, 48), "float32"))
    with pytest.raises(KilnError, match="workspace exhausted"):
        f(a, a, tvm.nd.empty((48, 48), "float32"))


def test_thread_binding_is_refused():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(KilnError, match="thread"):
        tvm.build(s, [A, B], target="c")


def test_relay_build_c_graph_executor_matches_onnxruntime():
    from kws_model import kws_cnn, run_ort

    from kiln import relay
    from kiln.contrib import graph_executor

    model, inputs = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m4", params=params)
    assert "malloc" not in lib.get_lib().get_source()
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input("input", inputs["input"])
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), run_ort(model, inputs)[0], rtol=1e-5, atol=1e-6)


def test_source_compiles_for_cortex_m3(tmp_path):
    from kiln.micro.toolchain import missing_arm_gcc

    if missing_arm_gcc():
        pytest.skip(missing_arm_gcc())
    s, args = _matmul_with_scratch()
    src = tvm.build(s, args, target="c -mcpu=cortex-m3", name="mm").get_source()
    path = tmp_path / "mm.c"
    path.write_text(src)
    out = subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m3", "-mthumb", "-std=gnu99", "-O2", "-Wall",
                          "-c", str(path), "-o", str(tmp_path / "mm.o")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "mm.o").stat().st_size > 0
