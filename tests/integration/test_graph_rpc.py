"""Compiled models through a real RPC server on 127.0.0.1: upload the exported library, load it
remotely, run the graph executor in the server's worker and time it there (004's flow), for the
three ONNX acceptance models, plus the three-file form and remote errors."""

import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, rpc
from kiln.contrib import graph_executor, graph_runtime, utils

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "rpc"))
sys.path.insert(0, os.path.join(HERE, "..", "relay"))
import rpc_services as svc  # noqa: E402
from built_models import MODELS, built  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def remote():
    server = svc.server()
    session = rpc.connect(svc.HOST, server.port)
    yield session
    session.close()
    server.stop()


# Every model as .so; the .tar path (relinked on the server) is the same for all, ResNet covers it.
@pytest.mark.parametrize("name, ext", [(name, "so") for name in MODELS] + [("resnet18", "tar")])
def test_model_runs_on_the_server(remote, name, ext, tmp_path):
    b = built(name)
    path = str(tmp_path / f"{name}.{ext}")
    b.lib.export_library(path)
    remote.upload(path)
    rlib = remote.load_module(os.path.basename(path))
    dev = remote.cpu(0)
    module = graph_runtime.GraphModule(rlib["default"](dev))
    for key, value in b.inputs.items():
        module.set_input(key, tvm.nd.array(value))  # a local array passed to the remote executor
    module.run()
    assert module.get_num_outputs() == len(b.expected)
    for i, want in enumerate(b.expected):
        np.testing.assert_allclose(module.get_output(i).numpy(), want, **TOL)
    ftimer = module.module.time_evaluator("run", dev, number=1, repeat=3)
    prof = np.array(ftimer().results) * 1000
    assert prof.shape == (3,) and (prof > 0).all()


def test_three_files_through_rpc(remote, tmp_path):
    b = built("bert_block")
    b.lib.get_lib().export_library(str(tmp_path / "mod.so"))
    remote.upload(str(tmp_path / "mod.so"))
    rlib = remote.load_module("mod.so")
    module = graph_executor.create(b.lib.get_graph_json(), rlib, remote.cpu())
    module.load_params(relay.save_param_dict(b.lib.get_params()))
    module.set_input(**b.inputs)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), b.expected[0], **TOL)


def test_remote_errors_come_back(remote, tmp_path):
    b = built("bert_block")
    path = tmp_path / "bert.so"
    b.lib.export_library(str(path))
    remote.upload(str(path))
    module = graph_executor.GraphModule(remote.load_module("bert.so")["default"](remote.cpu()))
    with pytest.raises(Exception, match="has shape"):
        module.set_input("input", np.zeros((1, 2), "float32"))
    with pytest.raises(ValueError, match="not a device of that session"):
        graph_executor.create(b.lib.get_graph_json(), remote.load_module("bert.so"), tvm.cpu())


def test_local_session_runs_the_same_script(tmp_path):
    """rpc.LocalSession (000's local_demo) gives local objects: the same calls work."""
    b = built("bert_block")
    tmp = utils.tempdir()
    b.lib.export_library(tmp.relpath("net.so"))
    remote = rpc.LocalSession()
    remote.upload(tmp.relpath("net.so"))
    module = graph_executor.GraphModule(remote.load_module("net.so")["default"](remote.cpu()))
    module.set_input(**b.inputs)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), b.expected[0], **TOL)
