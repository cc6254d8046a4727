"""The C graph executor behind kiln_rpc (src/runtime/rpc/session_graph.c): graph_executor.create on a
library loaded in a C server session runs the model there, as against the Python server, and
`tvmc run` uses it (outputs, time_evaluator, per-kernel profile)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, rpc
from kiln.contrib import graph_executor
from kiln.driver import tvmc
from kiln.driver.tvmc.compiler import export_package

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "crossdev"))
import boards  # noqa: E402

from test_c_graph import make_runtime, python_outputs, two_output_model  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    build = make_runtime(str(tmp_path_factory.mktemp("c-graph-rpc")))
    board = boards.start_board(os.path.join(build, "kiln_rpc"), None)
    yield board
    board.stop()


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    lib, inputs = two_output_model()
    path = tmp_path_factory.mktemp("pkg") / "two.tar"
    export_package(lib, str(path))
    return tvmc.TVMCPackage(str(path)), inputs


def test_remote_executor_on_the_c_server(server, package, tmp_path):
    pkg, inputs = package
    want = python_outputs(pkg.package_path, inputs, tmp_path)
    remote = rpc.connect("127.0.0.1", server.port)
    try:
        remote.upload(pkg.lib_path, "mod.so")
        lib = remote.load_module("mod.so")
        m = graph_executor.create(pkg.graph, lib, remote.cpu())
        m.load_params(pkg.params)
        assert m.get_num_outputs() == 3 and m.get_num_inputs() == 3
        assert m.get_input_index("y") == 1 and m.get_input_index("nope") == -1
        m.set_input("x", inputs["x"])
        m.set_input(1, tvm.nd.array(inputs["y"], remote.cpu()))  # an array already on the server
        m.run()
        for i, w in enumerate(want):
            np.testing.assert_array_equal(m.get_output(i).numpy(), w)
        np.testing.assert_array_equal(m.get_input("x").numpy(), inputs["x"])
        times = m.module.time_evaluator("run", remote.cpu(), number=2, repeat=3)().results
        assert len(times) == 3 and all(t > 0 for t in times)
        with pytest.raises(Exception, match=r"input 'x' is float32\[1, 4, 8, 8\]; got float32\[4, 8, 8\]"):
            m.set_input("x", inputs["x"][0])
        with pytest.raises(Exception, match="no input 'data'; inputs: x, y, p0"):
            m.set_input("data", inputs["x"])
        with pytest.raises(Exception, match="index out of range"):
            m.get_output(3)
        graph = json.loads(pkg.graph)
        next(n for n in graph["nodes"] if n["op"] == "tvm_op")["attrs"]["func_name"] = "tvmgen_default_nope"
        with pytest.raises(Exception, match="the library has no kernel 'tvmgen_default_nope'"):
            graph_executor.create(json.dumps(graph), lib, remote.cpu())
    finally:
        remote.close()


def test_tvmc_run_against_the_c_server(server, package, tmp_path):
    pkg, inputs = package
    want = python_outputs(pkg.package_path, inputs, tmp_path)
    result = tvmc.run(pkg, device="cpu", hostname="127.0.0.1", port=server.port, inputs=inputs, repeat=2, number=2,
                      profile=True)
    for i, w in enumerate(want):
        np.testing.assert_array_equal(result.outputs[f"output_{i}"], w)
    assert len(result.times) == 2 and all(t > 0 for t in result.times)
    names = {row["name"] for row in result.profile}
    assert "tvmgen_default_fused_nn_conv2d_nn_relu" in names and all(row["ms"] >= 0 for row in result.profile)


@pytest.mark.opencl
def test_remote_executor_on_an_opencl_device_of_the_c_server(server, tmp_path):
    if not tvm.cl(0).exist:
        pytest.skip("no OpenCL device (apt-get install -y pocl-opencl-icd)")
    lib, inputs = two_output_model(target="opencl", target_host="llvm", argmax=False)
    export_package(lib, str(tmp_path / "cl.tar"))
    cpu_lib, _ = two_output_model(argmax=False)
    export_package(cpu_lib, str(tmp_path / "cpu.tar"))
    want = python_outputs(str(tmp_path / "cpu.tar"), inputs, tmp_path)
    result = tvmc.run(str(tmp_path / "cl.tar"), device="cl", hostname="127.0.0.1", port=server.port, inputs=inputs,
                      repeat=2, number=1)
    for i, w in enumerate(want):
        np.testing.assert_allclose(result.outputs[f"output_{i}"], w, rtol=1e-5, atol=1e-5)
    assert len(result.times) == 2


def test_large_parameters_stream_into_the_c_executor(server, tmp_path):
    """Protocol version 2 on kiln_rpc: a parameter of 5 chunks is streamed straight into the
    executor's input (the worker grows by about its size once), set_input of a large array too,
    and error replies carry codes."""
    from kiln.rpc import protocol as P
    from kiln.runtime.params import save_params

    rows, cols = 5 * P.CHUNK // (4 * 512) + 3, 512
    x = relay.var("x", shape=(cols,), dtype="float32")
    w = relay.var("w", shape=(rows, cols), dtype="float32")
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(relay.Function([x, w], relay.add(relay.sum(w, axis=0), x))),
                          target="llvm")
    lib.get_lib().export_library(str(tmp_path / "mod.so"))
    weight = ((np.arange(rows)[:, None] * 7 + np.arange(cols)[None, :] * 3) % 5).astype("float32")
    xs = np.linspace(-1, 1, cols).astype("float32")
    remote = rpc.connect("127.0.0.1", server.port)
    try:
        remote.upload(str(tmp_path / "mod.so"))
        m = graph_executor.create(lib.get_graph_json(), remote.load_module("mod.so"), remote.cpu())
        status = f"/proc/{remote.get_function('rpc.getpid')()}/status"

        def hwm():
            with open(status) as f:
                return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

        before = hwm()
        m.load_params(save_params({"w": weight}))
        grown = hwm() - before
        m.set_input("x", xs)
        m.run()
        np.testing.assert_array_equal(m.get_output(0).numpy(), weight.sum(axis=0) + xs)
        assert grown <= weight.nbytes + 2 * P.CHUNK, (grown, weight.nbytes)
        m.set_input("w", np.ones_like(weight))  # streamed again, over the loaded one
        m.run()
        np.testing.assert_array_equal(m.get_output(0).numpy(), rows + xs)
        with pytest.raises(P.RemoteError, match="input 'w' is float32") as err:
            m.set_input("w", np.ones((rows + 1, cols), "float32"))  # streamed, wrong shape: materialized, refused
        assert err.value.code == P.E_REMOTE
        with pytest.raises(P.RemoteError, match="unknown opcode 99") as err:
            remote._request(99, [])
        assert err.value.code == P.E_UNSUPPORTED
        assert remote.get_function("rpc.echo")(b"z" * (P.INLINE_BUDGET + 5)) == b"z" * (P.INLINE_BUDGET + 5)
    finally:
        remote.close()


def test_c_server_queues_a_second_client(server):
    """As the Python server: closing and connecting again at once is not refused as busy, and a
    client that connects during a session waits for it and is then served."""
    import threading

    for _ in range(10):
        first = rpc.connect("127.0.0.1", server.port)
        assert first.get_function("rpc.echo")(1) == 1
        first.close()
    first = rpc.connect("127.0.0.1", server.port)
    first_pid = first.get_function("rpc.getpid")()
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("s", rpc.connect("127.0.0.1", server.port)))
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive() and not got
    first.close()
    waiter.join(10)
    assert got["s"].get_function("rpc.getpid")() != first_pid
    got["s"].close()
