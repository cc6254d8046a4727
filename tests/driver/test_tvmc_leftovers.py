"""tvmc leaves nothing in $TMPDIR (issue 29: a ``kiln-tvmc-pkg-*`` folder per compile and run,
98 MB for a ResNet-50), also when a run fails or is interrupted, and a malformed input gives
one ``tvmc: error:`` line with exit code 2, never a traceback."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _tvmc(tmpdir, *args):
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kiln.driver.tvmc", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def _leftovers(tmpdir) -> list:
    return sorted(n for n in os.listdir(tmpdir) if n.startswith("kiln-tvmc"))


@pytest.fixture(scope="module")
def package(tmp_path_factory, small_onnx):
    folder = tmp_path_factory.mktemp("pkg")
    path = folder / "small.tar"
    out = _tvmc(folder, "compile", "--target=llvm", "-o", str(path), small_onnx[0])
    assert out.returncode == 0, out.stderr
    return path


def test_compile_and_run_leave_no_temporary_folders(tmp_path, small_onnx, package):
    model, inputs, want = small_onnx
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    assert _tvmc(tmpdir, "compile", "--target=llvm", "-o", str(tmp_path / "m.tar"), model).returncode == 0
    np.savez(tmp_path / "in.npz", **inputs)
    ok = _tvmc(tmpdir, "run", str(package), "--inputs", str(tmp_path / "in.npz"), "--outputs",
               str(tmp_path / "out.npz"))
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], want[0], rtol=1e-4, atol=1e-4)
    np.savez(tmp_path / "bad.npz", data=np.zeros((1, 3, 5, 5), "float32"))
    bad = _tvmc(tmpdir, "run", str(package), "--inputs", str(tmp_path / "bad.npz"))
    assert bad.returncode == 2 and "has shape [1, 3, 5, 5]" in bad.stderr
    assert _leftovers(tmpdir) == []


def test_an_interrupted_run_leaves_no_temporary_folder(tmp_path, package):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "kiln.driver.tvmc", "run", str(package), "--print-time",
                             "--repeat", "1000000", "--number", "10"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _leftovers(tmpdir) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert _leftovers(tmpdir), "the run never extracted mod.so"
        time.sleep(1.0)  # into the timed runs
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "tvmc: interrupted" in err and "Traceback" not in err
    assert _leftovers(tmpdir) == []


def _package_with(tmp_path, package, **members) -> str:
    """A copy of ``package`` with some members' bytes replaced."""
    out = tmp_path / "edited.tar"
    with tarfile.open(package) as src, tarfile.open(out, "w") as dst:
        for m in src.getmembers():
            data = members.get(m.name.replace(".", "_"), src.extractfile(m).read())
            info = tarfile.TarInfo(m.name)
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    return str(out)


@pytest.mark.parametrize("graph", [b"{}", b'{"attrs": {"shape": ["list_shape", []], "dltype": ["list_str", []]},'
                                          b' "arg_nodes": [3], "nodes": [], "node_row_ptr": []}', b"[1, 2"])
def test_a_malformed_graph_in_the_package_is_one_line(tmp_path, package, graph):
    bad = _package_with(tmp_path, package, mod_json=graph)
    out = _tvmc(tmp_path, "run", bad)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("tvmc: error:") and "edited.tar" in line and "mod.json" in line
    assert _leftovers(tmp_path) == []


def test_an_unexpected_exception_becomes_one_line_at_the_command_line_edge(monkeypatch, capsys):
    from kiln.driver.tvmc import main as cli

    def broken(args):
        raise IndexError("list index out of range")
    monkeypatch.setitem(cli.COMMANDS, "run", broken)
    assert cli.main(["run", "model.tar"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tvmc: error: run model.tar: unexpected IndexError (list index out of range); the input may be "
                   "malformed -- -v shows the traceback (please report it if the input is valid)"]
