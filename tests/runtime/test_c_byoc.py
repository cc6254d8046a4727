"""Offloaded subgraphs in the C runtime (src/runtime/json_external.c, dnnl.c): libraries built
with ``dnnl, llvm`` run under kiln_run and kiln_rpc (no Python on the device side) with outputs
equal to the Python executor and onnxruntime; a library offloading to a compiler the C runtime
has no executor for, a missing shim and a missing oneDNN each fail with one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, rpc
from kiln.contrib import graph_executor
from kiln.driver import tvmc
from kiln.driver.tvmc.compiler import export_package
from kiln.relay.op.contrib.dnnl import partition_for_dnnl
from kiln.runtime.json_runtime import dnnl_available

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "relay"))
sys.path.insert(0, os.path.join(HERE, "..", "crossdev"))
import boards  # noqa: E402
from onnx_models import bert_block, mobilenet_v2, resnet18, run_ort  # noqa: E402

from test_c_graph import convnet_onnx, make_runtime  # noqa: E402

MISSING = dnnl_available()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"needs oneDNN: {MISSING}")
TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = make_runtime(str(tmp_path_factory.mktemp("c-byoc")))
    assert os.path.exists(os.path.join(out, "libkiln_dnnl.so")), "make builds the shim when libdnnl-dev is installed"
    return out


@pytest.fixture(scope="module")
def convnet(tmp_path_factory):
    """conv-bn-relu, a residual block, pooling and a dense layer, offloaded to oneDNN; exported as a
    tvmc package and as a one-file library, with the Python executor's and onnxruntime's outputs."""
    model, inputs = convnet_onnx(image=12)
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_dnnl(mod, params), target="llvm")
    d = tmp_path_factory.mktemp("convnet")
    export_package(lib, str(d / "net.tar"))
    lib.export_library(str(d / "net.so"))
    lib.export_library(str(d / "net_lib.tar"))
    np.savez(d / "in.npz", **inputs)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    for k, v in inputs.items():
        m.set_input(k, v)
    m.run()
    return d, lib, inputs, m.get_output(0).numpy(), run_ort(model, inputs)[0]


def kiln_run(exe, *args, env=None):
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("package", ["net.tar", "net.so"])
def test_kiln_run_matches_python_and_onnxruntime(build, convnet, package):
    d, lib, _, python, ort = convnet
    assert any(m.type_key == "dnnl" for m in lib.get_lib().imported_modules)
    out = d / f"out-{package}.npz"
    result = kiln_run(os.path.join(build, "kiln_run"), "--package", d / package, "--input", d / "in.npz",
                      "--output", out, "--threads", "1", "--repeat", "2")
    assert result.returncode == 0, result.stderr
    got = np.load(out)["output_0"]
    np.testing.assert_allclose(got, python, **TOL)
    np.testing.assert_allclose(got, ort, **TOL)
    # ... and oneDNN really ran: the same package without the shim cannot start
    result = kiln_run(os.path.join(build, "kiln_run"), "--package", d / package, "--input", d / "in.npz",
                      env=dict(os.environ, KILN_DNNL_SHIM=str(d / "nope.so")))
    assert result.returncode != 0 and "nope.so does not exist" in result.stderr


def test_resnet18_from_tvmc_dnnl_llvm(build, tmp_path):
    """tvmc compile --target "dnnl, llvm" (ResNet-18, 32x32): kiln_run's outputs equal the Python
    executor's (tvmc run) and onnxruntime's."""
    import onnx

    model, inputs = resnet18(image=32, classes=10)
    onnx.save(model, str(tmp_path / "r18.onnx"))
    package = tvmc.compile(tvmc.load(str(tmp_path / "r18.onnx")), target="dnnl, llvm",
                           package_path=str(tmp_path / "r18.tar"))
    assert '"compiler":"dnnl"' in package.graph.replace(" ", "")
    python = tvmc.run(package, device="cpu", inputs=inputs, number=1, repeat=1).outputs["output_0"]
    np.savez(tmp_path / "in.npz", **inputs)
    result = kiln_run(os.path.join(build, "kiln_run"), "--package", tmp_path / "r18.tar", "--input",
                      tmp_path / "in.npz", "--output", tmp_path / "out.npz", "--profile")
    assert result.returncode == 0, result.stderr
    assert "tvmgen_default_dnnl_main_0" in result.stdout  # the offloaded subgraph is one profiled kernel
    got = np.load(tmp_path / "out.npz")["output_0"]
    np.testing.assert_allclose(got, python, **TOL)
    np.testing.assert_allclose(got, run_ort(model, inputs)[0], **TOL)


@pytest.fixture(scope="module")
def server(build):
    board = boards.start_board(os.path.join(build, "kiln_rpc"), None)
    yield board
    board.stop()


def _remote_graph(server, lib, path, name):
    """lib's graph on the C server, over the library file `path` uploaded as `name`."""
    remote = rpc.connect("127.0.0.1", server.port)
    remote.upload(str(path), name)
    m = graph_executor.create(lib.get_graph_json(), remote.load_module(name), remote.cpu())
    return remote, m


@pytest.mark.parametrize("name", ["mobilenet_v2", "bert_block"])
def test_every_node_kind_matches(build, name, tmp_path):
    """MobileNetV2 32x32 (grouped convolutions, clip, residual adds, pools, dense) and a BERT
    block (matmul, softmax, dense, binary ops with a scalar operand) under kiln_run."""
    import json

    model, inputs = (mobilenet_v2(image=32, classes=10) if name == "mobilenet_v2" else bert_block())
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_dnnl(mod, params), target="llvm")
    kinds = {n["kind"] for m in lib.get_lib().imported_modules for n in json.loads(m.get_source())["nodes"]}
    assert kinds >= ({"conv2d", "eltwise", "binary", "pool2d", "dense"} if name == "mobilenet_v2"
                     else {"matmul", "softmax", "binary", "dense"})
    export_package(lib, str(tmp_path / "m.tar"))
    np.savez(tmp_path / "in.npz", **inputs)
    result = kiln_run(os.path.join(build, "kiln_run"), "--package", tmp_path / "m.tar", "--input", tmp_path / "in.npz",
                      "--output", tmp_path / "out.npz")
    assert result.returncode == 0, result.stderr
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    for k, v in inputs.items():
        m.set_input(k, v)
    m.run()
    got = np.load(tmp_path / "out.npz")
    for i, want in enumerate(run_ort(model, inputs)):
        np.testing.assert_allclose(got[f"output_{i}"], m.get_output(i).numpy(), **TOL)
        np.testing.assert_allclose(got[f"output_{i}"], want, **TOL)


def test_elementwise_and_binary_algorithms(build, tmp_path):
    """Every eltwise and binary algorithm the dnnl codegen emits, against numpy."""
    x = relay.var("x", shape=(2, 3, 4, 5))
    y = relay.var("y", shape=(3, 1, 1))
    a = relay.sqrt(relay.abs(x))
    b = relay.sigmoid(relay.tanh(x))
    c = relay.clip(relay.exp(relay.nn.relu(x)), 0.5, 2.0)
    d = relay.divide(relay.subtract(relay.maximum(a, b), relay.minimum(b, c)), relay.add(relay.multiply(c, y), y))
    mod = partition_for_dnnl(tvm.IRModule.from_expr(relay.Function([x, y], d)))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    algs = sorted(n["attrs"]["alg"] for m in lib.get_lib().imported_modules for n in m.graph["nodes"])
    assert algs == sorted(["abs", "sqrt", "tanh", "sigmoid", "relu", "exp", "clip", "max", "min", "sub", "mul",
                           "add", "div"])
    lib.export_library(str(tmp_path / "e.so"))
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((2, 3, 4, 5)).astype("float32")
    yv = (rng.random((3, 1, 1)) + 0.5).astype("float32")
    np.savez(tmp_path / "in.npz", x=xv, y=yv)
    result = kiln_run(os.path.join(build, "kiln_run"), "--package", tmp_path / "e.so", "--input", tmp_path / "in.npz",
                      "--output", tmp_path / "out.npz")
    assert result.returncode == 0, result.stderr
    sig = 1 / (1 + np.exp(-np.tanh(xv)))
    cv = np.clip(np.exp(np.maximum(xv, 0)), 0.5, 2.0)
    want = (np.maximum(np.sqrt(np.abs(xv)), sig) - np.minimum(sig, cv)) / (cv * yv + yv)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], want, rtol=1e-5, atol=1e-5)


def test_rpc_server_loads_a_tar_library_with_subgraphs(server, convnet):
    """kiln_rpc relinks the .tar library on the device and runs the graph there."""
    d, lib, inputs, python, ort = convnet
    remote, m = _remote_graph(server, lib, d / "net_lib.tar", "net_lib.tar")
    try:
        m.load_params(relay.save_param_dict(lib.get_params()))
        m.set_input("data", inputs["data"])
        m.run()
        got = m.get_output(0).numpy()
    finally:
        remote.close()
    np.testing.assert_allclose(got, python, **TOL)
    np.testing.assert_allclose(got, ort, **TOL)


@pytest.mark.parametrize("bind", [True, False])
def test_changed_weights_reach_onednn_on_the_c_server(server, bind, tmp_path):
    """set_input / load_params of an offloaded layer's weight after a run (a constant of the
    function, or a weight left as a graph input) changes what oneDNN computes, as in Python
    (tests/relay/byoc/test_dnnl_weights.py, whose model this is)."""
    sys.path.insert(0, os.path.join(HERE, "..", "relay", "byoc"))
    from test_dnnl_weights import X, _model, _weights

    from kiln.relay.backend.contrib import constant_params

    old = _weights(0)
    mod, params = relay.frontend.from_onnx(_model(old), shape={"x": (1, 4, 8, 8)}, freeze_params=False)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_dnnl(mod, params if bind else None), target="llvm")
    lib.export_library(str(tmp_path / "w.so"))
    remote, m = _remote_graph(server, lib, tmp_path / "w.so", "w.so")

    def run(weights):
        m.set_input("x", X["x"])
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), run_ort(_model(weights), X)[0], **TOL)

    try:
        if bind:
            m.load_params(relay.save_param_dict(lib.get_params()))
            run(old)  # oneDNN reorders the weights here
            by_shape = {tuple(lib.get_params()[p].shape): p for p in constant_params(lib).values()}
            new = dict(_weights(1), b1=old["b1"])
            for key in ("w1", "w2", "w3"):
                m.set_input(by_shape[new[key].shape], new[key])
            run(new)
            flipped = {k: v.numpy() for k, v in lib.get_params().items()}
            flipped[by_shape[(8, 4, 3, 3)]] *= -1
            m.load_params(relay.save_param_dict(flipped))
            run(dict(old, w1=-old["w1"]))
        else:  # the weights are inputs of the offloaded functions
            for weights in (old, _weights(2)):
                for k, v in weights.items():
                    m.set_input(k, v)
                run(weights)
    finally:
        remote.close()


def _acme_library(path):
    """A library with a subgraph offloaded to "acme", a compiler of the user's own (its JSON is
    written by the dnnl serializer; only the name differs)."""
    from kiln.relay.backend.contrib import CODEGENS, register_codegen
    from kiln.relay.backend.contrib.dnnl import _convert
    from kiln.relay.backend.contrib.json_graph import Serializer

    tvm.ir.register_op_attr("nn.relu", "target.acme", lambda call: True)
    register_codegen("acme", lambda func: Serializer(func, _convert).serialize())
    try:
        x = relay.var("x", shape=(2, 8))
        mod = tvm.IRModule.from_expr(relay.Function([x], relay.negative(relay.nn.relu(x))))
        seq = tvm.transform.Sequential([relay.transform.AnnotateTarget(["acme"]),
                                        relay.transform.MergeCompilerRegions(), relay.transform.PartitionGraph()])
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(seq(mod), target="llvm")
    finally:
        CODEGENS.pop("acme", None)
    assert [m.type_key for m in lib.get_lib().imported_modules] == ["acme"]
    lib.export_library(str(path))


def test_unsupported_compiler_is_named_in_one_line(build, tmp_path):
    _acme_library(tmp_path / "acme.so")
    result = kiln_run(os.path.join(build, "kiln_run"), "--package", tmp_path / "acme.so")
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert "this library offloads subgraphs to acme (tvmgen_default_acme_main_0); the C runtime supports: dnnl" \
        in lines[0]


def test_missing_shim_and_missing_onednn_are_one_line(build, convnet, tmp_path):
    d = convnet[0]
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(os.path.join(build, "kiln_run"), alone / "kiln_run")  # without libkiln_dnnl.so beside it
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_DNNL_SHIM", "LD_LIBRARY_PATH")}
    result = kiln_run(str(alone / "kiln_run"), "--package", d / "net.tar", env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert "offloads subgraphs to dnnl (oneDNN), but the oneDNN shim libkiln_dnnl.so was not found" in lines[0]
    assert "make -C src/runtime dnnl" in lines[0]
    # A shim whose oneDNN is not installed: it needs a libdnnl that this machine lacks.
    (tmp_path / "fake.c").write_text("int kd_version(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "libdnnl.so.99", tmp_path / "fake.c",
                    "-Wl,-soname,libdnnl.so.99"], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "shim.so", tmp_path / "fake.c", "-Wl,--no-as-needed",
                    tmp_path / "libdnnl.so.99"], check=True)
    os.unlink(tmp_path / "libdnnl.so.99")
    result = kiln_run(str(alone / "kiln_run"), "--package", d / "net.tar",
                      env=dict(env, KILN_DNNL_SHIM=str(tmp_path / "shim.so")))
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert "oneDNN is not installed on this machine (libdnnl.so.99" in lines[0] and "libdnnl" in lines[0]


def _tvmc_compile(onnx_file, output, target, *options, env=None):
    return subprocess.run([sys.executable, "-m", "kiln.driver.tvmc", "compile", str(onnx_file), "-o", str(output),
                           "--target", target, *options], capture_output=True, text=True, env=env)


@pytest.mark.qemu
def test_aarch64_board_without_onednn_says_so(tmp_path):
    """The aarch64 cross build (no oneDNN there) still builds and runs libraries that offload
    nothing; a dnnl library for it is refused when it is built, in one line naming what is missing."""
    import onnx

    arch = boards.ARCHES["aarch64"]
    if arch.missing():
        pytest.skip(f"aarch64 board {arch.missing()}")
    build = boards.build_runtime(str(tmp_path / "rt"), arch.cross)
    assert not os.path.exists(os.path.join(build, "libkiln_dnnl.so"))
    model, inputs = convnet_onnx(image=12)
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", **inputs)
    board = [arch.qemu, "-L", arch.sysroot, os.path.join(build, "kiln_run")]
    cross = ("--target-llvm-mtriple", "aarch64-linux-gnu", "--cross-compiler", f"{arch.cross}gcc")
    made = _tvmc_compile(tmp_path / "m.onnx", tmp_path / "plain.tar", "llvm", *cross)
    assert made.returncode == 0, made.stdout + made.stderr
    result = subprocess.run([*board, "--package", tmp_path / "plain.tar", "--input", tmp_path / "in.npz", "--output",
                             tmp_path / "out.npz"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], run_ort(model, inputs)[0], **TOL)
    made = _tvmc_compile(tmp_path / "m.onnx", tmp_path / "dnnl.tar", "dnnl, llvm", *cross,
                         env={k: v for k, v in os.environ.items() if k != "KILN_DNNL_SHIMS"})
    lines = made.stderr.strip().splitlines()
    assert made.returncode != 0 and len(lines) == 1, made.stdout + made.stderr
    assert "cannot build oneDNN (dnnl) subgraphs for aarch64" in lines[0] and "KILN_DNNL_SHIMS" in lines[0]


@pytest.mark.parametrize("old, new, message", [
    (b'\\"kind\\":\\"conv2d\\"', b'\\"kind\\":\\"conv3d\\"',
     "node 0 (dnnl.conv2d_bias_relu) of its JSON graph has kind 'conv3d', which this runtime's oneDNN executor"),
    (b'\\"version\\":1', b'\\"version\\":7', "is not a kiln-json-graph of version 1 (it says kiln-json-graph 7)"),
    (b'\\"outputs\\":[1', b'\\"outputs\\":[9', "output 0 of tvmgen_default_dnnl_main_0 refers to no entry"),
    (b'"type_key": "dnnl"', b'"type_key": "dnn!"',
     "this library offloads subgraphs to dnn! (tvmgen_default_dnnl_main_0)"),
])
def test_damaged_subgraph_json_is_one_line(build, convnet, tmp_path, old, new, message):
    """A library whose __kiln_external_modules is wrong (bytes patched in the .so, then sealed again
    as if export_library had written them) fails to load with one line naming the library and the
    problem."""
    from kiln.runtime.integrity import SEAL_BYTES, seal
    blob = (convnet[0] / "net.so").read_bytes()[:-SEAL_BYTES]
    assert blob.count(old) >= 1 and len(old) == len(new)
    (tmp_path / "bad.so").write_bytes(blob.replace(old, new, 1))
    seal(str(tmp_path / "bad.so"))
    result = subprocess.run([os.path.join(build, "kiln_run"), "--package", "bad.so"], cwd=tmp_path,  # a bare name
                            capture_output=True, text=True)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("kiln_run: error: bad.so: ") and message in lines[0], lines[0]
