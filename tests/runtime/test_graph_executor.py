"""The graph executor on its own: hand-written graph JSON over kernels built with te, storage
sharing, parameter blobs, errors that name the node, and no compiler imports on the device."""

import json
import subprocess
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import KilnError
from kiln.runtime import graph_executor, params as param_blob, registry
from kiln.runtime.function import CallList

N = 16


@pytest.fixture(scope="module")
def kernels():
    """add_one(x) -> y and scale(a, w) -> b = a * w, in one module."""
    from kiln import codegen
    from kiln.build_module import lower
    from kiln.ir.module import IRModule
    from kiln.te.lower import lower_to_primfunc

    x = te.placeholder((N,), name="x")
    y = te.compute((N,), lambda i: x[i] + 1.0, name="y")
    a, w = te.placeholder((N,), name="a"), te.placeholder((N,), name="w")
    b = te.compute((N,), lambda i: a[i] * w[i], name="b")
    funcs = {"add_one": lower_to_primfunc(te.create_schedule(y.op), [x, y], "add_one"),
             "scale": lower_to_primfunc(te.create_schedule(b.op), [a, w, b], "scale"),
             "checked": checked_copy()}
    return codegen.build(lower(IRModule(funcs)), "llvm")


def checked_copy():
    """checked(src, dst): dst = src, failing with "negative input" on an element below zero."""
    from kiln.ir import AssertStmt, BufferLoad, BufferStore, For, ForKind, PrimFunc, StringImm, Var, const, decl_buffer
    from kiln.ir.dtype import HANDLE_T, dtype

    src, dst = decl_buffer((N,), "float32", "src"), decl_buffer((N,), "float32", "dst")
    i = Var("i", dtype("int32"))
    value = BufferLoad(src, (i,), src.dtype)
    body = For(i, const(0), const(N), ForKind.SERIAL,
               AssertStmt(value >= const(0.0, "float32"), StringImm("negative input"), BufferStore(dst, value, (i,))))
    handles = (Var("src_handle", HANDLE_T), Var("dst_handle", HANDLE_T))
    return PrimFunc(handles, body, buffer_map=dict(zip(handles, (src, dst))), attrs={"global_symbol": "checked"})


def graph(storage=(0, 1, 2, 3, 1), shape=N, func="scale"):
    """x -> add_one -> t; (t, w) -> scale -> out; then add_one(out) -> out2 (head)."""
    nodes = [{"op": "null", "name": "x", "inputs": []},
             {"op": "tvm_op", "name": "k0", "attrs": {"func_name": "add_one", "num_inputs": "1", "num_outputs": "1",
                                                      "flatten_data": "0"}, "inputs": [[0, 0, 0]]},
             {"op": "null", "name": "w", "inputs": []},
             {"op": "tvm_op", "name": "k1", "attrs": {"func_name": func, "num_inputs": "2", "num_outputs": "1",
                                                      "flatten_data": "0"}, "inputs": [[1, 0, 0], [2, 0, 0]]},
             {"op": "tvm_op", "name": "k2", "attrs": {"func_name": "add_one", "num_inputs": "1", "num_outputs": "1",
                                                      "flatten_data": "0"}, "inputs": [[3, 0, 0]]}]
    return json.dumps({
        "nodes": nodes, "arg_nodes": [0, 2], "heads": [[4, 0, 0], [3, 0, 0]],
        "attrs": {"shape": ["list_shape", [[N], [N], [N], [shape], [N]]],
                  "dltype": ["list_str", ["float32"] * 5], "storage_id": ["list_int", list(storage)]},
        "node_row_ptr": [0, 1, 2, 3, 4, 5]})


def test_runs_the_nodes_in_order(kernels):
    ex = graph_executor.create(graph(), kernels, tvm.cpu(0))
    x, w = np.arange(N, dtype="float32"), np.full(N, 2.0, "float32")
    ex.set_input("x", x)
    ex.set_input(1, tvm.nd.array(w))
    ex.run()
    np.testing.assert_array_equal(ex.get_output(0).numpy(), (x + 1) * w + 1)
    np.testing.assert_array_equal(ex.get_output(1).numpy(), (x + 1) * w)
    assert ex.get_num_outputs() == 2 and ex.get_num_inputs() == 2
    assert ex.get_input_index("w") == 1 and ex.get_input_index("nope") == -1


def test_entries_with_one_storage_id_share_memory(kernels):
    # entries 1 (t) and 4 (out2) share storage 1 in the default plan: t is dead when k2 runs
    ex = graph_executor.create(graph(), kernels, tvm.cpu(0))
    assert ex.entries[1]._address() == ex.entries[4]._address()
    assert ex.entries[0]._address() != ex.entries[1]._address()


def test_module_functions_by_name(kernels):
    ex = graph_executor.create(graph(), kernels, tvm.cpu(0))
    for name in ("set_input", "run", "get_output", "get_num_outputs", "get_num_inputs", "load_params",
                 "share_params", "get_input", "get_input_index"):
        assert callable(ex[name])
    ex["set_input"]("x", np.zeros(N, "float32"))
    ex["set_input"]("w", np.ones(N, "float32"))
    ex["run"]()
    assert ex["get_output"](0).numpy()[0] == 2.0
    res = ex.time_evaluator("run", tvm.cpu(0), number=3, repeat=2)()
    assert len(res.results) == 2 and res.mean > 0


def test_load_params_ignores_unknown_names(kernels):
    ex = graph_executor.create(graph(), kernels, tvm.cpu(0))
    ex.load_params(param_blob.save_params({"w": np.full(N, 3.0, "float32"), "folded_away": np.zeros(2)}))
    np.testing.assert_array_equal(ex.get_input("w").numpy(), np.full(N, 3.0))


def test_registry_creates_executors_for_rpc(kernels):
    create = registry.get_global_func("tvm.graph_executor.create")
    assert isinstance(create(graph(), kernels, tvm.cpu(0)), graph_executor.GraphExecutor)
    assert registry.get_global_func("nope", allow_missing=True) is None


def test_errors_name_the_node(kernels):
    with pytest.raises(KilnError, match="graph node 3: the library has no kernel 'missing'"):
        graph_executor.create(graph(func="missing"), kernels, tvm.cpu(0))
    ex = graph_executor.create(graph(shape=8), kernels, tvm.cpu(0))
    with pytest.raises(KilnError, match=r"graph node 3 \(scale\): the graph and the kernel disagree"):
        ex.run()
    with pytest.raises(KilnError, match="lacks"):
        graph_executor.create('{"nodes": []}', kernels, tvm.cpu(0))
    with pytest.raises(KilnError, match="not valid JSON"):
        graph_executor.create("{", kernels, tvm.cpu(0))
    ex = graph_executor.create(graph(), kernels, tvm.cpu(0))
    with pytest.raises(IndexError, match="2 outputs"):
        ex.get_output(2)


def chain(middle: str) -> str:
    """x -> add_one -> middle -> add_one -> out, three kernels of one library."""
    nodes = [{"op": "null", "name": "x", "inputs": []}]
    for k, func in enumerate(("add_one", middle, "add_one")):
        nodes.append({"op": "tvm_op", "name": f"k{k}", "attrs": {"func_name": func, "num_inputs": "1",
                                                                 "num_outputs": "1", "flatten_data": "0"},
                      "inputs": [[k, 0, 0]]})
    return json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": [[3, 0, 0]],
                       "attrs": {"shape": ["list_shape", [[N]] * 4], "dltype": ["list_str", ["float32"] * 4],
                                 "storage_id": ["list_int", [0, 1, 2, 3]]},
                       "node_row_ptr": [0, 1, 2, 3, 4]})


def test_a_run_of_cpu_kernels_is_one_call_into_the_library(kernels):
    ex = graph_executor.create(chain("add_one"), kernels, tvm.cpu(0))
    steps = ex._run_steps()
    assert len(steps) == 1 and isinstance(steps[0][1], CallList) and len(steps[0][1]) == 3
    x = np.arange(N, dtype="float32")
    ex.set_input("x", x)
    ex.run()
    np.testing.assert_array_equal(ex.get_output(0).numpy(), x + 3)


@pytest.mark.parametrize("one_call", [True, False], ids=["one_call", "call_by_call"])
def test_a_failing_kernel_names_its_node_and_stops_the_run(kernels, one_call, monkeypatch):
    if not one_call:  # a library built before __kiln_run_list: the executor calls each kernel itself
        monkeypatch.setattr(kernels["add_one"].module, "run_list_address", None)
    ex = graph_executor.create(chain("checked"), kernels, tvm.cpu(0))
    assert len(ex._run_steps()) == (1 if one_call else 3)
    ex.set_input("x", np.zeros(N, "float32"))
    ex.run()
    np.testing.assert_array_equal(ex.get_output(0).numpy(), np.full(N, 2.0))
    ex.set_input("x", np.full(N, -5.0, "float32"))  # add_one gives -4: checked fails
    with pytest.raises(KilnError, match=r"graph node 2 \(checked\) failed: checked: .*negative input"):
        ex.run()
    np.testing.assert_array_equal(ex.get_output(0).numpy(), np.full(N, 2.0))  # k2 did not run


def test_executor_imports_no_compiler():
    code = ("import sys, kiln.runtime.graph_executor, kiln.runtime.registry, kiln.contrib.graph_executor;"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('llvmlite', 'onnx') or m.startswith("
            "('kiln.relay', 'kiln.te', 'kiln.tir', 'kiln.codegen', 'kiln.topi'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bfloat16_input_takes_ml_dtypes_arrays_and_says_how_otherwise():
    """A bfloat16 input is held as its 16-bit patterns: an ml_dtypes.bfloat16 array goes in as is,
    a float32 array is refused with a message that says what to pass."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from kiln import relay
    from kiln.contrib.graph_executor import GraphModule

    x = relay.var("x", shape=(4,), dtype="bfloat16")
    lib = relay.build(tvm.IRModule.from_expr(relay.Function([x], relay.cast(x, "float32") * relay.const(2.0))),
                      target="llvm")
    m = GraphModule(lib["default"](tvm.cpu(0)))
    value = np.array([1.5, -3.0, 0.0078125, 65280.0], ml_dtypes.bfloat16)  # exact in bfloat16
    m.set_input("x", value)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), 2 * value.astype("float32"))
    with pytest.raises(ValueError, match=r"input 'x' has dtype uint16, got float32.*view\(np.uint16\)"):
        m.set_input("x", value.astype("float32"))
