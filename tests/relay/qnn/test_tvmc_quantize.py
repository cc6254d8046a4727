"""``tvmc compile --quantize calib.npz``: the digits CNN compiled to int8 with calibration inputs
from a .npz keeps its held-out accuracy within 1 point of float32; a bad .npz is one error."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="the digits data come from scikit-learn (pip install scikit-learn)")

from kiln.driver.tvmc.main import main  # noqa: E402
from kiln.driver.tvmc.runner import run_module  # noqa: E402

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "data"))
MODEL = os.path.join(HERE, "data", "digits_cnn.onnx")


def _accuracy(package, x, y):
    out = run_module(package, inputs={"image": x}, benchmark=False).outputs
    return float((np.asarray(out["output_0"]).argmax(1) == y).mean())


def test_tvmc_compile_quantize(tmp_path, capsys):
    from train_digits_cnn import data
    xtr, xte, ytr, yte = data()
    n = len(xte)
    calib = tmp_path / "calib.npz"
    np.savez(calib, image=np.stack([xtr[:n], xtr[n:2 * n]]))  # two stacked batches
    shape = f"image:[{n},1,8,8]"
    assert main(["compile", MODEL, "--target", "llvm", "--input-shapes", shape, "-o", str(tmp_path / "f.tar")]) == 0
    assert main(["compile", MODEL, "--target", "llvm", "--input-shapes", shape, "--quantize", str(calib),
                 "-o", str(tmp_path / "q.tar")]) == 0
    float_acc = _accuracy(str(tmp_path / "f.tar"), xte, yte)
    int8_acc = _accuracy(str(tmp_path / "q.tar"), xte, yte)
    print(f"tvmc digits: float32 {float_acc:.4f}, int8 {int8_acc:.4f}")
    assert float_acc > 0.95 and int8_acc >= float_acc - 0.01


def test_tvmc_quantize_bad_npz(tmp_path, capsys):
    bad = tmp_path / "calib.npz"
    args = ["compile", MODEL, "--target", "llvm", "--quantize", str(bad), "-o", str(tmp_path / "q.tar")]
    np.savez(bad, data=np.zeros((1, 1, 8, 8), "float32"))  # not the model's input name
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calib.npz: arrays ['data']: do not name the model's inputs ['image']" in err[0], err
    np.savez(bad, image=np.zeros((3, 8, 8), "float32"))
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "array 'image': has shape [3, 8, 8]" in err[0], err
    assert not (tmp_path / "q.tar").exists()
