"""The runtime-only Python package on a "device" that has Python and numpy but no compiler
packages: tools/build_runtime_package.sh's tarball, unpacked, in a venv without llvmlite,
serves the same add_one session as the boards."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc

import boards
import kernels as kernel_defs
from boards import svc


@pytest.fixture(scope="session")
def runtime_venv(tmp_path_factory):
    """(python, PYTHONPATH) of a venv holding only numpy, plus the unpacked runtime package."""
    root = tmp_path_factory.mktemp("runtime-device")
    package = root / "kiln_runtime.tar.gz"
    subprocess.run([os.path.join(boards.ROOT, "tools", "build_runtime_package.sh"), str(package)],
                   check=True, capture_output=True, cwd=str(root))
    with tarfile.open(package) as tar:
        tar.extractall(root, filter="data")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # numpy comes from this interpreter's installation (no network needed); nothing else does.
    import numpy
    site = os.path.dirname(os.path.dirname(numpy.__file__))
    deps = root / "deps"
    deps.mkdir()
    for entry in ["numpy", "numpy.libs", *map(os.path.basename, glob.glob(os.path.join(site, "numpy-*.dist-info")))]:
        if os.path.exists(os.path.join(site, entry)):
            os.symlink(os.path.join(site, entry), deps / entry)
    python = str(venv / "bin" / "python")
    venv_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(venv_site, "device-numpy.pth"), "w") as f:
        f.write(str(deps) + "\n")
    return python, str(root / "kiln_runtime" / "python"), str(root)


def test_package_holds_no_compiler(runtime_venv):
    python, pythonpath, cwd = runtime_venv
    probe = ("import importlib.util as u, numpy, kiln, kiln.runtime, kiln.rpc\n"
             "print(u.find_spec('llvmlite'), u.find_spec('kiln.te'), u.find_spec('kiln.codegen'))")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=cwd,
                         env=dict(os.environ, PYTHONPATH=pythonpath))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "None", "None"]


def test_numpy_only_server_runs_the_add_one_session(runtime_venv, tracker, tmp_path, rng):
    python, pythonpath, cwd = runtime_venv
    key = "numpy-only"
    server = _device_server(python, pythonpath, cwd, tracker.port, key)
    try:
        s, tensors, inputs, reference = kernel_defs.add_one(1024)
        files = boards.module_files(str(tmp_path), "add_one", tvm.build(s, tensors, target="llvm", name="add_one"))
        with rpc.connect_tracker(svc.HOST, tracker.port).request(key, timeout=30) as remote:
            for fmt in ("so", "tar"):
                remote.upload(files[fmt])
                func = remote.load_module(os.path.basename(files[fmt]))
                host = inputs(rng)
                arrays = [tvm.nd.array(x, remote.cpu()) for x in host]
                func(*arrays)
                np.testing.assert_equal(arrays[-1].numpy(), reference(*host))
            res = func.time_evaluator(func.entry_name, remote.cpu(), number=10, repeat=2)(*arrays)
            assert len(res.results) == 2 and res.mean > 0
    finally:
        server.stop()


def _device_server(python, pythonpath, cwd, tracker_port, key):
    """``python -m kiln.exec.rpc_server`` with the device's interpreter, from a directory
    outside the repository (python -m puts the working directory on sys.path)."""
    class DeviceServer(svc.Service):
        def __init__(self):
            import time
            self.log_path = os.path.join(cwd, f"server-{time.monotonic_ns()}.log")
            self.log = open(self.log_path, "w+")
            self.proc = subprocess.Popen(
                [python, "-m", "kiln.exec.rpc_server", "--host", svc.HOST, "--port", str(svc.free_port()),
                 "--tracker", f"{svc.HOST}:{tracker_port}", "--key", key],
                stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd,
                env=dict(os.environ, PYTHONPATH=pythonpath))
            self.port = int(self.wait_log(r"bind to [\d.]+:(\d+)").group(1))
            self.wait_log("registered with the tracker")
    return DeviceServer()
