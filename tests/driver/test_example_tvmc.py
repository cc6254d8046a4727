"""examples/tvmc_python_api.py (002's Python API flow and its Relay mixed-precision flow) runs as
written, against its own tracker and servers, and checks itself against onnxruntime."""

import runpy
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tvmc_python_api.py"


def test_tvmc_python_api_example(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--trials", "2"])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "[Task  3/ 3]" in out and "Execution time summary:" in out
    assert "tvmc.run output matches onnxruntime" in out
    assert "tvmc float16 package: max relative error" in out
    assert "relay float16 (accumulate in float16)" in out and "relay float16 (accumulate in float32)" in out


def test_example_is_in_run_all():
    text = (EXAMPLE.parent / "run_all.py").read_text()
    assert '"tvmc_python_api.py"' in text
