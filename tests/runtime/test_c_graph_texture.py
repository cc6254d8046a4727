"""Texture entries in the C graph executor (attrs.storage_scope of opencl -device=adreno builds):
images for global.texture* entries, kernels taking them as image2d_t, inputs, weights and outputs
through the images, image sharing, and bad storage_scope; on the local OpenCL device (PoCL),
against numpy and the Python graph executor."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tarfile

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, te
from kiln.contrib import graph_executor
from kiln.driver.tvmc.compiler import export_package
from kiln.ir.module import IRModule
from kiln.relay.param_dict import save_param_dict
from kiln.te.lower import lower_to_primfunc

from test_c_graph import RUNTIME_SRC, kiln_run, make_runtime

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.opencl

SHAPE = (1, 2, 3, 5, 4)  # folds: global.texture 6 x 5 texels, -nhwc 2 x 15, -weight 1 x 30
TEX, NHWC, WEIGHT = "global.texture", "global.texture-nhwc", "global.texture-weight"


def opencl_api():
    from kiln.runtime.devices.opencl import API

    return API


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    if not tvm.cl(0).exist:
        pytest.skip("no OpenCL device (apt-get install -y pocl-opencl-icd)")
    if not opencl_api().attribute(0, "image_support"):
        pytest.skip("the OpenCL device has no image support")
    return make_runtime(str(tmp_path_factory.mktemp("c-graph-texture")))


def _kernel(name, scopes, fn, shape=SHAPE):
    """out = fn(*ins) elementwise over `shape`, its parameters in `scopes` (ins..., out): a PrimFunc
    whose texture parameters the OpenCL printer makes image2d_t."""
    ins = [te.placeholder(shape, name=f"in{i}") for i in range(len(scopes) - 1)]
    out = te.compute(shape, lambda *i: fn(*[t(*i) for t in ins]), name="out")
    s = te.create_schedule(out.op)
    n, c, h, w, k = s[out].op.axis
    s[out].bind(s[out].fuse(s[out].fuse(n, c), h), te.thread_axis("blockIdx.x"))
    s[out].bind(w, te.thread_axis("threadIdx.x"))
    if scopes[-1] != "global":
        s[out].vectorize(k)  # texture writes are whole texels
    f = lower_to_primfunc(s, [*ins, out], name)
    bm = {p: dataclasses.replace(f.buffer_map[p], scope=sc) for p, sc in zip(f.params, scopes)}
    return dataclasses.replace(f, buffer_map=bm).with_attr("global_symbol", name)


KERNELS = {
    "pack": ([("global"), TEX], lambda a: a * 2.0),
    "pack_nhwc": (["global", NHWC], lambda a: a * 2.0),
    "mix": ([TEX, TEX, WEIGHT, NHWC], lambda t, x, w: t + x * w),
    "unpack": ([NHWC, "global"], lambda u: u * 3.0 - 1.0),
    "untex": ([TEX, "global"], lambda t: t - 0.5),
}


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    mod = IRModule({name: _kernel(name, scopes, fn) for name, (scopes, fn) in KERNELS.items()})
    lib = tvm.build(mod, target=tvm.target.Target("opencl -device=adreno", host="llvm"))
    src = lib.imported_modules[0].get_source()
    assert "__read_only image2d_t" in src and "__write_only image2d_t" in src
    path = str(tmp_path_factory.mktemp("tex-lib") / "mod.so")
    lib.export_library(path)
    return path


def graph(second_pack="pack", second_scope=TEX, scopes=None, sids=None):
    """a (buffer), x (texture input), w (texture weight) -> t = pack(a); u = mix(t, x, w) (an NHWC
    texture, also an output); b = unpack(u); t2 = second_pack(b) in t's storage; c = read back."""
    reader = "untex" if second_pack == "pack" else "unpack"
    names = ["a", "x", "w", "pack0", "mix0", "unpack0", "pack1", "read1"]
    nodes = [{"op": "null", "name": n, "inputs": []} for n in names[:3]]
    calls = [("pack", [0]), ("mix", [3, 1, 2]), ("unpack", [4]), (second_pack, [5]), (reader, [6])]
    for name, (func, ins) in zip(names[3:], calls):
        nodes.append({"op": "tvm_op", "name": name, "inputs": [[i, 0, 0] for i in ins],
                      "attrs": {"func_name": func, "flatten_data": "0", "num_inputs": str(len(ins)),
                                "num_outputs": "1"}})
    scopes = scopes or ["global", TEX, WEIGHT, TEX, NHWC, "global", second_scope, "global"]
    return {"nodes": nodes, "arg_nodes": [0, 1, 2], "heads": [[5, 0, 0], [4, 0, 0], [7, 0, 0]],
            "node_row_ptr": list(range(9)),
            "attrs": {"shape": ["list_shape", [list(SHAPE)] * 8], "dltype": ["list_str", ["float32"] * 8],
                      "storage_id": ["list_int", sids or [0, 1, 2, 3, 4, 5, 3, 6]],
                      "storage_scope": ["list_str", scopes]}}


def package(path, library, g, params):
    with tarfile.open(path, "w") as tar:
        tar.add(library, arcname="mod.so")
        for name, data in (("mod.json", json.dumps(g).encode()), ("mod.params", save_param_dict(params))):
            p = os.path.join(os.path.dirname(path), name)
            with open(p, "wb") as f:
                f.write(data)
            tar.add(p, arcname=name)
    return str(path)


def data():
    rng = np.random.default_rng(7)
    return {k: rng.standard_normal(SHAPE).astype("float32") for k in ("a", "x", "w")}


def expected(d, second_pack="pack"):
    u = d["a"] * 2 + d["x"] * d["w"]
    b = u * 3 - 1
    c = b * 2 - 0.5 if second_pack == "pack" else (b * 2) * 3 - 1
    return [b, u, c]


def run_c(build, pkg, d, tmp_path):
    np.savez(tmp_path / "in.npz", a=d["a"], x=d["x"])
    kiln_run(build, "--package", pkg, "--device", "cl", "--input", tmp_path / "in.npz", "--output",
             tmp_path / "out.npz", "--repeat", "2")
    got = np.load(tmp_path / "out.npz")
    return [got[f"output_{i}"] for i in range(3)]


def test_texture_entries_match_numpy_and_the_python_executor(build, library, tmp_path):
    d = data()
    g = graph()
    pkg = package(tmp_path / "tex.tar", library, g, {"w": d["w"]})
    got = run_c(build, pkg, d, tmp_path)
    meta = kiln_run(build, "--package", pkg, "--device", "cl", "--dump-meta").stdout.splitlines()
    assert meta[:6] == ["inputs:", "  a: float32[1, 2, 3, 5, 4]", "  x: float32[1, 2, 3, 5, 4] in global.texture",
                        "outputs:", "  output_0: float32[1, 2, 3, 5, 4]",
                        "  output_1: float32[1, 2, 3, 5, 4] in global.texture-nhwc"], meta
    for out, want in zip(got, expected(d)):
        assert out.shape == SHAPE and out.dtype == np.float32
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    # The Python runtime over the same files, the graph's calls made by hand on image arrays
    # (tvm.nd.empty(mem_scope=...)): the same kernels, so the same bits.
    lib, dev = tvm.runtime.load_module(library), tvm.cl(0)
    arrays = [tvm.nd.array(d["a"], dev)]
    for name, scope in zip(("x", "w"), (TEX, WEIGHT)):
        arrays.append(tvm.nd.empty(SHAPE, "float32", dev, mem_scope=scope))
        arrays[-1].copyfrom(d[name])
    for node in g["nodes"][3:]:
        scope = g["attrs"]["storage_scope"][1][len(arrays)]
        arrays.append(tvm.nd.empty(SHAPE, "float32", dev, mem_scope=scope))
        lib[node["attrs"]["func_name"]](*[arrays[i] for i, _, _ in node["inputs"]], arrays[-1])
    for out, (nid, _, _) in zip(got, g["heads"]):
        np.testing.assert_array_equal(out, arrays[nid].numpy())
    # and the Python graph executor
    m = graph_executor.create(json.dumps(g), lib, dev)
    m.load_params(save_param_dict({"w": d["w"]}))
    m.set_input("a", d["a"])
    m.set_input("x", d["x"])
    m.run()
    for i, out in enumerate(got):
        np.testing.assert_array_equal(out, m.get_output(i).numpy())


def test_images_are_shared_only_within_one_scope_and_size(build, library, tmp_path):
    # t2 is NHWC-folded but given t's storage_id: it needs an image of its own (15 x 2, not 5 x 6).
    d = data()
    g = graph(second_pack="pack_nhwc", second_scope=NHWC)
    got = run_c(build, package(tmp_path / "tex.tar", library, g, {"w": d["w"]}), d, tmp_path)
    for out, want in zip(got, expected(d, "pack_nhwc")):
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_texture_entry_given_as_a_buffer_fails_at_launch(build, library, tmp_path):
    # Without storage_scope every entry is a buffer; the image2d_t parameters then refuse them.
    d = data()
    g = graph()
    del g["attrs"]["storage_scope"]
    np.savez(tmp_path / "in.npz", a=d["a"], x=d["x"])
    r = kiln_run(build, "--package", package(tmp_path / "buf.tar", library, g, {"w": d["w"]}), "--device", "cl",
                 "--input", tmp_path / "in.npz", "--output", tmp_path / "out.npz", check=False)
    assert r.returncode != 0 and not (tmp_path / "out.npz").exists()
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "graph node 3 (pack) failed: pack: pack_kernel0: argument 1 (out) is a buffer, but the kernel takes " \
           "an image of 5 x 6 texels" in r.stderr, r.stderr


def test_images_folded_for_the_targets_texture_spatial_limit(build, tmp_path):
    # Compiled for images of at most 32 texels a side, (1, 8, 8, 2, 4) is 16 x 8 texels (w x h), not
    # the preferred 2 x 64 that the device would take: the executor folds as the compiler did.
    shape = (1, 8, 8, 2, 4)
    kernels = {"pack": _kernel("pack", ["global", TEX], lambda a: a * 2.0, shape),
               "untex": _kernel("untex", [TEX, "global"], lambda t: t - 0.5, shape)}
    lib = tvm.build(IRModule(kernels), target=tvm.target.Target("opencl -device=adreno -texture_spatial_limit=32",
                                                                host="llvm"))
    assert "__write_only image2d_t" in lib.imported_modules[0].get_source()
    lib.export_library(str(tmp_path / "mod.so"))
    nodes = [{"op": "null", "name": "a", "inputs": []}]
    for nid, func in ((1, "pack"), (2, "untex")):
        nodes.append({"op": "tvm_op", "name": f"{func}0", "inputs": [[nid - 1, 0, 0]],
                      "attrs": {"func_name": func, "num_inputs": "1", "num_outputs": "1"}})
    g = {"nodes": nodes, "arg_nodes": [0], "heads": [[1, 0, 0], [2, 0, 0]], "node_row_ptr": [0, 1, 2, 3],
         "attrs": {"shape": ["list_shape", [list(shape)] * 3], "dltype": ["list_str", ["float32"] * 3],
                   "storage_id": ["list_int", [0, 1, 2]], "storage_scope": ["list_str", ["global", TEX, "global"]]}}
    a = np.random.default_rng(3).standard_normal(shape).astype("float32")
    np.savez(tmp_path / "in.npz", a=a)
    kiln_run(build, "--package", package(tmp_path / "p.tar", str(tmp_path / "mod.so"), g, {}), "--device", "cl",
             "--input", tmp_path / "in.npz", "--output", tmp_path / "out.npz")
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(got["output_0"], a * 2, rtol=1e-6)   # the texture itself, read back
    np.testing.assert_allclose(got["output_1"], a * 2 - 0.5, rtol=1e-6, atol=1e-6)


def test_image_of_another_fold_than_the_kernels_is_refused(build, library, tmp_path):
    # pack writes an NCHW4c texture (5 x 6 texels); the graph says NHWC4c for its output (15 x 2).
    g = graph()
    g["attrs"]["storage_scope"][1][3] = NHWC
    r = kiln_run(build, "--package", package(tmp_path / "p.tar", library, g, {"w": data()["w"]}), "--device", "cl",
                 check=False)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "graph node 3 (pack) failed: pack: pack_kernel0: argument 1 (out) is an image of 15 x 2 texels, but the " \
           "kernel was compiled for 5 x 6" in r.stderr, r.stderr


@pytest.mark.parametrize("scopes, message", [
    (["global"] * 7, r"attrs.storage_scope has 7 items for 8 entries; it needs one scope per entry"),
    (["global", TEX, WEIGHT, "global.shared", NHWC, "global", TEX, "global"],
     r"entry 3 \(output 0 of node 'pack0'\) has storage scope 'global.shared'; the C runtime knows global, "
     r"global.texture"),
    (["global", TEX, WEIGHT, TEX, NHWC, "global", TEX, 7], r"entry 7 .* has storage scope '\(not a string\)'"),
])
def test_malformed_storage_scope_gets_one_line(build, library, tmp_path, scopes, message):
    import re

    g = graph()
    g["attrs"]["storage_scope"] = ["list_str", scopes]
    r = kiln_run(build, "--package", package(tmp_path / "bad.tar", library, g, {"w": data()["w"]}),
                 "--device", "cl", check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert re.search(message, r.stderr), r.stderr


def test_texture_scope_on_a_tensor_that_is_not_nchw4c(build, library, tmp_path):
    g = graph()
    g["attrs"]["shape"][1][0] = [1, 2, 3, 20]  # 'a' in a texture scope, but 4-D
    g["attrs"]["storage_scope"][1][0] = TEX
    r = kiln_run(build, "--package", package(tmp_path / "bad.tar", library, g, {"w": data()["w"]}),
                 "--device", "cl", check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "entry 0 (output 0 of node 'a'): scope global.texture holds float32/float16 5-D tensors whose " \
           "innermost dimension is 4" in r.stderr and "float32[1, 2, 3, 20]" in r.stderr, r.stderr


def test_image_too_large_for_the_device_names_the_entry(build, library, tmp_path):
    max_w, max_h = opencl_api().attribute(0, "max_image2d")
    big = max(max_w, max_h) + 4  # no fold of (1, 1, big, big, 4) fits: never allocated
    g = graph()
    g["nodes"].append({"op": "null", "name": "huge", "inputs": []})
    g["arg_nodes"].append(8)
    g["node_row_ptr"].append(9)
    g["attrs"]["shape"][1].append([1, 1, big, big, 4])
    g["attrs"]["dltype"][1].append("float32")
    g["attrs"]["storage_id"][1].append(7)
    g["attrs"]["storage_scope"][1].append(TEX)
    r = kiln_run(build, "--package", package(tmp_path / "big.tar", library, g, {"w": data()["w"]}),
                 "--device", "cl", check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (f"entry 8 (output 0 of node 'huge'), global.texture: a texture of {big} x {big} texels does not fit "
            f"opencl(0)'s images (at most {max_w} x {max_h})") in r.stderr, r.stderr


def run_driver(build, tmp_path, *flags, env=None):
    """tests/runtime/c_texture_driver.c against the build's static runtime."""
    exe = str(tmp_path / "c_texture_driver")
    cc = subprocess.run(["cc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", *flags, "-I", RUNTIME_SRC,
                         os.path.join(HERE, "c_texture_driver.c"), os.path.join(build, "libkiln_runtime.a"),
                         "-ldl", "-lm", "-lpthread", "-o", exe], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    run = subprocess.run([exe], capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout.splitlines()[-1] == "ok", run.stdout + run.stderr
    return run.stdout


def test_texture_arrays_through_the_c_api(build, tmp_path):
    out = run_driver(build, tmp_path)
    assert "error: unknown memory scope 'local.texture': use global, global.texture" in out


def test_texture_graphs_and_damaged_scopes_under_asan(tmp_path_factory, library, tmp_path):
    """The texture package runs, storage_scope damaged in every way fails with one line, and the C
    API driver passes, under AddressSanitizer and UBSan (PoCL's own allocations are not checked
    for leaks)."""
    if subprocess.run(["cc", "-fsanitize=address", "-x", "c", "-", "-o", os.devnull], input="int main(){}",
                      capture_output=True, text=True).returncode:
        pytest.skip("the C compiler has no AddressSanitizer")
    sanitize = "-fsanitize=address,undefined"
    build = make_runtime(str(tmp_path_factory.mktemp("c-graph-tex-asan")), f"CFLAGS=-O1 -g {sanitize} "
                         "-fno-sanitize-recover=all", f"LDFLAGS={sanitize}", "STRIP=true")
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}
    run_driver(build, tmp_path, "-g", sanitize, "-fno-sanitize-recover=all", env=env)
    d = data()
    np.savez(tmp_path / "in.npz", a=d["a"], x=d["x"])
    damaged = [None, "global.texture", 7, [], ["list_str"], ["list_str", "global"], ["list_str", [[TEX]] * 8],
               ["list_str", [TEX] * 8], ["list_str", [TEX] * 9], ["list_str", [""] * 8],
               ["list_str", ["global.texture-weight"] * 8]]
    for i, scope in enumerate(damaged):
        g = graph()
        if scope is not None:
            g["attrs"]["storage_scope"] = scope
        pkg = package(tmp_path / f"p{i}.tar", library, g, {"w": d["w"]})
        r = subprocess.run([os.path.join(build, "kiln_run"), "--package", pkg, "--device", "cl", "--input",
                            str(tmp_path / "in.npz"), "--output", str(tmp_path / f"out{i}.npz")],
                           capture_output=True, text=True, env=env)
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
        if scope is None:  # the intact graph
            assert r.returncode == 0, r.stderr
            got = np.load(tmp_path / f"out{i}.npz")
            for k, want in enumerate(expected(d)):
                np.testing.assert_allclose(got[f"output_{k}"], want, rtol=1e-6, atol=1e-6)
        else:
            assert r.returncode in (1, 2) and len(r.stderr.strip().splitlines()) == 1, (scope, r.stderr)


@pytest.mark.parametrize("half", [False, True], ids=["float32", "float16"])
def test_adreno_relay_build_matches_the_python_executor(build, tmp_path, half):
    """conv+relu, max pool, conv+relu built for opencl -device=adreno: NCHW4c textures between the
    operators and packed weights as texture parameters, run by kiln_run. float16 (ToMixedPrecision,
    float32 accumulation) makes CL_HALF_FLOAT images."""
    x = relay.var("data", shape=(1, 3, 16, 16), dtype="float32")
    w1 = relay.var("w1", shape=(8, 3, 3, 3), dtype="float32")
    w2 = relay.var("w2", shape=(8, 8, 3, 3), dtype="float32")
    y = relay.nn.max_pool2d(relay.nn.relu(relay.nn.conv2d(x, w1, padding=(1, 1))), pool_size=(2, 2), strides=(2, 2))
    y = relay.nn.relu(relay.nn.conv2d(y, w2, padding=(1, 1)))
    mod = tvm.IRModule.from_expr(relay.Function([x, w1, w2], y))
    cpu_mod = mod
    if half:
        mod = relay.transform.ToMixedPrecision("float16", accumulation_dtype="float32")(relay.transform.InferType()(mod))
    rng = np.random.default_rng(5)
    params = {"w1": rng.standard_normal((8, 3, 3, 3)).astype("float32"),
              "w2": rng.standard_normal((8, 8, 3, 3)).astype("float32")}
    data_in = rng.standard_normal((1, 3, 16, 16)).astype("float32")
    outs = {}
    for key, target in (("adreno", tvm.target.Target("opencl -device=adreno", host="llvm")), ("cpu", "llvm")):
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod if key == "adreno" else cpu_mod, target=target, params=params)
        if key == "adreno":
            attrs = json.loads(lib.get_graph_json())["attrs"]
            textures = {(s, t) for s, t in zip(attrs["storage_scope"][1], attrs["dltype"][1]) if s != "global"}
            assert {("global.texture", "float16" if half else "float32"),
                    ("global.texture-weight", "float16" if half else "float32")} <= textures
            export_package(lib, str(tmp_path / "adreno.tar"))
        m = graph_executor.create(lib.get_graph_json(), lib.get_lib(), tvm.cl(0) if key == "adreno" else tvm.cpu())
        m.set_input(**lib.get_params())
        m.set_input("data", data_in)
        m.run()
        outs[key] = m.get_output(0).numpy()
    np.savez(tmp_path / "in.npz", data=data_in)
    kiln_run(build, "--package", tmp_path / "adreno.tar", "--device", "cl", "--input", tmp_path / "in.npz",
             "--output", tmp_path / "out.npz", "--repeat", "2")
    got = np.load(tmp_path / "out.npz")["output_0"]
    np.testing.assert_array_equal(got, outs["adreno"])       # same kernels as the Python executor
    # and the float32 CPU build (float16: within its rounding, relative to the outputs' range)
    tol = 2e-2 * np.abs(outs["cpu"]).max() if half else 1e-4
    np.testing.assert_allclose(got, outs["cpu"], rtol=1e-4, atol=tol)


def test_texture_graph_behind_kiln_rpc(build, library, tmp_path):
    """graph_executor.create on the C server: inputs from numpy and from a remote buffer array go
    into images, the NHWC texture output comes back as its logical 5-D tensor."""
    import sys

    from kiln import rpc

    sys.path.insert(0, os.path.join(HERE, "..", "crossdev"))
    import boards

    d = data()
    g = graph()
    board = boards.start_board(os.path.join(build, "kiln_rpc"), None)
    remote = rpc.connect("127.0.0.1", board.port)
    try:
        remote.upload(library, "mod.so")
        m = graph_executor.create(json.dumps(g), remote.load_module("mod.so"), remote.cl(0))
        m.load_params(save_param_dict({"w": d["w"]}))
        m.set_input("a", d["a"])
        m.set_input("x", tvm.nd.array(d["x"], remote.cl(0)))  # a buffer on the server -> the image
        m.run()
        for i, want in enumerate(expected(d)):
            np.testing.assert_allclose(m.get_output(i).numpy(), want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(m.get_input("x").numpy(), d["x"])
    finally:
        remote.close()
        board.stop()
