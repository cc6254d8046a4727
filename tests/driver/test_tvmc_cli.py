"""002's three tvmc commands (tune, compile, run) as a user types them, against a real tracker
with two servers under key 'android' on 127.0.0.1; outputs checked against onnxruntime."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import KEY
from helpers.ranking import allclose_bound, assert_ranking_kept

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def tvmc(*args, cwd=None, check=True):
    """``python -m kiln.driver.tvmc ARGS`` in a subprocess; returns the CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "kiln.driver.tvmc", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)
    if check:
        assert proc.returncode == 0, f"tvmc {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _records(path) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_tune_compile_run_over_the_tracker(tmp_path, small_onnx, fleet):
    model, inputs, want = small_onnx
    port, _ = fleet
    tracker = f"127.0.0.1:{port}"
    log, prior = tmp_path / "small.log", tmp_path / "small-records.log"

    # 1. tune (002's command, with a CPU target and few trials)
    first = tvmc("tune", "--target=llvm", model, "-o", str(prior), "--early-stopping", "0", "--repeat", "2",
                 "--rpc-key", KEY, "--rpc-tracker", tracker, "--trials", "3", "--tuner", "random", "--timeout", "60", "--parallel", "2", cwd=tmp_path)
    assert "[Task  1/" in first.stdout and "Progress: (3/3)" in first.stdout and "Done." in first.stdout
    measured = _records(prior)
    tasks = {json.dumps(r["input"][1:3]) for r in measured}
    assert len(tasks) >= 2 and len(measured) == 3 * len(tasks)
    assert sum(r["result"][1] == 0 for r in measured) >= len(tasks)  # measured for real on the servers

    # 2. resume from the prior records: their configs are not measured again
    second = tvmc("tune", "--target=llvm", model, "-o", str(log), "--early-stopping", "0", "--repeat", "2",
                  "--rpc-key", KEY, "--rpc-tracker", tracker, "--trials", "4", "--tuning-records", str(prior),
                  "--tuner", "xgb", "--timeout", "60", "--parallel", "2", cwd=tmp_path)
    assert "Progress: (1/1)" in second.stdout
    rows = _records(log)
    configs = [(json.dumps(r["input"][1:3]), r["config"]["index"]) for r in rows]
    assert len(rows) == 4 * len(tasks) and len(set(configs)) == len(configs)  # 3 prior + 1 new, no repeats
    # 3. a third run with the same budget measures nothing
    third = tvmc("tune", "--target=llvm", model, "-o", str(log), "--rpc-key", KEY, "--rpc-tracker", tracker,
                 "--trials", "4", "--tuner", "ga", cwd=tmp_path)
    assert "skipped" in third.stdout and len(_records(log)) == len(rows)

    # 4. compile with the records (002's command, CPU target)
    package = tmp_path / "small.tar"
    tvmc("compile", "--target=llvm", "--tuning-records", str(log), "-o", str(package), model, cwd=tmp_path)
    import tarfile
    with tarfile.open(package) as tar:
        assert sorted(tar.getnames()) == ["mod.json", "mod.params", "mod.so"]

    # 5. run on the device through the tracker (002's command) with the test inputs
    np.savez(tmp_path / "in.npz", **inputs)
    out = tvmc("run", "--device=cpu", str(package), "--rpc-key", KEY, "--rpc-tracker", tracker, "--print-time",
               "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz"), "--repeat", "3",
               "--number", "2", "--print-top", "3", cwd=tmp_path)
    assert "Execution time summary:" in out.stdout
    header, values = out.stdout.split("Execution time summary:")[1].strip().splitlines()[:2]
    assert header.split() == ["mean", "(ms)", "median", "(ms)", "max", "(ms)", "min", "(ms)", "std", "(ms)"]
    mean, median, high, low, std = map(float, values.split())
    assert 0 < low <= median <= high and low <= mean <= high and std >= 0
    got = np.load(tmp_path / "out.npz")["output_0"]
    np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-4)
    top = [int(line.split(":")[0]) for line in out.stdout.split("index: value):")[1].strip().splitlines()[:3]]
    assert top == list(np.argsort(got.ravel())[::-1][:3])
    assert_ranking_kept(got.ravel(), want[0].ravel(), allclose_bound(want[0].ravel(), rtol=1e-4, atol=1e-4), top=3)


def test_tune_here_then_pick_inside_the_model(tmp_path, small_onnx):
    model, inputs, want = small_onnx
    log = tmp_path / "small.log"
    out = tvmc("tune", "--target=llvm", model, "-o", str(log), "--trials", "4", "--tuner", "random",
               "--repeat", "2", "--number", "2", "--parallel", "2", "--pick-in-model", cwd=tmp_path)
    picked = tmp_path / "small.picked.log"
    assert f"picked inside the model in {picked}" in out.stdout
    assert "[pick_in_model] whole run" in out.stderr
    measured = {json.dumps(r["input"][1:3]): r for r in _records(log)}
    rows = _records(picked)
    assert sorted(json.dumps(r["input"][1:3]) for r in rows) == sorted(measured)  # one pick per task
    package = tmp_path / "small.tar"
    tvmc("compile", "--target=llvm", "--tuning-records", str(picked), "-o", str(package), model, cwd=tmp_path)
    np.savez(tmp_path / "in.npz", **inputs)
    tvmc("run", str(package), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz"),
         "--repeat", "1", "--number", "1", cwd=tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], want[0], rtol=1e-4, atol=1e-4)


def test_run_on_a_server_by_address_and_locally(tmp_path, small_onnx):
    import rpc_services as svc
    model, inputs, want = small_onnx
    package = tmp_path / "small.tar"
    tvmc("compile", "--target", "llvm", "-o", str(package), model, "--opt-level", "2",
         "--pass-config", "relay.FuseOps.max_depth=4", "--dump-code", "relay,ll,asm,json")
    for fmt in ("relay", "ll", "asm", "json"):
        assert os.path.getsize(f"{package}.{fmt}") > 0
    assert "nn.conv2d" in open(f"{package}.relay").read() and "define" in open(f"{package}.ll").read()
    np.savez(tmp_path / "in.npz", **inputs)
    server = svc.server()
    try:
        out = tvmc("run", str(package), "--hostname", "127.0.0.1", "--port", str(server.port), "--inputs",
                   str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "remote.npz"), "--profile",
                   "--end-to-end", "--print-time", "--repeat", "2", "--number", "1")
    finally:
        server.stop()
    assert "tvmgen_default_fused_nn_conv2d" in out.stdout and "Total" in out.stdout
    np.testing.assert_allclose(np.load(tmp_path / "remote.npz")["output_0"], want[0], rtol=1e-4, atol=1e-4)
    local = tvmc("run", str(package), "--fill-mode", "zeros", "--print-top", "2")
    assert "Top 2 of output_0" in local.stdout


def test_mixed_precision_flags(tmp_path, small_onnx):
    model, inputs, want = small_onnx
    np.savez(tmp_path / "in.npz", **inputs)
    for acc in ("float16", "float32"):
        package = tmp_path / f"fp16-{acc}.tar"
        tvmc("compile", "--target", "llvm", "-o", str(package), "--mixed-precision", "--mixed-precision-ops",
             "nn.conv2d", "nn.dense", "--mixed-precision-calculation-type", "float16",
             "--mixed-precision-acc-type", acc, "--dump-code", "relay", model)
        assert "float16" in open(f"{package}.relay").read()
        tvmc("run", str(package), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "o.npz"))
        got = np.load(tmp_path / "o.npz")["output_0"]
        assert got.dtype == np.float32
        assert np.abs(got - want[0]).max() <= 1e-2 * np.abs(want[0]).max()


def test_mixed_precision_bfloat16(tmp_path, small_onnx):
    """bfloat16 (float32 accumulation): the compiled graph stores bfloat16 and matches float32 within
    bfloat16's precision (8 significant bits: 2^-8 per rounding, a few roundings deep)."""
    model, inputs, want = small_onnx
    np.savez(tmp_path / "in.npz", **inputs)
    package = tmp_path / "bf16.tar"
    tvmc("compile", "--target", "llvm", "-o", str(package), "--mixed-precision",
         "--mixed-precision-calculation-type", "bfloat16", "--dump-code", "relay", model)
    assert "bfloat16" in open(f"{package}.relay").read()
    tvmc("run", str(package), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "o.npz"))
    got = np.load(tmp_path / "o.npz")["output_0"]
    assert got.dtype == np.float32
    err = np.abs(got - want[0]).max() / np.abs(want[0]).max()
    assert 0 < err <= 2.0 ** -5
    bad = tvmc("compile", "--target", "llvm", "-o", str(tmp_path / "x.tar"), "--mixed-precision",
               "--mixed-precision-calculation-type", "bfloat16", "--mixed-precision-acc-type", "float16", model,
               check=False)
    assert bad.returncode != 0 and "--mixed-precision-acc-type 'float16': use float32 with" in bad.stderr


def test_cross_compile_for_aarch64(tmp_path, small_onnx):
    """--target-llvm-mtriple with --cross-compiler (the board's gcc), and without it (ld.lld)."""
    import shutil
    from kiln.runtime.elf import elf_arch, normalize_arch
    model, _, _ = small_onnx
    gcc = shutil.which("aarch64-linux-gnu-gcc")
    if gcc is None:
        pytest.skip("needs aarch64-linux-gnu-gcc (apt-get install -y gcc-aarch64-linux-gnu)")
    for extra in (["--cross-compiler", gcc, "--cross-compiler-options=-O2"], []):
        package = tmp_path / f"a64{len(extra)}.tar"
        tvmc("compile", "--target", "llvm", "--target-llvm-mtriple", "aarch64-linux-gnu", *extra,
             "-o", str(package), model)
        import tarfile
        with tarfile.open(package) as tar:
            tar.extract("mod.so", tmp_path / f"x{len(extra)}", filter="data")
        assert elf_arch(str(tmp_path / f"x{len(extra)}" / "mod.so")) == normalize_arch("aarch64-linux-gnu")
    # running it here says where it belongs
    bad = tvmc("run", str(package), check=False)
    assert bad.returncode == 2 and "--rpc-key" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("target", ["opencl", "opencl -device=adreno", "opencl, llvm",
                                    "opencl -device=adreno, llvm"])
def test_gpu_target_strings_parse(target):
    from kiln.driver.tvmc.target import target_from_cli
    t = target_from_cli(target, options={"llvm": {"mtriple": "aarch64-linux-gnu"}})
    assert t.kind.name == "opencl" and t.host.kind.name == "llvm"
    assert t.host.mtriple == "aarch64-linux-gnu"
    assert ("adreno" in t.keys) == ("adreno" in target)
    t = target_from_cli("opencl, llvm", options={"opencl": {"device": "adreno"}})
    assert "adreno" in t.keys
