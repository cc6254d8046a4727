"""Tuning logs: one JSON object per line, one measurement each.

    {"input": [target, task_name, args, {}],
     "config": {"index": 17, "code_hash": null, "entity": [["tile_y", "sp", [-1, 8]], ...]},
     "result": [[costs...], error_no, all_cost, timestamp], "version": 0.2, "kiln": "0.1.0"}

``load_from_file`` yields (MeasureInput, MeasureResult) pairs; ``pick_best`` keeps the best
valid record of each (target, workload).
"""

from __future__ import annotations

import json
import logging
import os

from kiln.errors import TuningError

from .measure.measure import MeasureErrorNo, MeasureInput, MeasureResult
from .space import ConfigEntity
from .task.task import Task, deserialize_args

logger = logging.getLogger("autotvm")

RECORD_VERSION = 0.2


def encode(inp: MeasureInput, result: MeasureResult, protocol: str = "json") -> str:
    """One log line for a measurement."""
    if protocol != "json":
        raise TuningError(f"record protocol {protocol!r} is not supported; kiln writes 'json'")
    from kiln import __version__
    entry = {
        "input": [str(inp.target), inp.task.name, list(inp.task.args), {}],
        "config": inp.config.to_json_dict(),
        "result": [list(result.costs), int(result.error_no), result.all_cost, result.timestamp],
        "version": RECORD_VERSION,
        "kiln": __version__,
    }
    return json.dumps(entry, default=_json_default)


def _json_default(value):
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, BaseException):
        return repr(value)
    return str(value)


class _RecordedTask(Task):
    """A task rebuilt from a log line: its template need not be registered to read the log."""

    def __init__(self, name, args, target):
        from .task.task import TEMPLATES
        self.name, self.args, self.func = name, args, TEMPLATES.get(name)
        self.config_space, self.flop = None, 0.0
        self.target, self.target_host = target, getattr(target, "host", None)


def decode(row: str, protocol: str = "json"):
    """(MeasureInput, MeasureResult) from one log line; None for a line that is not a record."""
    if protocol != "json":
        raise TuningError(f"record protocol {protocol!r} is not supported; kiln reads 'json'")
    from kiln.target import Target
    try:
        data = json.loads(row)
        target_text, name, args, _ = data["input"]
        costs, error_no, all_cost, timestamp = data["result"]
        target = Target(target_text)
        task = _RecordedTask(name, deserialize_args(args), target)
        config = ConfigEntity.from_json_dict(data["config"])
        error_no = int(error_no)
        if error_no != MeasureErrorNo.NO_ERROR:
            costs = [c if isinstance(c, (int, float)) else str(c) for c in costs]
        return MeasureInput(target, task, config), MeasureResult(tuple(costs), error_no,
                                                                 float(all_cost), float(timestamp))
    except (ValueError, KeyError, TypeError, TuningError) as e:
        logger.warning("skipping a log line that is not a kiln tuning record (%s): %.80s", e, row)
        return None


def load_from_file(filename: str):
    """Yield (MeasureInput, MeasureResult) for every record in ``filename``."""
    if not os.path.exists(filename):
        raise TuningError(f"tuning log {filename} does not exist; tune first (log_to_file) or "
                          "check the path")
    with open(filename) as f:
        for row in f:
            if row.strip() and not row.lstrip().startswith("#"):
                pair = decode(row)
                if pair is not None:
                    yield pair


def of_task(pairs, task):
    """The (input, result) pairs of ``pairs`` measured for ``task``: same workload and target,
    and a config index inside its space (a log may hold records of other tasks, or of a space
    that has since changed)."""
    size = len(task.config_space)
    for inp, res in pairs:
        if inp.task.workload == task.workload and str(inp.target) == str(task.target) \
                and 0 <= inp.config.index < size:
            yield inp, res


def save_to_file(filename: str, pairs) -> None:
    with open(filename, "a") as f:
        for inp, res in pairs:
            f.write(encode(inp, res) + "\n")


def pick_best(in_file: str, out_file: str) -> None:
    """Write to ``out_file`` the best valid record of each (target, workload) of ``in_file``."""
    best: dict[tuple, tuple[float, str]] = {}
    with open(in_file) as f:
        rows = [r for r in f if r.strip()]
    for row in rows:
        pair = decode(row)
        if pair is None:
            continue
        inp, res = pair
        if res.error_no != MeasureErrorNo.NO_ERROR:
            continue
        key = (str(inp.target), inp.task.workload)
        cost = sum(res.costs) / len(res.costs)
        if key not in best or cost < best[key][0]:
            best[key] = (cost, row.rstrip("\n"))
    with open(out_file, "w") as f:
        for _, row in best.values():
            f.write(row + "\n")
    logger.info("pick_best: %d records -> %d best in %s", len(rows), len(best), out_file)
