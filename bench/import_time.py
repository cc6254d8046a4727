"""Time of `import kiln` in a fresh interpreter (median of 7). Goal: < 0.3 s.

    python bench/import_time.py
"""

import statistics
import subprocess
import sys

code = "import time; t = time.perf_counter(); import kiln; print(time.perf_counter() - t)"
base = "import time; t = time.perf_counter(); import json; print(time.perf_counter() - t)"


def run(src: str) -> float:
    return float(subprocess.check_output([sys.executable, "-c", src], text=True))


if __name__ == "__main__":
    times = [run(code) for _ in range(7)]
    print(f"import kiln: {statistics.median(times) * 1e3:.1f} ms median (goal < 300 ms)")
