"""Bad input to tvmc: one line naming the problem and the fix, exit code 2, no traceback (unless
--verbose), and no partial output file left behind."""

from __future__ import annotations

import os

import numpy as np
import pytest

from test_tvmc_cli import tvmc


def _one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tvmc: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def package(tmp_path_factory, small_onnx):
    path = tmp_path_factory.mktemp("pkg") / "small.tar"
    tvmc("compile", "--target", "llvm", "-o", str(path), small_onnx[0])
    return str(path)


def test_missing_model_file(tmp_path):
    out = tmp_path / "x.tar"
    _one_line_error(tvmc("compile", "--target", "llvm", "-o", str(out), str(tmp_path / "nope.onnx"), check=False),
                    "nope.onnx", "does not exist")
    assert not os.listdir(tmp_path)


def test_unknown_extension_and_unsupported_formats(tmp_path):
    weird = tmp_path / "model.xyz"
    weird.write_bytes(b"\0")
    _one_line_error(tvmc("compile", "--target", "llvm", str(weird), check=False), "--model-format", ".xyz")
    h5 = tmp_path / "resnet50.h5"
    h5.write_bytes(b"\0")
    _one_line_error(tvmc("compile", "--target", "llvm", str(h5), check=False), "is not a readable HDF5 file")
    _one_line_error(tvmc("compile", "--target", "llvm", "--model-format", "tflite", str(weird), check=False),
                    "is not a TFLite flatbuffer")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"this is not protobuf")
    _one_line_error(tvmc("compile", "--target", "llvm", str(garbage), check=False), "not a readable ONNX model")


def test_shape_for_an_input_the_model_lacks(tmp_path, small_onnx):
    _one_line_error(tvmc("compile", "--target", "llvm", "--input-shapes", "image:[1,3,16,16]", "-o",
                         str(tmp_path / "x.tar"), small_onnx[0], check=False), "'image'", "['data']")
    _one_line_error(tvmc("compile", "--target", "llvm", "--input-shapes", "data=1,3", small_onnx[0], check=False),
                    "--input-shapes")
    assert not os.listdir(tmp_path)


def test_target_that_does_not_parse(tmp_path, small_onnx):
    _one_line_error(tvmc("compile", "--target", "llvmm", "-o", str(tmp_path / "x.tar"), small_onnx[0], check=False),
                    "'llvmm'", "known kinds")
    _one_line_error(tvmc("compile", "--target", "llvm -mtriple", small_onnx[0], check=False), "--target")
    _one_line_error(tvmc("compile", "--target", "opencl, clml, llvm", small_onnx[0], check=False),
                    "'clml'", "OpenCLML SDK")  # partitioned for CLML, which needs Qualcomm's SDK
    _one_line_error(tvmc("compile", "--target", "ethos-n, llvm", small_onnx[0], check=False),
                    "'ethos-n'", "not supported yet")
    _one_line_error(tvmc("compile", "--target", "cudnn, llvm", small_onnx[0], check=False),
                    "'cudnn'", "add cuda")  # cuDNN's subgraphs run on the CUDA device
    assert not os.listdir(tmp_path)


def test_tracker_that_does_not_answer(tmp_path, small_onnx, package):
    import rpc_services as svc
    port = svc.free_port()  # nothing listens there
    _one_line_error(tvmc("tune", "--target", "llvm", small_onnx[0], "-o", str(tmp_path / "t.log"), "--rpc-key",
                         "android", "--rpc-tracker", f"127.0.0.1:{port}", check=False),
                    f"127.0.0.1:{port}", "does not answer", "rpc_tracker")
    _one_line_error(tvmc("run", package, "--rpc-key", "android", "--rpc-tracker", f"127.0.0.1:{port}", check=False),
                    "does not answer")
    _one_line_error(tvmc("run", package, "--rpc-key", "android", "--rpc-tracker", "localhost", check=False),
                    "HOST:PORT")
    assert not os.listdir(tmp_path)


def test_key_no_server_has(tmp_path, package, fleet):
    port, _ = fleet
    _one_line_error(tvmc("run", package, "--rpc-key", "iphone", "--rpc-tracker", f"127.0.0.1:{port}", check=False),
                    "'iphone'", "android")


def test_bad_run_inputs(tmp_path, package):
    np.savez(tmp_path / "wrong.npz", image=np.zeros((1, 3, 16, 16), "float32"))
    _one_line_error(tvmc("run", package, "--inputs", str(tmp_path / "wrong.npz"), check=False), "'image'", "data")
    np.savez(tmp_path / "shape.npz", data=np.zeros((1, 3, 8, 8), "float32"))
    _one_line_error(tvmc("run", package, "--inputs", str(tmp_path / "shape.npz"), "--outputs",
                         str(tmp_path / "out.npz"), check=False), "[1, 3, 8, 8]", "[1, 3, 16, 16]")
    assert not (tmp_path / "out.npz").exists()
    _one_line_error(tvmc("run", str(tmp_path / "none.tar"), check=False), "does not exist")
    (tmp_path / "junk.tar").write_bytes(b"junk")
    _one_line_error(tvmc("run", str(tmp_path / "junk.tar"), check=False), "not a tvmc package")


def test_verbose_shows_the_traceback(tmp_path):
    proc = tvmc("-v", "compile", "--target", "llvm", str(tmp_path / "nope.onnx"), check=False)
    assert proc.returncode == 2 and "Traceback" in proc.stderr and "does not exist" in proc.stderr
    proc = tvmc("compile", "--verbose", "--target", "llvm", str(tmp_path / "nope.onnx"), check=False)
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_failed_compile_leaves_no_package(tmp_path, small_onnx):
    out = tmp_path / "x.tar"
    proc = tvmc("compile", "--target", "llvm", "--cross-compiler", "/nonexistent/cc", "-o", str(out),
                small_onnx[0], check=False)
    _one_line_error(proc, "--cross-compiler")
    # a failing link (cc rejects the option) after the build: still nothing written
    proc = tvmc("compile", "--target", "llvm", "--cross-compiler", "cc", "--cross-compiler-options=--no-such-flag",
                "-o", str(out), small_onnx[0], check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert not os.listdir(tmp_path)


def test_pick_in_model_only_where_the_model_runs(tmp_path, small_onnx):
    log = tmp_path / "small.log"
    remote = tvmc("tune", "--target=llvm", small_onnx[0], "-o", str(log), "--pick-in-model", "--rpc-key", "android",
                  "--rpc-tracker", "127.0.0.1:1", check=False)
    _one_line_error(remote, "--pick-in-model", "RPC device 'android'")
    board = tvmc("tune", "--target=llvm -mtriple=aarch64-linux-gnu", small_onnx[0], "-o", str(log),
                 "--pick-in-model", check=False)
    _one_line_error(board, "--pick-in-model", "aarch64")
    assert not log.exists()  # refused before tuning started
