"""oneDNN through BYOC: models partitioned for dnnl match onnxruntime; the offloaded subgraphs
are listed and dumped; libraries with them export (.so, .tar), load and run over RPC."""

import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, rpc
from kiln.contrib import graph_executor
from kiln.errors import CompileError
from kiln.relay.op.contrib.dnnl import partition_for_dnnl
from kiln.runtime.json_runtime import dnnl_available

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "rpc"))
from onnx_models import bert_block, mobilenet_v2, resnet18, run_ort  # noqa: E402

import rpc_services as svc  # noqa: E402

MISSING = dnnl_available()
needs_dnnl = pytest.mark.skipif(MISSING is not None, reason=f"needs oneDNN: {MISSING}")
TOL = dict(rtol=1e-4, atol=1e-4)
MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert_block": bert_block}
_built: dict = {}


def built(name):
    if name not in _built:
        model, inputs = MODELS[name]()
        mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
        part = partition_for_dnnl(mod, params)
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(part, target="llvm")
        _built[name] = (part, inputs, lib, run_ort(model, inputs))
    return _built[name]


def run(module, inputs):
    for k, v in inputs.items():
        module.set_input(k, v)
    module.run()
    return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]


@needs_dnnl
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name):
    part, inputs, lib, expected = built(name)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    for got, want in zip(run(m, inputs), expected):
        np.testing.assert_allclose(got, want, **TOL)


@needs_dnnl
def test_resnet18_subgraphs_are_listed_and_dumped():
    part, _, lib, _ = built("resnet18")
    dnnl = [m for m in lib.get_lib().imported_modules if m.type_key == "dnnl"]
    names = sorted(n for n in part if n.startswith("tvmgen_default_dnnl_main_"))
    assert [m.symbol for m in dnnl] == names and len(dnnl) == 2
    import json
    graphs = [json.loads(m.get_source()) for m in dnnl]
    kinds = [n["name"] for g in graphs for n in g["nodes"]]
    assert kinds.count("dnnl.conv2d_bias_sum_relu") == 8  # every residual add fused into a conv
    assert "nn.max_pool2d" in kinds and "nn.global_avg_pool2d" in kinds and "dnnl.dense_bias" in kinds
    # Flatten (a reshape, between the pool and the dense layer) runs on a kiln kernel
    graph = json.loads(lib.get_graph_json())
    kiln_ops = [n["name"] for n in graph["nodes"] if n["op"] == "tvm_op" and "compiler" not in n["attrs"]]
    assert kiln_ops == ["tvmgen_default_fused_reshape"]


@needs_dnnl
@pytest.mark.parametrize("ext", ["so", "tar"])
def test_exported_library_carries_the_subgraphs(ext, tmp_path):
    _, inputs, lib, expected = built("resnet18")
    path = str(tmp_path / f"resnet18.{ext}")
    lib.export_library(path)
    loaded = tvm.runtime.load_module(path)
    dnnl = [m for m in loaded.imported_modules if m.type_key == "dnnl"]
    assert [m.get_source() for m in dnnl] == [m.get_source() for m in lib.get_lib().imported_modules
                                               if m.type_key == "dnnl"]
    m = graph_executor.GraphModule(loaded["default"](tvm.cpu()))
    np.testing.assert_allclose(run(m, inputs)[0], expected[0], **TOL)


@needs_dnnl
def test_resnet18_runs_over_rpc(tmp_path):
    _, inputs, lib, expected = built("resnet18")
    path = str(tmp_path / "resnet18_dnnl.so")
    lib.export_library(path)
    server = svc.server()
    try:
        remote = rpc.connect(svc.HOST, server.port)
        remote.upload(path)
        rlib = remote.load_module(os.path.basename(path))
        dev = remote.cpu(0)
        m = graph_executor.GraphModule(rlib["default"](dev))
        m.set_input("data", tvm.nd.array(inputs["data"], dev))
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), expected[0], **TOL)
        remote.close()
    finally:
        server.stop()


@needs_dnnl
def test_every_op_offloaded_still_builds():
    x = relay.var("x", shape=(2, 8))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.sigmoid(relay.nn.relu(x) + x)))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_dnnl(mod), target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    data = np.random.default_rng(0).standard_normal((2, 8)).astype("float32")
    want = 1 / (1 + np.exp(-(np.maximum(data, 0) + data)))
    np.testing.assert_allclose(run(m, {"x": data})[0], want, rtol=1e-5, atol=1e-6)


def test_build_without_onednn_names_the_package(monkeypatch):
    import kiln.runtime.json_runtime as jr

    monkeypatch.setattr(jr, "dnnl_available", lambda: jr.INSTALL_HINT)
    x = relay.var("x", shape=(2, 8))
    part = partition_for_dnnl(tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.negative(x)))))
    assert any(n.startswith("tvmgen_default_dnnl_main_") for n in part)  # partitioning needs no oneDNN
    with pytest.raises(CompileError, match="libdnnl-dev"):
        relay.build(part, target="llvm")


@needs_dnnl
@pytest.mark.parametrize("isa", ["SSE41", "AVX2"])
def test_runs_on_older_cpus(isa, tmp_path):
    """oneDNN picks its kernels at run time; ONEDNN_MAX_CPU_ISA makes it run as on an older CPU
    (an AVX2-only Zen 3, or SSE4.1), in a fresh process since oneDNN reads it once."""
    import subprocess

    script = tmp_path / "run.py"
    script.write_text(
        "import numpy as np, kiln as tvm\n"
        "from kiln import relay\n"
        "from kiln.contrib import graph_executor\n"
        "from kiln.relay.op.contrib.dnnl import partition_for_dnnl\n"
        "rng = np.random.default_rng(0)\n"
        "x = relay.var('x', shape=(1, 8, 12, 12))\n"
        "w = rng.standard_normal((16, 8, 3, 3)).astype('float32')\n"
        "b = rng.standard_normal(16).astype('float32')\n"
        "y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, relay.const(w), padding=(1, 1)), relay.const(b)))\n"
        "y = relay.nn.max_pool2d(y, (2, 2), (2, 2))\n"
        "mod = tvm.IRModule.from_expr(relay.Function([x], y))\n"
        "with tvm.transform.PassContext(opt_level=3):\n"
        "    lib = relay.build(partition_for_dnnl(mod), target='llvm')\n"
        "m = graph_executor.GraphModule(lib['default'](tvm.cpu()))\n"
        "d = rng.standard_normal((1, 8, 12, 12)).astype('float32')\n"
        "m.set_input('x', d); m.run()\n"
        "ref = relay.create_executor('debug', mod).evaluate()(d)\n"
        "ref = ref.numpy() if hasattr(ref, 'numpy') else np.asarray(ref)\n"
        "np.testing.assert_allclose(m.get_output(0).numpy(), ref, rtol=1e-4, atol=1e-4)\n"
        "print('ok')\n")
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa, ONEDNN_VERBOSE="1",
               PYTHONPATH=os.path.abspath(os.path.join(HERE, "..", "..", "..")))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
    convs = [line for line in proc.stdout.splitlines() if line.startswith("onednn_verbose,exec,cpu,convolution")]
    assert convs and not any("avx512" in line for line in convs), convs


@needs_dnnl
def test_layouts_mix_inside_a_subgraph():
    """Convolution outputs stay channels-last inside a subgraph; binary ops mixing them with
    NCHW graph inputs, elementwise ops and pools on them, and outputs read back in NCHW."""
    rng = np.random.default_rng(3)
    x, x2 = relay.var("x", shape=(1, 8, 10, 10)), relay.var("x2", shape=(1, 16, 10, 10))
    y = relay.nn.conv2d(x, relay.const(rng.standard_normal((16, 8, 3, 3)).astype("float32")), padding=(1, 1))
    outs = [relay.sigmoid(relay.multiply(y, x2)), relay.subtract(x2, y), relay.nn.max_pool2d(y, (2, 2), (2, 2)),
            relay.nn.relu(y) * relay.const(np.float32(0.5))]
    mod = tvm.IRModule.from_expr(relay.Function([x, x2], relay.Tuple(outs)))
    part = partition_for_dnnl(mod)
    assert [n for n in part if n.startswith("tvmgen_")] == ["tvmgen_default_dnnl_main_0"]
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(part, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    ins = {"x": rng.standard_normal((1, 8, 10, 10)).astype("float32"),
           "x2": rng.standard_normal((1, 16, 10, 10)).astype("float32")}
    got = run(m, ins)
    want = relay.create_executor("debug", mod).evaluate()(*ins.values())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(getattr(w, "numpy", lambda: w)()), rtol=1e-4, atol=1e-4)


@needs_dnnl
def test_aot_executor_refuses_offloaded_functions():
    x = relay.var("x", shape=(2, 8))
    part = partition_for_dnnl(tvm.IRModule.from_expr(relay.Function([x], relay.negative(relay.nn.relu(x)))))
    with pytest.raises(CompileError, match="aot executor cannot call functions offloaded to \\['dnnl'\\]"):
        relay.build(part, target="c", executor="aot")
