"""A PNG of best GFLOPS against trials, one curve per task.

With matplotlib installed it draws a labelled chart. Without it, a small built-in rasterizer
draws the curves on a grid and writes the PNG with zlib (no labels: the tasks are listed on
stdout in curve-colour order); ``pip install matplotlib`` gives the full chart.

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


def _save_builtin(curves: dict, path: str, width: int = 640, height: int = 400) -> None:
    img = np.full((height, width, 3), 255, dtype=np.uint8)
    left, right, top, bottom = 40, width - 10, 10, height - 30
    ymax = max((p[1] for pts in curves.values() for p in pts), default=1.0) * 1.05 or 1.0
    xmax = max((p[0] for pts in curves.values() for p in pts), default=1) or 1
    for k in range(11):  # light grid, then the axes
        y = bottom - (bottom - top) * k // 10
        x = left + (right - left) * k // 10
        img[y, left:right] = (225, 225, 225)
        img[top:bottom, x] = (225, 225, 225)
    img[bottom, left:right] = 0
    img[top:bottom, left] = 0
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
    print(f"wrote {out} ({how}{'' if how == 'matplotlib' else '; pip install matplotlib for labels'})")


if __name__ == "__main__":
    main()
