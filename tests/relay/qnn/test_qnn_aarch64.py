"""The integer graph on an AArch64 board: an onnxruntime-quantized QDQ model compiled by tvmc for
``aarch64-linux-gnu`` with ``+dotprod`` (qnn.Legalize gives s8 x s8 operands there) and run by
kiln_rpc under qemu-aarch64 gives the host build's output."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "..", "crossdev"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "rpc"))
import boards  # noqa: E402
from boards import svc  # noqa: E402

pytestmark = pytest.mark.qemu
KEY = "qnn-aarch64"


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    arch = boards.ARCHES["aarch64"]
    missing = arch.missing()
    if missing:
        pytest.skip(f"aarch64 board {missing}")
    out = boards.build_runtime(str(tmp_path_factory.mktemp("kiln-rpc-aarch64")), arch.cross)
    tracker = svc.tracker()
    b = boards.start_board(os.path.join(out, "kiln_rpc"), arch, tracker.port, KEY)
    yield arch, tracker.port
    b.stop()
    tracker.stop()


def test_qdq_model_on_aarch64_board(board, tmp_path, tmp_path_factory):
    import onnx
    import test_onnx_quantized as T

    from kiln.driver.tvmc.main import main

    arch, port = board
    model, name, shape = T.quantized("residual_cnn", "QDQ", str(tmp_path_factory.getbasetemp()))
    path = tmp_path / "q.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(9).standard_normal(shape).astype("float32")
    want, _ = T.build_run(model, {name: x})  # the host build
    np.savez(tmp_path / "in.npz", **{name: x})
    package = tmp_path / "board.tar"
    assert main(["compile", str(path), "--target", "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod",
                 "--cross-compiler", f"{arch.cross}gcc", "-o", str(package)]) == 0
    tracker = f"127.0.0.1:{port}"
    assert main(["run", "--device=cpu", str(package), "--rpc-key", KEY, "--rpc-tracker", tracker,
                 "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz")]) == 0
    got = np.load(tmp_path / "out.npz")["output_0"]
    # the same integers on both machines; only the final float dequantize may round differently
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
