"""A PNG of best GFLOPS against trials, one curve per task.

With matplotlib installed (it comes with ``kiln[tune]``) it draws a labelled chart. Without it,
a small built-in rasterizer draws the curves on a grid with numbered ticks (x: trials, y: best
GFLOPS) and writes the PNG with zlib; the tasks are listed on stdout in curve-colour order.

>>> curves = autotvm.plot.curves_from_log("matmul.log")
>>> autotvm.plot.save_png(curves, "matmul.png")
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from . import record
from .measure.measure import MeasureErrorNo

_COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
            (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]


def curves_from_log(filename: str) -> dict[str, list[tuple[int, float]]]:
    """Per task (workload text): [(trial, best GFLOPS so far)], in log order."""
    flops_of: dict[str, float] = {}
    runs: dict[str, list[float]] = {}
    for inp, res in record.load_from_file(filename):
        name = f"{inp.task.name}{inp.task.args}"
        if name not in flops_of:
            flops_of[name] = _task_flop(inp.task)
        ok = res.error_no == MeasureErrorNo.NO_ERROR and flops_of[name]
        runs.setdefault(name, []).append(flops_of[name] / float(np.mean(res.costs)) / 1e9 if ok else 0.0)
    out = {}
    for name, values in runs.items():
        best = np.maximum.accumulate(values)
        out[name] = [(i + 1, float(b)) for i, b in enumerate(best)]
    return out


def _task_flop(task) -> float:
    from .task.task import create
    try:
        return create(task.name, task.args, task.target).flop
    except Exception:  # noqa: BLE001 - template not importable here: GFLOPS unknown
        return 0.0


def describe(how: str) -> str:
    """What to tell the user about the renderer save_png used."""
    return how if how == "matplotlib" else f"{how}; pip install matplotlib for a title and a legend"


def save_png(curves: dict, path: str, title: str = "best GFLOPS vs trials") -> str:
    """Write the chart; returns which renderer drew it ("matplotlib" or "builtin")."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _save_builtin(curves, path)
        return "builtin"
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, pts in curves.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=name[:60])
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOPS")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return "matplotlib"


# Digits for the tick numbers, 3 pixels wide and 5 high: one string of rows per glyph.
_GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010",
}
_SCALE = 2  # each glyph pixel is drawn as a 2x2 block


def _text_width(text: str) -> int:
    return len(text) * 4 * _SCALE - _SCALE


def _draw_text(img: np.ndarray, x: int, y: int, text: str) -> None:
    """Draw digits with their top-left corner at (x, y)."""
    for n, ch in enumerate(text):
        bits = _GLYPHS[ch]
        for i, bit in enumerate(bits):
            if bit == "1":
                px, py = x + (n * 4 + i % 3) * _SCALE, y + (i // 3) * _SCALE
                img[py:py + _SCALE, px:px + _SCALE] = 0


def _tick_step(largest: float, integer: bool = False) -> float:
    """A round step (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) of which five
    reach ``largest``: the axis ends at five steps, each labelled."""
    raw = max(largest, 1e-9) / 5
    power = 10.0 ** np.floor(np.log10(raw))
    step = next(m * power for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * power >= raw * (1 - 1e-9))
    return max(1, int(np.ceil(step))) if integer else round(float(step), 12)


def _tick_text(value: float, step: float) -> str:
    digits = next((d for d in range(6) if abs(step * 10 ** d - round(step * 10 ** d)) < 1e-6), 6)
    return f"{value:.{digits}f}"


def _save_builtin(curves: dict, path: str, width: int = 640, height: int = 400) -> None:
    img = np.full((height, width, 3), 255, dtype=np.uint8)
    left, right, top, bottom = 56, width - 16, 10, height - 30
    ystep = _tick_step(max((p[1] for pts in curves.values() for p in pts), default=1.0) * 1.02)
    xstep = _tick_step(max((p[0] for pts in curves.values() for p in pts), default=1), integer=True)
    ymax, xmax = 5 * ystep, 5 * xstep
    for k in range(11):  # light grid with numbered ticks on every other line, then the axes
        y = bottom - (bottom - top) * k // 10
        x = left + (right - left) * k // 10
        img[y, left:right] = (225, 225, 225)
        img[top:bottom, x] = (225, 225, 225)
        if k % 2 == 0:
            label = _tick_text(ystep * (k // 2), ystep)
            _draw_text(img, left - 6 - _text_width(label), y - 5 * _SCALE // 2, label)
            label = str(xstep * (k // 2))
            _draw_text(img, x - _text_width(label) // 2, bottom + 8, label)
    img[bottom, left:right] = 0
    img[top:bottom, left] = 0
    print("plot: x = trials, y = best GFLOPS so far")
    for n, (name, pts) in enumerate(curves.items()):
        colour = _COLOURS[n % len(_COLOURS)]
        print(f"plot: curve {n} ({colour}) = {name}")
        xy = [(left + (right - left) * x / xmax, bottom - (bottom - top) * y / ymax) for x, y in pts]
        for (x0, y0), (x1, y1) in zip(xy, xy[1:] or xy):
            steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
            for t in np.linspace(0.0, 1.0, steps + 1):
                x, y = int(round(x0 + (x1 - x0) * t)), int(round(y0 + (y1 - y0) * t))
                img[max(y - 1, 0):y + 1, max(x - 1, 0):x + 1] = colour
    _write_png(path, img)


def _write_png(path: str, rgb: np.ndarray) -> None:
    """A minimal PNG (8-bit RGB, no filtering) written with zlib."""
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9))
                + chunk(b"IEND", b""))


def main(argv=None) -> None:
    """``python -m kiln.autotvm.plot tuning.log --out tuning.png``"""
    import argparse
    p = argparse.ArgumentParser(prog="python -m kiln.autotvm.plot",
                                description="Plot best GFLOPS vs trials per task of a tuning log.")
    p.add_argument("log")
    p.add_argument("--out", "--plot", dest="out", default=None, help="PNG path (default: LOG.png)")
    args = p.parse_args(argv)
    out = args.out or args.log + ".png"
    how = save_png(curves_from_log(args.log), out)
    print(f"wrote {out} ({describe(how)})")


if __name__ == "__main__":
    main()
