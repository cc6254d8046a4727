"""Fixtures shared by the whole test suite.

``c_kernels``: the ABI kernels of tests/helpers/c_kernels.py compiled for the host
(``.objects``, ``.metadata``, ``.triple``, ``.module()`` -> a fresh CompiledModule).
``c_module``: a fresh CompiledModule over them. ``c_kernels_aarch64``: the same objects
cross-compiled with aarch64-linux-gnu-gcc (skips when that compiler is missing).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

# The suite never reads or fills the user's build cache (kiln/cache.py): it gets a fresh one,
# shared by its tests (and the processes they start) and removed at the end.
_CACHE_DIR = tempfile.mkdtemp(prefix="kiln-test-cache-")
os.environ["KILN_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)
_SECRET_DIR = tempfile.mkdtemp(prefix="kiln-test-secret-")  # the cache's HMAC key lives outside its folder
os.environ["KILN_CACHE_SECRET"] = os.path.join(_SECRET_DIR, "cache-secret")
atexit.register(shutil.rmtree, _SECRET_DIR, ignore_errors=True)

sys.path.insert(0, os.path.dirname(__file__))  # makes tests/helpers importable as `helpers`

from helpers import c_kernels as _c_kernels  # noqa: E402


@pytest.fixture(scope="session")
def c_kernels():
    return _c_kernels.build("cc")


@pytest.fixture
def c_module(c_kernels):
    return c_kernels.module()


@pytest.fixture(scope="session")
def c_kernels_aarch64():
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs aarch64-linux-gnu-gcc (apt-get install -y gcc-aarch64-linux-gnu)")
    return _c_kernels.build("aarch64-linux-gnu-gcc")


def pytest_runtest_setup(item):
    """``@pytest.mark.opencl`` / ``gpu`` tests skip, saying why, without an OpenCL device / NVIDIA GPU."""
    if item.get_closest_marker("opencl") is not None:
        reason = _opencl_missing()
        if reason:
            pytest.skip(reason)
    if item.get_closest_marker("gpu") is not None:
        from kiln.runtime.devices.cuda import API
        if not API.exist(0):
            pytest.skip("needs an NVIDIA GPU (cuda driver) and cuda-python (pip install -e '.[cuda]')")


def _opencl_missing() -> str:
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        return "needs pyopencl (pip install -e '.[opencl]')"
    from kiln.runtime.devices.opencl import API
    if not API.exist(0):
        return ("needs an OpenCL device: no OpenCL platform found (apt-get install pocl-opencl-icd "
                "ocl-icd-opencl-dev; check with clinfo)")
    return ""


# KILN_ROUNDTRIP=1: every PrimFunc tvm.lower/tvm.build produce is printed as TVMScript, parsed
# back and compared (kiln/script/roundtrip.py); the counts go to KILN_ROUNDTRIP_REPORT if set.
if os.environ.get("KILN_ROUNDTRIP") == "1":
    from kiln.script import roundtrip as _roundtrip

    _roundtrip.install()

    def pytest_terminal_summary(terminalreporter):
        counts = dict(_roundtrip.counts)
        terminalreporter.write_line(f"TVMScript round trips: {counts}")
        if os.environ.get("KILN_ROUNDTRIP_REPORT"):
            import json

            with open(os.environ["KILN_ROUNDTRIP_REPORT"], "w") as f:
                json.dump(counts, f)
