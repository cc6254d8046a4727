"""relay.build on small graphs: results against the numpy reference, the graph JSON and its
memory plan, kernel names and the kernel cache, the factory module's forms, the tuning hook."""

import json

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import CompileError, TargetError
from kiln.relay import reference
from kiln.relay.backend import dispatch

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def tiny_net():
    """conv + bias + relu, flatten, dense: the smallest network with every kind of kernel."""
    x = relay.var("data", shape=(1, 3, 16, 16))
    w, b = relay.var("w", shape=(8, 3, 3, 3)), relay.var("b", shape=(8,))
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, padding=(1, 1)), b))
    wd = relay.var("wd", shape=(10, 8 * 16 * 16))
    z = relay.nn.dense(relay.nn.batch_flatten(y), wd)
    mod = tvm.IRModule.from_expr(relay.Function([x, w, b, wd], z))
    params = {"w": rand(8, 3, 3, 3), "b": rand(8), "wd": rand(10, 2048) * 0.05}
    return mod, params


def run_graph(lib, inputs, dev=None):
    m = graph_executor.GraphModule(lib["default"](dev or tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def check(mod, params, inputs, opt_level=3, **kw):
    with tvm.transform.PassContext(opt_level=opt_level):
        lib = relay.build(mod, target="llvm", params=params, **kw)
    got = run_graph(lib, inputs)
    want = reference.run(mod, inputs, params)
    want = list(want) if isinstance(want, tuple) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == np.shape(w), "assert_allclose alone would broadcast (1,) against ()"
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    return lib


@pytest.fixture(scope="module")
def tiny_lib():
    mod, params = tiny_net()
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target="llvm", params=params), mod, params


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_tiny_net_matches_reference_at_every_opt_level(opt_level):
    mod, params = tiny_net()
    check(mod, params, {"data": rand(1, 3, 16, 16)}, opt_level=opt_level)


def test_fused_kernel_names(tiny_lib):
    lib, _, _ = tiny_lib
    names = lib.get_lib().function_names()
    assert "tvmgen_default_fused_nn_conv2d_nn_bias_add_nn_relu" in names
    assert "tvmgen_default_fused_nn_dense" in names
    graph = json.loads(lib.get_graph_json())
    ops = [n for n in graph["nodes"] if n["op"] == "tvm_op"]
    assert all(n["attrs"]["func_name"] in names for n in ops)


def test_graph_json_layout(tiny_lib):
    lib, _, _ = tiny_lib
    graph = json.loads(lib.get_graph_json())
    assert set(graph) == {"nodes", "arg_nodes", "heads", "attrs", "node_row_ptr"}
    nodes, row = graph["nodes"], graph["node_row_ptr"]
    assert len(row) == len(nodes) + 1 and row[0] == 0
    n_entries = row[-1]
    for key, kind in (("shape", "list_shape"), ("dltype", "list_str"), ("storage_id", "list_int")):
        assert graph["attrs"][key][0] == kind and len(graph["attrs"][key][1]) == n_entries
    assert graph["arg_nodes"] == [i for i, n in enumerate(nodes) if n["op"] == "null"]
    assert nodes[graph["arg_nodes"][0]]["name"] == "data"
    (head,) = graph["heads"]
    assert graph["attrs"]["shape"][1][row[head[0]] + head[1]] == [1, 10]
    # the params given to build are graph inputs named p0, p1, ... (conv weight pre-packed)
    params = lib.get_params()
    assert sorted(params) == sorted(n["name"] for n in nodes if n["op"] == "null" and n["name"] != "data")
    assert any(v.numpy().ndim == 5 for v in params.values())


def test_memory_plan_reuses_storage():
    """A chain of 8 elementwise kernels needs two intermediate buffers, not eight."""
    x = relay.var("x", shape=(64,))
    y = x
    for i in range(8):
        y = relay.nn.softmax(y) if i % 2 else relay.exp(y) * relay.const(0.5)
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    lib = check(mod, {}, {"x": rand(64)}, opt_level=3)
    graph = json.loads(lib.get_graph_json())
    sids = graph["attrs"]["storage_id"][1]
    kernels = sum(n["op"] == "tvm_op" for n in graph["nodes"])
    assert kernels == 8
    assert len(set(sids)) <= 4  # input, output, and two buffers that alternate


def test_identical_functions_compile_once():
    x = relay.var("x", shape=(1, 8, 8, 8))
    y = x
    for _ in range(5):
        y = relay.nn.relu(relay.nn.conv2d(y, relay.const(rand(8, 8, 3, 3) * 0.2), padding=(1, 1)))
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    lib = check(mod, {}, {"x": rand(1, 8, 8, 8)})
    graph = json.loads(lib.get_graph_json())
    calls = [n["attrs"]["func_name"] for n in graph["nodes"] if n["op"] == "tvm_op"]
    # AlterOpLayout: x goes to NCHW8c and the result back to NCHW; the five convs between
    # (blocked in and out, Winograd) are one kernel.
    convs = [c for c in calls if "conv2d" in c]
    assert len(calls) == 7 and len(convs) == 5 and len(set(convs)) == 1
    assert all("layout_transform" in c for c in calls if c not in convs)
    assert sorted(lib.get_lib().function_names()) == sorted(set(calls))


def test_unique_names_for_different_functions():
    x = relay.var("x", shape=(4, 4))
    y = relay.nn.softmax(relay.exp(x))
    z = relay.nn.softmax(relay.exp(relay.reshape(y, (2, 8))))
    mod = tvm.IRModule.from_expr(relay.Function([x], z))
    lib = check(mod, {}, {"x": rand(4, 4)})
    names = lib.get_lib().function_names()
    assert len(names) == len(set(names))
    assert "tvmgen_default_fused_nn_softmax" in names and "tvmgen_default_fused_nn_softmax_1" in names


def test_tuple_outputs_split_and_concatenate():
    x = relay.var("x", shape=(2, 6))
    parts = relay.split(x, 3, axis=1)
    y = relay.concatenate([relay.exp(parts[0]), parts[2]], axis=0)
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.Tuple([y, relay.sigmoid(parts[1]), x])))
    check(mod, {}, {"x": rand(2, 6)})


def test_reductions_transforms_and_scalars():
    x = relay.var("x", shape=(3, 4, 5))
    idx = relay.var("idx", shape=(2,), dtype="int64")
    a = relay.mean(x, axis=[1], keepdims=True) + relay.variance(x, axis=[1], keepdims=True)
    b = relay.take(relay.transpose(x, (2, 0, 1)), idx, axis=0)
    c = relay.strided_slice(x, begin=[2, 0], end=[-4, 5], strides=[-1, 2])
    d = relay.cast(relay.argmax(x, axis=[2]), "float32")
    e = relay.clip(relay.nn.pad(x, ((0, 0), (1, 1), (2, 0))), -0.5, 0.5)
    mod = tvm.IRModule.from_expr(relay.Function([x, idx], relay.Tuple([a, b, c, d, e])))
    check(mod, {}, {"x": rand(3, 4, 5), "idx": np.array([4, 1], "int64")})


def test_output_is_an_input_and_a_constant():
    x = relay.var("x", shape=(3,))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.Tuple([x, relay.const(np.arange(3, dtype="float32")),
                                                                  relay.exp(x)])))
    check(mod, {}, {"x": rand(3)})


def test_zero_dim_constant_output_keeps_its_shape():
    x = relay.var("x", shape=(3, 4))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.Tuple([relay.const(np.array(60, "int64")),
                                                                  relay.sum(x)])))
    lib = check(mod, {}, {"x": rand(3, 4)})
    assert lib.get_params()["p0"].shape == ()
    assert [tuple(s) for s in json.loads(lib.get_graph_json())["attrs"]["shape"][1][1:]] == [(), ()]


def test_tuple_form_and_three_files(tiny_lib, tmp_path):
    lib, mod, params = tiny_lib
    graph_json, kernels, graph_params = lib  # the pre-0.8 three-value form
    kernels.export_library(str(tmp_path / "mod.so"))
    (tmp_path / "mod.json").write_text(graph_json)
    (tmp_path / "mod.params").write_bytes(relay.save_param_dict(graph_params))

    loaded = tvm.runtime.load_module(str(tmp_path / "mod.so"))
    m = graph_executor.create((tmp_path / "mod.json").read_text(), loaded, tvm.cpu(0))
    m.load_params((tmp_path / "mod.params").read_bytes())
    x = rand(1, 3, 16, 16)
    m.run(data=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), reference.run(mod, {"data": x}, params), rtol=1e-4, atol=1e-4)
    assert m.get_num_outputs() == 1 and m.get_num_inputs() == 1 + len(graph_params)


@pytest.mark.parametrize("ext", ["so", "tar"])
def test_exported_library_carries_graph_and_params(tiny_lib, tmp_path, ext):
    lib, mod, params = tiny_lib
    path = str(tmp_path / f"deploy.{ext}")
    lib.export_library(path)
    loaded = tvm.runtime.load_module(path)
    assert "default" in loaded.function_names()
    assert loaded["get_graph_json"]() == lib.get_graph_json()
    assert sorted(loaded["get_params"]()) == sorted(lib.get_params())
    x = rand(1, 3, 16, 16)
    (got,) = run_graph(loaded, {"data": x})
    np.testing.assert_allclose(got, reference.run(mod, {"data": x}, params), rtol=1e-4, atol=1e-4)


def test_get_output_into_array_and_get_input(tiny_lib):
    lib, _, _ = tiny_lib
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    x = rand(1, 3, 16, 16)
    m.set_input(0, tvm.nd.array(x))
    np.testing.assert_array_equal(m.get_input("data").numpy(), x)
    m.run()
    out = tvm.nd.empty((1, 10), "float32")
    assert m.get_output(0, out) is out
    np.testing.assert_array_equal(out.numpy(), m.get_output(0).numpy())


def test_set_input_errors_name_the_input(tiny_lib):
    lib, _, _ = tiny_lib
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    with pytest.raises(ValueError, match="input 'data' has shape"):
        m.set_input("data", np.zeros((1, 3, 8, 8), "float32"))
    with pytest.raises(ValueError, match="dtype float32"):
        m.set_input("data", np.zeros((1, 3, 16, 16), "float64"))
    with pytest.raises(KeyError, match="no input 'nope'"):
        m.set_input("nope", np.zeros(3, "float32"))
    m.set_input(nope=np.zeros(3))  # keyword params that are not inputs (folded weights) are skipped


def test_share_params(tiny_lib):
    lib, _, _ = tiny_lib
    a = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    b = graph_executor.create(lib.get_graph_json(), lib.get_lib(), tvm.cpu(0))
    b.share_params(a, relay.save_param_dict(lib.get_params()))
    x = rand(1, 3, 16, 16)
    a.run(data=x)
    b.run(data=x)
    np.testing.assert_array_equal(a.get_output(0).numpy(), b.get_output(0).numpy())


def test_build_config_alias_and_function_input():
    mod, params = tiny_net()
    with relay.build_config(opt_level=2):
        lib = relay.build(mod["main"], target=tvm.target.Target("llvm"), params=params)
    assert json.loads(lib.get_graph_json())["nodes"][0]["name"] == "data"


def test_unsupported_target_and_disabled_fusion():
    mod, params = tiny_net()
    with pytest.raises(TargetError, match="unknown target kind 'vulkan'"):  # every known kind builds
        relay.build(mod, target="vulkan", params=params)
    with pytest.raises(CompileError, match="executor aot"):
        relay.build(mod, target="llvm", params=params, executor="aot")
    with tvm.transform.PassContext(opt_level=3, disabled_pass=["FuseOps"]):
        with pytest.raises(CompileError, match="FuseOps is disabled"):
            relay.build(mod, target="llvm", params=params)


def test_op_without_compute_is_named():
    x = relay.var("x", shape=(1, 4, 4, 4))
    bn = relay.nn.batch_norm(x, *[relay.const(np.ones(4, "float32")) for _ in range(4)])[0]
    mod = tvm.IRModule.from_expr(relay.Function([x], bn))
    with tvm.transform.PassContext(opt_level=3, disabled_pass=["SimplifyInference"]):
        with pytest.raises(CompileError, match="nn.batch_norm"):
            relay.build(mod, target="llvm")


def test_tuning_hook_gets_workload_and_changes_the_kernel(tiny_lib):
    mod, params = tiny_net()
    seen = []

    def provider(op_name, workload, target):
        seen.append((op_name, workload))
        return {"tile_ow": 2} if op_name == "nn.conv2d" else None

    with dispatch.use_config_provider(provider):
        lib = check(mod, params, {"data": rand(1, 3, 16, 16)})
    ops = dict(seen)
    assert ops["nn.conv2d"] == ("conv2d_nchw.x86", ("TENSOR", (1, 3, 16, 16), "float32"),
                                ("TENSOR", (8, 3, 3, 3), "float32"), (1, 1), (1, 1, 1, 1), (1, 1), 1, "float32")  # strides, padding, dilation, groups, out_dtype
    assert ops["nn.dense"][0] == "dense_nopack.x86"
    tuned = lib.get_lib().get_source("ll")
    default = tiny_lib[0].get_lib().get_source("ll")
    assert tuned != default


def test_without_tuning_context_no_config_is_used():
    assert dispatch.select_config("nn.conv2d", ("conv2d_nchw.x86",), tvm.target.Target("llvm")) is None
    assert dispatch.workload_of("nn.relu", {}, [], "x86") is None


@pytest.mark.parametrize("triple", ["aarch64-linux-gnu", "armv7l-linux-gnueabihf"])
def test_arm_target_builds_and_exports(tmp_path, triple):
    """ARM builds pick the arm_cpu schedules; the graph object links with ld.lld next to the kernels."""
    import shutil
    from kiln.runtime.elf import elf_arch

    if shutil.which("ld.lld") is None:
        pytest.skip("needs ld.lld (apt-get install -y lld) to link for another triple")
    mod, params = tiny_net()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=f"llvm -mtriple={triple}", params=params)
    path = tmp_path / "arm.so"
    lib.export_library(str(path))
    assert elf_arch(str(path))[0] == ("aarch64" if triple.startswith("aarch64") else "arm")
    data = path.read_bytes()
    for symbol in (b"__kiln_graph_json", b"__kiln_graph_params", b"__kiln_graph_name", b"__kiln_metadata"):
        assert symbol in data
