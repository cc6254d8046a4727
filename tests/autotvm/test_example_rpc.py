"""examples/tune_relay_rpc.py (document 004's flow) end to end at CI size: a tracker and two
servers as real processes on 127.0.0.1, ResNet-18's conv2d tasks tuned for one trial each on
them, the network compiled under the log, uploaded, run and timed remotely."""

import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("kiln.relay")
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tune_relay_rpc.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tune_relay_rpc_example_runs_as_written(tmp_path):
    proc = subprocess.run([sys.executable, EXAMPLE, "--trials", "1", "--image", "32",
                           "--port", str(_free_port())],
                          cwd=tmp_path, capture_output=True, text=True, timeout=400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for step in ("Extract tasks...", "[Task 11/11]", "Compile...", "Upload...", "Mean inference time"):
        assert step in out, out[-3000:]
    # pick_best kept one record per task, and the build found them (only the untuned dense warns)
    log = (tmp_path / "local-x86.resnet-18.log").read_text().splitlines()
    assert len(log) == 11
    untuned = [line for line in out.splitlines() if "Cannot find config" in line]
    assert all("dense_nopack" in line for line in untuned), untuned  # 004 tunes only the convs
