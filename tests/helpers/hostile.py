"""Run a loader on a hostile input in a forked child with a bounded address space.

``python tests/helpers/hostile.py <loader> <examples> <workdir>`` runs hypothesis over mutations of
the loader's seed files (tests/helpers/hostile_seeds.py) in this lean process (numpy, the
loader's format package and the loader; no llvmlite, no onnxruntime), each case in a forked
child whose ``RLIMIT_AS`` is its address space at the start plus ``BUDGET``. It prints one JSON
line: how many cases ran, and every case that ended in anything other than a return or one
kiln error (another exception, a signal, a timeout, a file left behind), with its peak RSS.

The child lowers ``KILN_LOAD_LIMIT``/``KILN_LOAD_EXPANSION`` (below) so a loader that checks
sizes refuses long before the address-space bound; one that allocates first dies of it.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import tempfile
import time
import traceback

BUDGET = 768 << 20        # address space a case may add to what the process had at fork
LOAD_LIMIT = 256 << 20    # KILN_LOAD_LIMIT inside the cases
LOAD_EXPANSION = 16 << 20
CASE_TIMEOUT_S = 20


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def run_case(load, name: str, data: bytes, workdir: str) -> dict:
    """Write ``data`` as ``name`` in a fresh folder, call ``load(path)`` in a forked child."""
    folder = tempfile.mkdtemp(dir=workdir)
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    tmp = os.path.join(folder, "tmp")
    os.mkdir(tmp)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(r)
        result = {"outcome": "crash"}
        try:
            from kiln import config
            from kiln.errors import KilnError
            base = _status_kb("VmSize") << 10
            resource.setrlimit(resource.RLIMIT_AS, (base + BUDGET, base + BUDGET))
            rss0 = _status_kb("VmRSS") << 10
            tempfile.tempdir = tmp
            os.environ["TMPDIR"] = tmp
            signal.alarm(CASE_TIMEOUT_S)
            try:
                with config.override(load_limit=LOAD_LIMIT, load_expansion=LOAD_EXPANSION, cache_dir="off"):
                    load(path)
                result = {"outcome": "ok"}
            except KilnError as err:
                chained = err.__cause__ if err.__cause__ is not None else (
                    None if err.__suppress_context__ else err.__context__)
                result = {"outcome": "kiln", "type": type(err).__name__, "message": str(err)[:400],
                          "chained": type(chained).__name__ if chained is not None else None}
            except BaseException as err:  # what the test is looking for: anything but a kiln error
                tb = traceback.extract_tb(err.__traceback__)[-3:]
                result = {"outcome": "other", "type": type(err).__name__, "message": str(err)[:300],
                          "where": [f"{os.path.relpath(t.filename)}:{t.lineno}" for t in tb]}
            signal.alarm(0)
            result["peak_rss"] = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0)
        finally:
            os.write(w, json.dumps(result).encode())
            os._exit(0)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    try:
        result = json.loads(b"".join(chunks) or b'{"outcome": "crash"}')
    except ValueError:
        result = {"outcome": "crash"}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        result = {"outcome": "timeout" if sig == signal.SIGALRM else "crash", "signal": sig}
    left = sorted(set(os.listdir(folder)) - {name, "tmp"}) + [f"tmp/{n}" for n in os.listdir(tmp)]
    if left and result["outcome"] != "ok":  # a refused input leaves nothing behind
        result["left_behind"] = left
    for root, dirs, files in os.walk(folder, topdown=False):
        for n in files:
            os.unlink(os.path.join(root, n))
        for n in dirs:
            os.rmdir(os.path.join(root, n))
    os.rmdir(folder)
    return result


def bad(result: dict) -> bool:
    """Anything but a return or one kiln error, with nothing left behind."""
    return result["outcome"] not in ("ok", "kiln") or bool(result.get("left_behind"))


def main(loader: str, examples: int, workdir: str) -> None:
    from hypothesis import HealthCheck, given, settings

    import hostile_seeds
    load, name, strategy, warm = hostile_seeds.LOADERS[loader]()
    if warm is not None:  # the first load imports the op tables: once here, not in every child
        path = os.path.join(workdir, "warm-" + name)
        with open(path, "wb") as f:
            f.write(warm)
        from kiln import config
        with config.override(cache_dir="off"):
            load(path)
        os.unlink(path)
    stats = {"loader": loader, "cases": 0, "outcomes": {}, "failures": [], "peak_rss": 0, "seconds": 0.0}
    start = time.perf_counter()

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def case(data):
        result = run_case(load, name, data, workdir)
        if result["outcome"] == "timeout":  # a real hang repeats; a machine shared with other jobs may just be slow
            stats["retried"] = stats.get("retried", 0) + 1
            result = run_case(load, name, data, workdir)
        stats["cases"] += 1
        stats["outcomes"][result["outcome"]] = stats["outcomes"].get(result["outcome"], 0) + 1
        stats["peak_rss"] = max(stats["peak_rss"], result.get("peak_rss", 0))
        if bad(result) and os.environ.get("KILN_HOSTILE_KEEP"):  # to reproduce: the input itself
            with open(os.path.join(os.environ["KILN_HOSTILE_KEEP"], f"failure-{stats['cases']}-{name}"), "wb") as f:
                f.write(data)
        if bad(result) and len(stats["failures"]) < 400:
            stats["failures"].append({**result, "input_head": data[:64].hex(), "size": len(data)})

    case()
    stats["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(stats))


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # no BLAS thread pool to inherit across fork
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
