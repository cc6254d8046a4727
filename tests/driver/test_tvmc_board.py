"""002's three commands for an ARM board: tune, compile with --target-llvm-mtriple aarch64-linux-gnu
and --cross-compiler, run; the board is kiln_rpc (the C server) cross-built for aarch64 under
qemu-aarch64, registered with a tracker under key 'android'. The C server has no graph
executor, so tvmc run walks the graph and calls each kernel on the board (remote_graph.py)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from conftest import KEY
from test_tvmc_cli import tvmc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "crossdev"))
import boards  # noqa: E402
from boards import svc  # noqa: E402

pytestmark = pytest.mark.qemu


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    arch = boards.ARCHES["aarch64"]
    missing = arch.missing()
    if missing:
        pytest.skip(f"aarch64 board {missing}")
    out = boards.build_runtime(str(tmp_path_factory.mktemp("kiln-rpc-aarch64")), arch.cross)
    tracker = svc.tracker()
    board = boards.start_board(os.path.join(out, "kiln_rpc"), arch, tracker.port, KEY)
    yield arch, tracker.port
    board.stop()
    tracker.stop()


def test_tune_compile_run_on_the_aarch64_board(tmp_path, small_onnx, board):
    arch, port = board
    model, inputs, want = small_onnx
    tracker = f"127.0.0.1:{port}"
    log = tmp_path / "board.log"
    tuned = tvmc("tune", "--target=llvm", "--target-llvm-mtriple", "aarch64-linux-gnu", model, "-o", str(log),
                 "--early-stopping", "0", "--repeat", "2", "--number", "2", "--rpc-key", KEY, "--rpc-tracker",
                 tracker, "--trials", "2", "--tuner", "random", "--timeout", "60", "--parallel", "2")
    assert "Done." in tuned.stdout
    rows = [json.loads(line) for line in open(log)]
    assert rows and all(r["input"][0].startswith("llvm") and "aarch64" in r["input"][0] for r in rows)
    assert any(r["result"][1] == 0 for r in rows)  # measured on the board

    package = tmp_path / "board.tar"
    tvmc("compile", "--cross-compiler", f"{arch.cross}gcc", "--target=llvm", "--target-llvm-mtriple",
         "aarch64-linux-gnu", "--tuning-records", str(log), "-o", str(package), model)
    np.savez(tmp_path / "in.npz", **inputs)
    out = tvmc("run", "--device=cpu", str(package), "--rpc-key", KEY, "--rpc-tracker", tracker, "--print-time",
               "--repeat", "2", "--number", "1", "--inputs", str(tmp_path / "in.npz"), "--outputs",
               str(tmp_path / "out.npz"), "--profile")
    assert "Execution time summary:" in out.stdout and "tvmgen_default_fused_nn_conv2d" in out.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], want[0], rtol=1e-4, atol=1e-4)
