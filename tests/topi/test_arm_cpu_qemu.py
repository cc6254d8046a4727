"""topi.arm_cpu kernels built for aarch64 / armv7 NEON and run on qemu boards (the C RPC server
kiln_rpc under qemu-user), checked against numpy."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc, te, topi
from kiln.topi import testing

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "crossdev"))
import boards  # noqa: E402
from boards import svc  # noqa: E402

pytestmark = pytest.mark.qemu


@pytest.fixture(scope="module", params=sorted(boards.ARCHES))
def board(request, tmp_path_factory):
    arch = boards.ARCHES[request.param]
    missing = arch.missing()
    if missing:
        pytest.skip(f"{arch.name} board {missing}")
    out = boards.build_runtime(str(tmp_path_factory.mktemp(f"rt-{arch.name}")), arch.cross)
    b = boards.start_board(os.path.join(out, "kiln_rpc"), arch)
    yield b
    b.stop()


def _conv():
    A = te.placeholder((1, 8, 12, 11), name="data")
    W = te.placeholder((16, 8, 3, 3), name="kernel")
    out = topi.nn.relu(topi.arm_cpu.conv2d_nchw(A, W, 1, 1, 1))
    return topi.arm_cpu.schedule_conv2d_nchw([out]), [A, W, out], \
        lambda a, w: np.maximum(testing.conv2d_nchw_python(a, w, 1, 1), 0)


def _depthwise():
    A = te.placeholder((1, 8, 13, 14), name="data")
    W = te.placeholder((8, 1, 3, 3), name="kernel")
    out = topi.arm_cpu.depthwise_conv2d_nchw(A, W, 2, 1, 1)
    return topi.arm_cpu.schedule_depthwise_conv2d_nchw([out]), [A, W, out], \
        lambda a, w: testing.depthwise_conv2d_nchw_python(a, w, 2, 1)


def _conv1x1_one_run():
    # Blocked 1x1 conv whose tasks walk the 7x7 image as one run of pixels (conv2d_NCHWc's flat path).
    A = te.placeholder((1, 8, 7, 7, 4), name="data")
    W = te.placeholder((64, 32, 1, 1), name="kernel")
    out = topi.arm_cpu.conv2d_NCHWc(A, W, 1, 0, 1, "float32", cfg={"oc_bn": 4, "oc_chunks": 2, "tile_ow": 3})
    assert len(out.op.input_tensors[0].shape) == 4  # the flat pixel axis

    def reference(a, w):
        plain = a.transpose(0, 1, 4, 2, 3).reshape(1, 32, 7, 7)
        ref = testing.conv2d_nchw_python(plain, w, 1, 0)
        return ref.reshape(1, 16, 4, 7, 7).transpose(0, 1, 3, 4, 2)
    return topi.arm_cpu.schedule_conv2d_NCHWc([out]), [A, W, out], reference


def _dense():
    A = te.placeholder((20, 24), name="data")
    W = te.placeholder((10, 24), name="weight")
    out = topi.arm_cpu.dense(A, W)
    return topi.arm_cpu.schedule_dense([out]), [A, W, out], lambda a, w: a @ w.T


def _softmax():
    A = te.placeholder((3, 40), name="x")
    out = topi.arm_cpu.softmax(A)
    return topi.arm_cpu.schedule_softmax([out]), [A, out], lambda a: testing.softmax_python(a)


@pytest.mark.parametrize("make", [_conv, _conv1x1_one_run, _depthwise, _dense, _softmax],
                         ids=["conv2d", "conv2d_NCHWc_1x1_one_run", "depthwise", "dense", "softmax"])
def test_arm_cpu_kernel_on_board(board, make, tmp_path):
    rng = np.random.default_rng(0)
    with tvm.target.Target(board.arch.target):
        s, tensors, reference = make()
        mod = tvm.build(s, tensors, target=board.arch.target, name="kernel")
    path = str(tmp_path / "kernel.so")
    mod.export_library(path)
    inputs = [rng.standard_normal([int(d.value) for d in t.shape]).astype("float32") for t in tensors[:-1]]
    out_shape = tuple(int(d.value) for d in tensors[-1].shape)
    with rpc.connect(svc.HOST, board.port) as remote:
        remote.upload(path)
        f = remote.load_module("kernel.so")
        dev = remote.cpu()
        arrays = [tvm.nd.array(x, dev) for x in inputs] + [tvm.nd.empty(out_shape, "float32", dev)]
        f(*arrays)
        np.testing.assert_allclose(arrays[-1].numpy(), reference(*inputs), rtol=1e-4, atol=1e-4)
