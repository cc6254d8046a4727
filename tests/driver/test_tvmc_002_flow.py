"""Document 002's tvmc commands as a first-time user meets them (issue 28): a records file
that does not exist yet, tuning where every trial fails, ``tvmc run``'s defaults, progress
lines on stderr (stdout stays what scripts parse) and the formats ``--help`` names."""

from __future__ import annotations

import json

import numpy as np

from test_tvmc_cli import tvmc


def test_tune_takes_a_records_file_that_does_not_exist_yet_as_no_records(tmp_path, small_onnx):
    # 002: --tuning-records keras-resnet50-records.log on a first run
    model, _, _ = small_onnx
    log, prior = tmp_path / "keras-resnet50.log", tmp_path / "keras-resnet50-records.log"
    out = tvmc("tune", "--target=llvm", model, "-o", str(log), "--early-stopping", "0", "--trials", "1",
               "--tuning-records", str(prior), "--tuner", "random", "--parallel", "2", cwd=tmp_path)
    assert out.stdout.count(f"{prior} does not exist yet; tuning without prior records") == 1
    rows = [json.loads(line) for line in open(log)]
    assert rows and all(r["result"][1] == 0 for r in rows)
    assert not prior.exists()  # nothing written under the prior's name


def test_compile_with_missing_records_warns_once_and_builds_untuned(tmp_path, small_onnx):
    model, inputs, want = small_onnx
    missing, package = tmp_path / "keras-resnet50.log", tmp_path / "m.tar"
    out = tvmc("compile", "--target=llvm", "--tuning-records", str(missing), "-o", str(package), model)
    warnings = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and str(missing) in warnings[0] and "untuned" in warnings[0], out.stderr
    np.savez(tmp_path / "in.npz", **inputs)
    tvmc("run", str(package), "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "o.npz"))
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["output_0"], want[0], rtol=1e-4, atol=1e-4)


def test_tune_where_every_trial_fails_says_so_and_exits_non_zero(tmp_path, small_onnx):
    # aarch64 kernels measured on this x86 machine: every run fails, as on issue 28's mismatched fleet
    model, _, _ = small_onnx
    log = tmp_path / "arm.log"
    out = tvmc("tune", "--target", "llvm -mtriple=aarch64-linux-gnu", model, "-o", str(log), "--trials", "2",
               "--tuner", "random", "--parallel", "2", check=False)
    assert out.returncode != 0
    assert "6 trials measured on 3 tasks, 6 failed" in out.stdout
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("tvmc: error:")]
    assert "all 6 trials failed" in line and "the first error (RUNTIME_DEVICE)" in line and "aarch64" in line
    assert "Traceback" not in out.stderr


def _summary_row(stdout: str) -> list:
    lines = stdout.splitlines()
    row = lines[lines.index("Execution time summary:") + 2]
    return [float(v) for v in row.split()]


def test_run_times_one_run_by_default_as_tvms_cli(tmp_path, small_onnx):
    model, _, _ = small_onnx
    package = tmp_path / "m.tar"
    tvmc("compile", "--target=llvm", "-o", str(package), model)
    mean, median, high, low, std = _summary_row(tvmc("run", str(package), "--print-time").stdout)
    assert mean == median == high == low and std == 0  # one sample: a single timed run
    mean, median, high, low, std = _summary_row(
        tvmc("run", str(package), "--print-time", "--repeat", "5", "--number", "2").stdout)
    assert low <= median <= high and (high > low or std == 0)


def test_progress_goes_to_stderr_at_info_level_only(tmp_path, small_onnx):
    model, inputs, _ = small_onnx
    package = tmp_path / "m.tar"
    quiet = tvmc("compile", "--target=llvm", "-o", str(package), model)
    assert quiet.stderr == "" and quiet.stdout == f"tvmc: wrote {package}\n"
    loud = tvmc("-v", "compile", "--target=llvm", "-o", str(package), model)
    assert loud.stdout == quiet.stdout  # what scripts parse is unchanged
    steps = [line for line in loud.stderr.splitlines() if line.startswith("kiln.tvmc: compile: [")]
    assert len(steps) >= 3 and "relay.build" in steps[1] and steps[-1].endswith("done")
    np.savez(tmp_path / "in.npz", **inputs)
    ran = tvmc("-v", "run", str(package), "--inputs", str(tmp_path / "in.npz"), "--print-time")
    assert "Execution time summary:" in ran.stdout
    assert "run: [" in ran.stderr and "running the model once" in ran.stderr and "timing 1 x 1 runs" in ran.stderr


def test_help_names_the_formats_tvmc_reads():
    text = tvmc("compile", "--help").stdout
    assert "once their frontends exist" not in text
    for ext in (".onnx", ".h5", ".tflite", ".pt"):
        assert ext in text
