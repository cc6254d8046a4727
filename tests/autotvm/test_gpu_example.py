"""examples/tune_relay_opencl_rpc.py (document 004 with ``Target("opencl -device=mali",
host="llvm")``) end to end on PoCL: a tracker and two servers as real processes on 127.0.0.1,
ResNet-18's conv2d tasks tuned for two trials each on the servers' OpenCL device, the network
compiled under the log, uploaded, run and timed on ``remote.context("opencl -device=mali")``."""

import os
import socket
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tune_relay_opencl_rpc.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Minutes on a loaded 2-core machine (PoCL compiles every candidate on the servers): heavy, run by
# `make test-heavy`. test_gpu_tuning.py covers LocalRunner and RPCRunner on OpenCL in the default suite.
@pytest.mark.heavy
@pytest.mark.opencl
def test_tune_relay_opencl_example_runs_as_written(tmp_path):
    proc = subprocess.run([sys.executable, EXAMPLE, "--trials", "2", "--image", "32", "--timeout", "60",
                           "--port", str(_free_port())],
                          cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for step in ("Extract tasks...", "[Task 11/11]", "Compile...", "Upload...", "Mean inference time"):
        assert step in out, out[-3000:]
    # every conv task kept a measured record (the declared default is measured first), and the
    # build found them: only the untuned dense warns
    log = (tmp_path / "local-opencl.resnet-18.log").read_text().splitlines()
    assert len(log) == 11, out[-3000:]
    assert all("conv2d_nchw.mali" in line for line in log)
    untuned = [line for line in out.splitlines() if "Cannot find config" in line]
    assert all("dense_nopack.mali" in line for line in untuned), untuned
