"""cuBLAS through BYOC: partitioning, the JSON and the CUDA build run everywhere; running needs an
NVIDIA GPU and cuBLAS (``@pytest.mark.gpu``, skipped without one)."""

import json

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.op.contrib.cublas import partition_for_cublas


def _model():
    rng = np.random.default_rng(0)
    x, a = relay.var("x", shape=(4, 32)), relay.var("a", shape=(2, 5, 8))
    b, c = relay.var("b", shape=(2, 6, 8)), relay.var("c", shape=(2, 8, 3))
    w = rng.standard_normal((16, 32)).astype("float32")
    outs = [relay.nn.relu(relay.nn.dense(x, relay.const(w))), relay.nn.batch_matmul(a, b),
            relay.nn.batch_matmul(a, c, transpose_b=False)]
    mod = tvm.IRModule.from_expr(relay.Function([x, a, b, c], relay.Tuple(outs)))
    inputs = {"x": rng.standard_normal((4, 32)), "a": rng.standard_normal((2, 5, 8)),
              "b": rng.standard_normal((2, 6, 8)), "c": rng.standard_normal((2, 8, 3))}
    inputs = {k: v.astype("float32") for k, v in inputs.items()}
    want = [np.maximum(inputs["x"] @ w.T, 0), inputs["a"] @ inputs["b"].transpose(0, 2, 1), inputs["a"] @ inputs["c"]]
    return mod, inputs, want


def _built():
    mod, inputs, want = _model()
    part = partition_for_cublas(mod)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(part, target="cuda")
    return part, lib, inputs, want


def test_products_are_offloaded_and_the_cuda_library_carries_them(tmp_path):
    part, lib, _, _ = _built()
    assert [n for n in part if n.startswith("tvmgen_")] == [f"tvmgen_default_cublas_main_{i}" for i in range(3)]
    graphs = [json.loads(m.get_source()) for m in lib.get_lib().imported_modules if m.type_key == "cublas"]
    assert [g["nodes"][0]["kind"] for g in graphs] == ["dense", "batch_matmul", "batch_matmul"]
    assert [g["nodes"][0]["attrs"].get("transpose_b") for g in graphs] == [None, True, False]
    path = str(tmp_path / "cublas.tar")
    lib.export_library(path)  # compile-only here: the .tar holds the JSON next to the CUDA host code
    import tarfile
    assert "metadata.json" in tarfile.open(path).getnames()


@pytest.mark.gpu
def test_matches_numpy_on_the_gpu():
    _, lib, inputs, want = _built()
    dev = tvm.cuda(0)
    m = graph_executor.GraphModule(lib["default"](dev))
    for k, v in inputs.items():
        m.set_input(k, tvm.nd.array(v, dev))
    m.run()
    for i, w in enumerate(want):
        np.testing.assert_allclose(m.get_output(i).numpy(), w, rtol=1e-4, atol=1e-4)
