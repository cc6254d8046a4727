"""The C graph executor (src/runtime/graph.c, kiln_graph.h) and kiln_run, built for this machine:
the outputs of tvmc packages equal the Python graph executor's, .npz files in and out (stored and
deflated), the C API example, bad input, and --device cl on the local OpenCL device."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.driver.tvmc.compiler import export_package

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUNTIME_SRC = os.path.join(ROOT, "src", "runtime")
sys.path.insert(0, os.path.join(ROOT, "tests", "relay"))
from onnx_models import GraphBuilder, run_ort  # noqa: E402


def make_runtime(out_dir: str, *extra: str) -> str:
    result = subprocess.run(["make", "-s", "-j2", "-C", RUNTIME_SRC, f"OUT={out_dir}", *extra],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return out_dir


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_runtime(str(tmp_path_factory.mktemp("c-graph-host")))


def two_output_model(target="llvm", target_host=None, argmax=True):
    """Two inputs (x, y) and a weight; outputs: conv+relu, x + 2y (float32) and an argmax (int32)."""
    x = relay.var("x", shape=(1, 4, 8, 8), dtype="float32")
    y = relay.var("y", shape=(1, 4, 8, 8), dtype="float32")
    w = relay.var("w", shape=(6, 4, 3, 3), dtype="float32")
    conv = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1)))
    s = relay.add(x, relay.multiply(y, relay.const(2.0)))
    idx = relay.argmax(relay.reshape(conv, (1, -1)), axis=1)
    outs = [conv, s, idx] if argmax else [conv, s]
    mod = tvm.IRModule.from_expr(relay.Function([x, y, w], relay.Tuple(outs)))
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((6, 4, 3, 3)).astype("float32")}
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, target_host=target_host, params=params)
    inputs = {"x": rng.standard_normal((1, 4, 8, 8)).astype("float32"),
              "y": rng.standard_normal((1, 4, 8, 8)).astype("float32")}
    return lib, inputs


def convnet_onnx(image=12):
    """conv-bn-relu, a residual block with a strided 1x1 shortcut, pooling and a dense layer."""
    g = GraphBuilder(3)
    x = g.op("Relu", [g.bn(g.conv("data", 3, 8, 3, 1, 1), 8)])
    y = g.op("Relu", [g.bn(g.conv(x, 8, 16, 3, 2, 1), 16)])
    x = g.op("Relu", [g.op("Add", [y, g.conv(x, 8, 16, 1, 2, 0)])])
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    out = g.dense(x, 16, 10)
    data = np.random.default_rng(4).standard_normal((1, 3, image, image)).astype("float32")
    return g.model({"data": data.shape}, out), {"data": data}


def python_outputs(package: str, inputs: dict, tmp) -> list:
    """The package run by the Python graph executor."""
    d = tmp / "py-extract"
    d.mkdir(exist_ok=True)
    with tarfile.open(package) as tar:
        tar.extractall(d, filter="data")
    m = graph_executor.create(open(d / "mod.json").read(), tvm.runtime.load_module(str(d / "mod.so")), tvm.cpu())
    m.load_params(open(d / "mod.params", "rb").read())
    for k, v in inputs.items():
        m.set_input(k, v)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def kiln_run(build, *args, check=True):
    result = subprocess.run([os.path.join(build, "kiln_run"), *map(str, args)], capture_output=True, text=True)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def two_package(tmp_path_factory):
    lib, inputs = two_output_model()
    path = str(tmp_path_factory.mktemp("two") / "two.tar")
    export_package(lib, path)
    return path, inputs


def test_two_inputs_three_outputs_equal_the_python_executor(build, two_package, tmp_path):
    package, inputs = two_package
    np.savez(tmp_path / "in.npz", **inputs)
    out = kiln_run(build, "--package", package, "--input", tmp_path / "in.npz", "--output", tmp_path / "out.npz",
                   "--dump-time", "--repeat", "3")
    lines = out.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines if ln.startswith("run ")] == ["run 1", "run 2", "run 3"]
    assert any(ln.startswith("mean run: ") and ln.endswith("over 3 run(s)") for ln in lines)
    got = np.load(tmp_path / "out.npz")
    assert got.files == ["output_0", "output_1", "output_2"]
    want = python_outputs(package, inputs, tmp_path)
    for i, w in enumerate(want):
        assert got[f"output_{i}"].dtype == w.dtype and got[f"output_{i}"].shape == w.shape
        np.testing.assert_array_equal(got[f"output_{i}"], w)
    # and the Python executor itself against numpy, for the elementwise output
    np.testing.assert_allclose(want[1], inputs["x"] + 2 * inputs["y"], rtol=1e-6)
    # rtvm's spellings: --model=..., --flag=value; --dump-meta lists what the model takes and gives
    meta = kiln_run(build, f"--model={package}", "--dump-meta", f"--input={tmp_path / 'in.npz'}", "--repeat=2",
                    "--output", tmp_path / "out2.npz").stdout
    assert meta.splitlines()[:8] == ["inputs:", "  x: float32[1, 4, 8, 8]", "  y: float32[1, 4, 8, 8]", "outputs:",
                                     "  output_0: float32[1, 6, 8, 8]", "  output_1: float32[1, 4, 8, 8]",
                                     "  output_2: int32[1]", "parameters: 1"]
    np.testing.assert_array_equal(np.load(tmp_path / "out2.npz")["output_0"], want[0])


def test_one_file_library(build, tmp_path):
    """relay.build(...).export_library("x.so") carries graph and parameters: kiln_run runs it as is."""
    lib, inputs = two_output_model()
    lib.export_library(str(tmp_path / "deploy.so"))
    np.savez(tmp_path / "in.npz", **inputs)
    kiln_run(build, "--package", tmp_path / "deploy.so", "--input", tmp_path / "in.npz", "--output",
             tmp_path / "out.npz")
    m = graph_executor.GraphModule(tvm.runtime.load_module(str(tmp_path / "deploy.so"))["default"](tvm.cpu()))
    m.set_input(**inputs)
    m.run()
    got = np.load(tmp_path / "out.npz")
    for i in range(3):
        np.testing.assert_array_equal(got[f"output_{i}"], m.get_output(i).numpy())
    lib.get_lib().export_library(str(tmp_path / "kernels.so"))  # kernels only: no graph
    result = kiln_run(build, "--package", tmp_path / "kernels.so", check=False)
    assert result.returncode == 2 and "kernels.so carries no graph" in result.stderr


def test_convnet_package_matches_python_and_onnxruntime(build, tmp_path):
    import onnx
    from kiln.driver import tvmc
    model, inputs = convnet_onnx()
    onnx.save(model, tmp_path / "m.onnx")
    package = str(tmp_path / "m.tar")
    tvmc.compile(tvmc.load(str(tmp_path / "m.onnx")), target="llvm", package_path=package)
    np.savez_compressed(tmp_path / "in.npz", **inputs)  # deflated members
    with zipfile.ZipFile(tmp_path / "in.npz") as z:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    kiln_run(build, "--package", package, "--input", tmp_path / "in.npz", "--output", tmp_path / "out.npz",
             "--profile")
    got = np.load(tmp_path / "out.npz")["output_0"]
    np.testing.assert_array_equal(got, python_outputs(package, inputs, tmp_path)[0])
    np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)


def test_npz_of_every_dtype_round_trips_through_a_copy_model(build, tmp_path):
    """Input arrays of each kiln dtype reach the kernels and come back as numpy wrote them."""
    dtypes = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
              "uint64", "bool"]
    shapes = [(), (5,), (2, 3), (1, 2, 3, 2)]
    vars_, outs, inputs = [], [], {}
    rng = np.random.default_rng(1)
    for i, dt in enumerate(dtypes):
        shape = shapes[i % len(shapes)]
        v = relay.var(f"in_{dt}", shape=shape, dtype=dt)
        vars_.append(v)
        outs.append(relay.copy(v) if dt != "bool" else relay.logical_not(relay.logical_not(v)))
        inputs[v.name_hint] = (rng.integers(0, 2, shape) if dt == "bool" else rng.integers(-50, 100, shape)).astype(dt)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(relay.Function(vars_, relay.Tuple(outs))), target="llvm")
    export_package(lib, str(tmp_path / "copy.tar"))
    for i, compress in enumerate([np.savez, np.savez_compressed]):
        compress(tmp_path / f"in{i}.npz", **inputs)
        kiln_run(build, "--package", tmp_path / "copy.tar", "--input", tmp_path / f"in{i}.npz", "--output",
                 tmp_path / f"out{i}.npz")
        got = np.load(tmp_path / f"out{i}.npz")
        for k, (name, value) in enumerate(inputs.items()):
            assert got[f"output_{k}"].dtype == value.dtype and got[f"output_{k}"].shape == value.shape, name
            np.testing.assert_array_equal(got[f"output_{k}"], value)


def test_deflate_block_kinds(build, tmp_path):
    """savez_compressed of incompressible bytes (stored blocks), long runs (length-258 matches) and a
    tiny array (fixed Huffman codes) read back exactly."""
    rng = np.random.default_rng(2)
    inputs = {"noise": rng.integers(0, 256, 300_000).astype("uint8"),
              "zeros": np.zeros((512, 512), "float32"),
              "tiny": np.array([1, -2, 3], "int8")}
    inputs["zeros"][7, 9] = 1.5
    vars_ = [relay.var(k, shape=v.shape, dtype=str(v.dtype)) for k, v in inputs.items()]
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(relay.Function(vars_, relay.Tuple([relay.copy(v) for v in vars_]))),
                          target="llvm")
    export_package(lib, str(tmp_path / "copy.tar"))
    np.savez_compressed(tmp_path / "in.npz", **inputs)
    kiln_run(build, "--package", tmp_path / "copy.tar", "--input", tmp_path / "in.npz", "--output", tmp_path / "o.npz")
    got = np.load(tmp_path / "o.npz")
    for k, (name, value) in enumerate(inputs.items()):
        np.testing.assert_array_equal(got[f"output_{k}"], value, err_msg=name)


def test_c_api_example(build, two_package, tmp_path):
    package, _ = two_package
    exe = tmp_path / "classify"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", f"-I{RUNTIME_SRC}", os.path.join(ROOT, "examples", "c_api",
                    "classify.c"), os.path.join(build, "libkiln_runtime.a"), "-ldl", "-lm", "-lpthread", "-o",
                    str(exe)], check=True)
    out = subprocess.run([str(exe), package, "x"], capture_output=True, text=True, check=True).stdout
    # the example fills x with a ramp and leaves y at zero (a fresh executor's inputs are zeros)
    ramp = (np.arange(4 * 8 * 8) % 1000 * np.float32(0.001)).astype("float32").reshape(1, 4, 8, 8)
    want = python_outputs(package, {"x": ramp, "y": np.zeros_like(ramp)}, tmp_path)
    assert "output_0: float32 [1, 6, 8, 8]" in out and "output_2: int32 [1]" in out
    first = out.split("output_0")[1].split("argmax: ")[1].split()[0]
    assert int(first) == int(np.argmax(want[0]))
    values = [float(v) for v in out.split("first values:")[1].splitlines()[0].split()]
    np.testing.assert_allclose(values, want[0].ravel()[:5], rtol=1e-5, atol=1e-6)


def _err(result):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kiln_run: error: "), result.stderr
    return lines[0]


def test_bad_input_gets_one_line_and_exit_code_2(build, two_package, tmp_path):
    package, inputs = two_package
    assert "usage: kiln_run" in kiln_run(build, "--help").stdout
    assert "--package is required" in _err(kiln_run(build, check=False))
    assert "does not exist" in _err(kiln_run(build, "--package", tmp_path / "nope.tar", check=False))
    with tarfile.open(tmp_path / "half.tar", "w") as tar:
        tar.add(package, arcname="mod.params")
    assert "lacks mod.so" in _err(kiln_run(build, "--package", tmp_path / "half.tar", check=False))
    np.savez(tmp_path / "wrong_name.npz", data=inputs["x"])
    msg = _err(kiln_run(build, "--package", package, "--input", tmp_path / "wrong_name.npz", check=False))
    assert "'data'" in msg and "x, y" in msg
    np.savez(tmp_path / "wrong_shape.npz", x=inputs["x"][:, :2])
    msg = _err(kiln_run(build, "--package", package, "--input", tmp_path / "wrong_shape.npz", check=False))
    assert "float32[1, 2, 8, 8]" in msg and "float32[1, 4, 8, 8]" in msg
    np.savez(tmp_path / "wrong_dtype.npz", x=inputs["x"].astype("float64"))
    assert "float64" in _err(kiln_run(build, "--package", package, "--input", tmp_path / "wrong_dtype.npz",
                                      check=False))
    np.savez(tmp_path / "weights.npz", p0=np.zeros((6, 4, 3, 3), "float32"))  # weights come from mod.params
    assert "array 'p0'" in _err(kiln_run(build, "--package", package, "--input", tmp_path / "weights.npz",
                                         check=False))
    (tmp_path / "not.npz").write_bytes(b"hello, not a zip")
    assert "not an .npz" in _err(kiln_run(build, "--package", package, "--input", tmp_path / "not.npz", check=False))
    np.save(tmp_path / "f.npy", np.asfortranarray(np.ones((2, 3), "float32")))
    with zipfile.ZipFile(tmp_path / "fortran.npz", "w") as z:
        z.write(tmp_path / "f.npy", "x.npy")
    assert "Fortran order" in _err(kiln_run(build, "--package", package, "--input", tmp_path / "fortran.npz",
                                            check=False))
    with zipfile.ZipFile(tmp_path / "bz.npz", "w", compression=zipfile.ZIP_BZIP2) as z:
        z.write(tmp_path / "f.npy", "x.npy")
    assert "compression method 12" in _err(kiln_run(build, "--package", package, "--input", tmp_path / "bz.npz",
                                                    check=False))
    assert "--repeat 0" in _err(kiln_run(build, "--package", package, "--repeat", "0", check=False))
    assert "unknown argument --frobnicate" in _err(kiln_run(build, "--frobnicate", check=False))
    # an output path in a missing directory: an error, and no partial file anywhere
    msg = _err(kiln_run(build, "--package", package, "--output", tmp_path / "no" / "out.npz", check=False))
    assert "cannot write" in msg
    assert not (tmp_path / "no").exists()


def test_damaged_npz_files_fail_cleanly_under_asan(tmp_path_factory, two_package, tmp_path):
    """Truncated and bit-flipped .npz files (stored and deflated) under AddressSanitizer/UBSan:
    an error message or a run, never a memory error."""
    if subprocess.run(["cc", "-fsanitize=address", "-x", "c", "-", "-o", os.devnull], input="int main(){}",
                      capture_output=True, text=True).returncode:
        pytest.skip("the C compiler has no AddressSanitizer")
    build = make_runtime(str(tmp_path_factory.mktemp("c-graph-asan")), "CFLAGS=-O1 -g -fsanitize=address,undefined "
                         "-fno-sanitize-recover=all", "LDFLAGS=-fsanitize=address,undefined", "STRIP=true")
    package, inputs = two_package
    rng = np.random.default_rng(5)
    for k, save in enumerate([np.savez, np.savez_compressed]):
        save(tmp_path / "good.npz", **inputs)
        blob = (tmp_path / "good.npz").read_bytes()
        cases = [blob[:n] for n in (0, 10, 100, len(blob) // 2, len(blob) - 1)]
        for _ in range(25):
            b = bytearray(blob)
            for pos in rng.integers(0, len(b), 3):
                b[pos] ^= 1 << int(rng.integers(0, 8))
            cases.append(bytes(b))
        for i, data in enumerate(cases):
            path = tmp_path / f"bad{k}_{i}.npz"
            path.write_bytes(data)
            result = kiln_run(build, "--package", package, "--input", path, check=False)
            assert "Sanitizer" not in result.stderr and "runtime error" not in result.stderr, result.stderr
            assert result.returncode in (0, 2), result.stderr


def _mutations(graph: dict, rng):
    """Graphs with one field changed: indices out of range, wrong shapes, dtypes and storage ids."""
    import copy
    import json
    for _ in range(40):
        g = copy.deepcopy(graph)
        what = int(rng.integers(0, 8))
        entry = int(rng.integers(0, len(g["attrs"]["shape"][1])))
        node = int(rng.integers(0, len(g["nodes"])))
        big = int(rng.choice([-1, 0, 1, 3, 7, 1 << 31, 1 << 62]))
        if what == 0:
            g["attrs"]["shape"][1][entry] = [big] * int(rng.integers(0, 4))
        elif what == 1:
            g["attrs"]["dltype"][1][entry] = str(rng.choice(["int8", "float64", "bogus", ""]))
        elif what == 2:
            g["attrs"]["storage_id"][1][entry] = big
        elif what == 3:
            g["node_row_ptr"][node] = big
        elif what == 4 and g["nodes"][node]["inputs"]:
            g["nodes"][node]["inputs"][0] = [big, big, 0]
        elif what == 5:
            g["heads"] = [[big, 0, 0]]
        elif what == 6:
            g["arg_nodes"].append(big)
        else:
            del g[str(rng.choice(["nodes", "heads", "attrs", "arg_nodes", "node_row_ptr"]))]
        yield json.dumps(g).encode()
    text = json.dumps(graph).encode()
    for n in (0, 1, len(text) // 3, len(text) - 1):
        yield text[:n]


def test_damaged_graphs_and_params_fail_cleanly_under_asan(tmp_path_factory, two_package, tmp_path):
    """mod.json with fields out of range and truncated mod.json / mod.params, under AddressSanitizer and
    UBSan: a one-line error (or a run), never a memory error. (The same parser serves graphs that RPC
    clients send to kiln_rpc.)"""
    import io
    import json
    if subprocess.run(["cc", "-fsanitize=address", "-x", "c", "-", "-o", os.devnull], input="int main(){}",
                      capture_output=True, text=True).returncode:
        pytest.skip("the C compiler has no AddressSanitizer")
    build = make_runtime(str(tmp_path_factory.mktemp("c-graph-asan2")), "CFLAGS=-O1 -g -fsanitize=address,undefined "
                         "-fno-sanitize-recover=all", "LDFLAGS=-fsanitize=address,undefined", "STRIP=true")
    package, _ = two_package
    with tarfile.open(package) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    graph = json.loads(files["mod.json"])
    params = files["mod.params"]
    cases = [("mod.json", g) for g in _mutations(graph, np.random.default_rng(11))]
    cases += [("mod.params", params[:n]) for n in (0, 7, 8, 16, 40, len(params) // 2, len(params) - 1)]
    cases += [("mod.params", params[:8] + b"\xff" * 8 + params[16:])]  # an absurd count
    failures = 0
    for i, (name, data) in enumerate(cases):
        path = tmp_path / f"bad{i}.tar"
        with tarfile.open(path, "w") as tar:
            for member, content in {**files, name: data}.items():
                info = tarfile.TarInfo(member)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
        result = kiln_run(build, "--package", path, check=False)
        assert "Sanitizer" not in result.stderr and "runtime error" not in result.stderr, result.stderr
        assert result.returncode in (0, 2), result.stderr
        if result.returncode:
            failures += 1
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert failures >= len(cases) // 2  # most damage is detected, not just survived


@pytest.mark.opencl
def test_opencl_package_on_the_local_device(build, tmp_path):
    if not tvm.cl(0).exist:
        pytest.skip("no OpenCL device (apt-get install -y pocl-opencl-icd)")
    # (no argmax: its OpenCL schedule does not compile yet)
    lib, inputs = two_output_model(target="opencl", target_host="llvm", argmax=False)
    export_package(lib, str(tmp_path / "cl.tar"))
    cpu_lib, _ = two_output_model(argmax=False)
    export_package(cpu_lib, str(tmp_path / "cpu.tar"))
    np.savez(tmp_path / "in.npz", **inputs)
    kiln_run(build, "--package", tmp_path / "cl.tar", "--device", "cl", "--input", tmp_path / "in.npz", "--output",
             tmp_path / "out.npz", "--dump-time", "--repeat", "2")
    wrong = kiln_run(build, "--package", tmp_path / "cpu.tar", "--device", "cl", check=False)
    assert wrong.returncode == 2 and "run on the cpu device (type 1), not on cl (type 4)" in wrong.stderr
    got = np.load(tmp_path / "out.npz")
    want = python_outputs(str(tmp_path / "cpu.tar"), inputs, tmp_path)
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[f"output_{i}"], w, rtol=1e-5, atol=1e-5)


def test_graph_with_data_dependent_outputs_is_refused_in_one_line(build, tmp_path):
    # NonZero's output is a bound-sized buffer plus a hidden length head ("dynamic_heads"); the C
    # runtime does not cut outputs to it, so it refuses the graph instead of returning the padding.
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("NonZero", ["x"], ["nz"])], "nz",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("nz", TensorProto.INT64, None)])
    mod, params = relay.frontend.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    assert '"dynamic_heads"' in lib.get_graph_json()
    export_package(lib, str(tmp_path / "nz.tar"))
    np.savez(tmp_path / "in.npz", x=np.ones((2, 3), "float32"))
    result = kiln_run(build, "--package", tmp_path / "nz.tar", "--input", tmp_path / "in.npz", "--output",
                      tmp_path / "out.npz", check=False)
    assert result.returncode != 0 and not (tmp_path / "out.npz").exists()
    assert "outputs of data-dependent size" in result.stderr and "Python runtime" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def _gpu_library(target: str, path) -> None:
    from kiln import te

    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    tvm.build(s, [A, B], target=target, name="twice").export_library(str(path))


@pytest.mark.parametrize("target, old, new, message", [
    ("opencl", None, None, None),
    ("cuda", None, None, None),
    ("opencl", b'"type_key":"opencl"', b'"type_key":"vulkan"',
     "lib.so carries 'vulkan' device code, which this runtime cannot run (it runs 'opencl' and 'cuda')"),
    ("opencl", b'"source":"', b'"sourcf":"', "lib.so: its opencl device_code lacks 'source' or 'kernels'; rebuild"),
    ("cuda", b'"ptx":"', b'"ptq":"', "lib.so: its cuda device_code lacks 'ptx' or 'kernels'; build it where NVRTC"),
])
def test_device_code_is_loaded_without_a_device(build, tmp_path, target, old, new, message):
    """module.c makes the device half of a GPU library from its device_code (the text and the
    kernel table are read by one function for every device API); loading needs no device, and a
    library with device code of an unknown kind or without its text fails in one line."""
    import ctypes

    from kiln.runtime.devices.nvrtc import have_nvrtc
    from kiln.runtime.integrity import SEAL_BYTES, seal

    if target == "cuda" and not have_nvrtc():
        pytest.skip("building CUDA needs NVRTC: pip install -e '.[cuda]'")
    _gpu_library(target, tmp_path / "built.so")
    blob = (tmp_path / "built.so").read_bytes()
    if old is not None:
        blob = blob[:-SEAL_BYTES]
        assert blob.count(old) == 1 and len(old) == len(new)
        blob = blob.replace(old, new)
    (tmp_path / "lib.so").write_bytes(blob)
    if old is not None:
        seal(str(tmp_path / "lib.so"))
    rt = ctypes.CDLL(os.path.join(build, "libkiln_runtime.so"))
    rt.kiln_last_error.restype = ctypes.c_char_p
    mod = ctypes.c_void_p()
    rc = rt.kiln_module_load(str(tmp_path / "lib.so").encode(), ctypes.byref(mod))
    if message is None:
        assert rc == 0, rt.kiln_last_error().decode()
        rt.kiln_module_free(mod)
    else:
        error = rt.kiln_last_error().decode()
        assert rc != 0 and message in error and "\n" not in error, error


def test_cuda_kernels_with_tensor_maps_are_refused_in_one_line(build, tmp_path):
    """A kernel whose bulk tensor copies read tensor maps (kiln/codegen/cuda_wgmma.py: encoded by
    the Python runtime at launch) cannot run here yet: loading says so in one line."""
    import ctypes

    from kiln import te
    from kiln.runtime.devices.nvrtc import have_nvrtc
    from kiln.topi.cuda import wgmma

    if not have_nvrtc():
        pytest.skip("building CUDA needs NVRTC: pip install -e '.[cuda]'")
    target = "cuda -arch=sm_90a -max_shared_memory_per_block=232448"
    a, w = te.placeholder((128, 128), "float16", name="A"), te.placeholder((256, 128), "float16", name="W")
    with tvm.target.Target(target):
        c = wgmma.dense_wgmma(a, w, {"n": 256, "copy": "tma"})
        f = tvm.build(wgmma.schedule_dense_wgmma([c]), [a, w, c], target=target, name="tma")
    f.export_library(str(tmp_path / "lib.so"))
    rt = ctypes.CDLL(os.path.join(build, "libkiln_runtime.so"))
    rt.kiln_last_error.restype = ctypes.c_char_p
    mod = ctypes.c_void_p()
    rc = rt.kiln_module_load(str(tmp_path / "lib.so").encode(), ctypes.byref(mod))
    error = rt.kiln_last_error().decode()
    assert rc != 0 and "takes tensor maps for bulk tensor copies" in error and "\n" not in error, error


def test_cuda_package_on_a_stand_in_driver(build, tmp_path):
    """kiln_run --device cuda against a stand-in libcuda.so.1 (tests/runtime/fake_libcuda.c: host
    memory, launches logged, nothing computed): the C runtime loads the package's PTX, finds
    every kernel in it and launches each through the library's hook, and times on the device's
    events. The GPU runs the same path for real in test_c_cuda.py."""
    from kiln.runtime.devices.nvrtc import have_nvrtc

    if not have_nvrtc():
        pytest.skip("building CUDA needs NVRTC: pip install -e '.[cuda]'")
    driver = tmp_path / "driver"
    driver.mkdir()
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(driver / "libcuda.so.1"),
                    os.path.join(ROOT, "tests", "runtime", "fake_libcuda.c")], check=True)
    lib, inputs = two_output_model(target="cuda", target_host="llvm", argmax=False)
    export_package(lib, str(tmp_path / "cuda.tar"))
    np.savez(tmp_path / "in.npz", **inputs)
    (cu,) = lib.get_lib().imported_modules
    kernels = {k["name"] for k in cu.kernels}
    assert len(kernels) == 2
    log = tmp_path / "launches.txt"
    env = dict(os.environ, LD_LIBRARY_PATH=str(driver), KILN_FAKE_CUDA_LOG=str(log))
    result = subprocess.run([os.path.join(build, "kiln_run"), "--package", str(tmp_path / "cuda.tar"), "--device",
                             "cuda", "--input", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz"),
                             "--dump-time", "--repeat", "2"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    launches = [line.split() for line in log.read_text().splitlines()]
    assert {name for name, *_ in launches} == kernels, (launches, kernels)
    for name, *dims in launches:
        gx, gy, gz, bx, by, bz, shared = map(int, dims)
        assert min(gx, gy, gz, bx, by, bz) >= 1 and bx * by * bz <= 1024, (name, dims)
    rounds = [launches[i:i + len(kernels)] for i in range(0, len(launches), len(kernels))]
    assert len(rounds) >= 2 and all(r == rounds[0] for r in rounds), launches  # every run launches alike
    assert set(np.load(tmp_path / "out.npz").files) == {"output_0", "output_1"}
