"""The PNG of best GFLOPS vs trials: written with matplotlib or the built-in encoder."""

import struct
import time
import zlib

import numpy as np

from kiln import autotvm
from kiln.autotvm import plot, record
from kiln.autotvm.measure import MeasureInput, MeasureResult


def test_builtin_png_is_a_valid_image(tmp_path):
    path = str(tmp_path / "c.png")
    plot._save_builtin({"a": [(1, 1.0), (2, 3.0), (3, 3.0)], "b": [(1, 2.0), (2, 2.5)]}, path)
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    width, height = struct.unpack(">II", data[16:24])
    assert kind == b"IHDR" and (width, height) == (640, 400)
    idat = data.index(b"IDAT")
    size = struct.unpack(">I", data[idat - 4:idat])[0]
    raw = zlib.decompress(data[idat + 4:idat + 4 + size])
    assert len(raw) == height * (1 + 3 * width)


def test_plot_from_a_log(tmp_path):
    task = autotvm.task.create("test/toy", (16,), "llvm")
    log = str(tmp_path / "toy.log")
    record.save_to_file(log, [(MeasureInput(task.target, task, task.config_space.get(i)),
                               MeasureResult((1e-6 * (10 - i),), 0, 0.0, time.time())) for i in range(8)])
    curves = plot.curves_from_log(log)
    (name, pts), = curves.items()
    assert [p[0] for p in pts] == list(range(1, 9))
    assert all(b >= a for (_, a), (_, b) in zip(pts, pts[1:]))  # best-so-far never drops
    plot.main([log, "--out", str(tmp_path / "toy.png")])
    assert (tmp_path / "toy.png").read_bytes()[:4] == b"\x89PNG"


def test_kiln_tune_cli_summarizes_plots_and_picks_best(tmp_path, capsys):
    from kiln.autotvm.measure import MeasureErrorNo
    from kiln.cli import main

    task = autotvm.task.create("test/toy", (16,), "llvm")
    log = str(tmp_path / "toy.log")
    rows = [(MeasureInput(task.target, task, task.config_space.get(i)),
             MeasureResult((1e-6 * (10 - i),), 0, 0.0, time.time())) for i in range(6)]
    rows.append((MeasureInput(task.target, task, task.config_space.get(7)),
                 MeasureResult(("boom",), int(MeasureErrorNo.RUNTIME_DEVICE), 0.0, time.time())))
    record.save_to_file(log, rows)
    png, best = str(tmp_path / "t.png"), str(tmp_path / "best.log")
    assert main(["tune", "--log", log, "--plot", png, "--pick-best", best]) == 0
    out = capsys.readouterr().out
    assert "1 tasks, 7 trials" in out and "RUNTIME_DEVICE 1" in out
    assert "a=" in out  # the best config's knobs are printed
    assert open(png, "rb").read()[:4] == b"\x89PNG"
    (inp, res), = record.load_from_file(best)
    assert inp.config.index == task.config_space.get(5).index


def test_builtin_axes_end_on_round_steps_that_cover_the_data():
    for largest in (0.73, 3.0, 99.9, 504.0, 1234.0):
        step = plot._tick_step(largest)
        mantissa = step / 10 ** np.floor(np.log10(step))
        assert 5 * step >= largest > 5 * step / 2, (largest, step)
        assert round(mantissa, 6) in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8), (largest, step)
    assert plot._tick_step(3, integer=True) == 1  # trials: whole numbers, 0..5
    assert [plot._tick_text(0.15 * k, 0.15) for k in range(3)] == ["0.00", "0.15", "0.30"]
    assert [plot._tick_text(120.0 * k, 120.0) for k in range(3)] == ["0", "120", "240"]


def test_builtin_png_numbers_its_ticks(tmp_path):
    path = str(tmp_path / "t.png")
    plot._save_builtin({"a": [(i, 4.0 * i) for i in range(1, 201)]}, path)
    data = open(path, "rb").read()
    idat = data.index(b"IDAT")
    size = struct.unpack(">I", data[idat - 4:idat])[0]
    raw = np.frombuffer(zlib.decompress(data[idat + 4:idat + 4 + size]), np.uint8)
    img = raw.reshape(400, 1 + 640 * 3)[:, 1:].reshape(400, 640, 3)
    dark = img.sum(axis=2) == 0
    left, bottom = 56, 370
    # y labels left of the axis at 0, 1/5 ... 5/5 of the height; nothing in between
    rows = np.flatnonzero(dark[:bottom + 6, :left - 2].any(axis=1))
    assert rows.min() <= 12 and rows.max() >= bottom - 6
    assert len(rows) == 6 * 10  # six labels, 5 glyph rows x 2 pixels each
    # x labels under the axis: "0" at the axis, "200" at the right end
    cols = np.flatnonzero(dark[bottom + 2:, :].any(axis=0))
    assert cols.min() < left + 6 and cols.max() > 640 - 24
