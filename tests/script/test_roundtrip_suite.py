"""Every PrimFunc the suite's lowering tests produce survives print -> parse -> structural_equal.

Runs those tests again in a child pytest with KILN_ROUNDTRIP=1 (tests/conftest.py installs
kiln/script/roundtrip.py), so tvm.lower/tvm.build and the GPU host/kernel split check each
function they make; a function that does not come back equal fails its test there.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# CPU (te, tir, codegen, topi, relay) and GPU (OpenCL codegen, topi.gpu) lowering tests.
REPRESENTATIVE = [
    "tests/te", "tests/tir", "tests/codegen/test_llvm_basic.py", "tests/codegen/test_opencl.py",
    "tests/topi/test_tensor_ops.py", "tests/topi/gpu/test_gpu_reduce.py",
    "tests/script/test_write_tir.py", "tests/script/test_blitz_matmul.py",
]
EVERYTHING = ["tests/te", "tests/tir", "tests/codegen", "tests/topi", "tests/relay/test_build_ops.py",
              "tests/relay/test_relay_onnx_ops.py", "tests/script/test_write_tir.py"]


def _run(paths, tmp_path) -> dict:
    report = tmp_path / "roundtrip.json"
    env = dict(os.environ, KILN_ROUNDTRIP="1", KILN_ROUNDTRIP_REPORT=str(report))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    return json.loads(report.read_text())


def test_representative_lowering_tests_round_trip(tmp_path):
    counts = _run(REPRESENTATIVE, tmp_path)
    assert counts["lowered"] >= 100 and counts["before pipeline"] == counts["lowered"]
    if _has_opencl():
        assert counts["gpu kernel"] > 0 and counts["gpu host"] > 0


def _has_opencl() -> bool:
    try:
        from kiln.runtime.devices.opencl import API
    except ImportError:
        return False
    return bool(API.exist(0))


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("KILN_ROUNDTRIP_ALL") != "1",
                    reason="runs every lowering test again (~8 min of both cores); set KILN_ROUNDTRIP_ALL=1")
def test_all_lowering_tests_round_trip(tmp_path):
    counts = _run(EVERYTHING, tmp_path)
    assert counts["lowered"] >= 600
