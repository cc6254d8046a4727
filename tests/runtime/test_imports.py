"""The runtime must run on a device that has only numpy: no compiler, llvmlite or onnx."""

import subprocess
import sys

import pytest

FORBIDDEN = ("llvmlite", "onnx", "onnxruntime", "kiln.ir", "kiln.te", "kiln.tir", "kiln.codegen",
             "kiln.driver", "kiln.relay")


def _loaded_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("code", [
    "import kiln.runtime",
    "import kiln as tvm, numpy as np; tvm.nd.array(np.zeros(3)); tvm.cpu(0)",
    "import kiln.runtime.library, kiln.runtime.compiled, kiln.runtime.evaluator, kiln.contrib.cc, "
    "kiln.contrib.tar, kiln.contrib.utils",
])
def test_runtime_imports_no_compiler(code):
    loaded = _loaded_after(code)
    bad = sorted(m for m in loaded if m.startswith(FORBIDDEN))
    assert not bad, f"{code!r} imported {bad}"


def test_convert_and_const_come_lazily_from_ir():
    loaded = _loaded_after("import kiln.runtime as rt\nassert callable(rt.convert) and callable(rt.const)")
    assert "kiln.ir" in loaded
