"""Fixtures for the tvmc tests: small ONNX models on disk, and an RPC fleet (a tracker and two
servers under key ``android``, as in 002) started on 127.0.0.1 for the test session."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "rpc"))
sys.path.insert(0, os.path.join(HERE, "..", "relay"))

import rpc_services as svc  # noqa: E402
from onnx_models import GraphBuilder, resnet18, run_ort  # noqa: E402,F401

KEY = "android"


def small_convnet(image: int = 16, seed: int = 0):
    """conv3x3 -> relu -> conv1x1 (+ residual) -> relu -> global pool -> dense: two conv2d tasks and
    one dense task, seconds to tune (no 3x3 stride-1 conv on many channels, whose Winograd
    candidates take seconds each to build)."""
    g = GraphBuilder(seed)
    x = g.op("Relu", [g.conv("data", 3, 8, 3, bias=True)])
    y = g.conv(x, 8, 8, 1, bias=True)
    x = g.op("Relu", [g.op("Add", [x, y])])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    out = g.dense(x, 8, 10)
    data = np.random.default_rng(seed + 1).standard_normal((1, 3, image, image)).astype("float32")
    return g.model({"data": data.shape}, out), {"data": data}


@pytest.fixture(scope="session")
def small_onnx(tmp_path_factory):
    """(path, inputs, onnxruntime outputs) of small_convnet."""
    import onnx
    model, inputs = small_convnet()
    path = str(tmp_path_factory.mktemp("models") / "small.onnx")
    onnx.save(model, path)
    return path, inputs, run_ort(model, inputs)


@pytest.fixture(scope="session")
def fleet():
    """(tracker port, servers) registered under key 'android'."""
    from kiln import rpc
    tracker = svc.tracker()
    servers = [svc.server("--tracker", f"127.0.0.1:{tracker.port}", "--key", KEY) for _ in range(2)]

    def ready():
        t = rpc.connect_tracker("127.0.0.1", tracker.port)
        try:
            return t.summary()["queue_info"].get(KEY, {}).get("free", 0) >= 2
        finally:
            t.close()
    svc.wait_until(ready, timeout=20, what="two free 'android' servers")
    yield tracker.port, servers
    for s in servers:
        s.stop()
    tracker.stop()
