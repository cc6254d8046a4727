"""``tvmc tune``: extract a model's tunable tasks, tune each on a device, log every measurement.

Measured on an RPC fleet when an RPC key is given (``--rpc-key --rpc-tracker HOST:PORT``;
the tracker hands out servers, one candidate per server at a time), else on this machine.
Records of earlier runs (``--tuning-records PRIOR.log``, and the output log itself when it
already exists) count as measured: a resumed run measures only configs it has not seen, and
a task already measured ``trials`` times is skipped. The output log gets the prior records
too, so it alone is what ``tvmc compile --tuning-records`` needs.
"""

from __future__ import annotations

import logging
import os
import sys

from kiln.errors import KilnError

from .common import TVMCException, require_file
from .model import TVMCModel
from .target import target_from_cli
from .transform import apply_graph_transforms

logger = logging.getLogger("kiln.tvmc")

TUNERS = ("xgb", "xgb_knob", "xgb_itervar", "xgb_curve", "xgb_rank", "ga", "random", "gridsearch")


def make_tuner(name: str, task):
    from kiln.autotvm.tuner import GATuner, GridSearchTuner, RandomTuner, XGBTuner

    if name == "ga":
        return GATuner(task, pop_size=50)
    if name == "random":
        return RandomTuner(task)
    if name == "gridsearch":
        return GridSearchTuner(task)
    if name in ("xgb", "xgb_itervar", "xgb_rank"):
        return XGBTuner(task, loss_type="rank", feature_type="itervar")
    if name in ("xgb_knob", "xgb_curve"):
        return XGBTuner(task, loss_type="rank", feature_type=name.split("_")[1])
    raise TVMCException(f"--tuner {name!r}: use one of {', '.join(TUNERS)}")


def _runner(rpc_key, hostname, port, number, repeat, min_repeat_ms, timeout):
    from kiln import autotvm, rpc
    from kiln.errors import RPCError

    if not rpc_key:
        return autotvm.LocalRunner(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, timeout=timeout)
    if not hostname:
        raise TVMCException("--rpc-key needs the tracker's address: --rpc-tracker HOST:PORT")
    try:
        tracker = rpc.connect_tracker(hostname, port)
        keys = tracker.summary()["queue_info"]
        tracker.close()
    except (OSError, RPCError) as err:
        raise TVMCException(f"the RPC tracker at {hostname}:{port} does not answer ({err}); start one "
                            f"(python -m kiln.exec.rpc_tracker --port {port}) or fix --rpc-tracker") from None
    if rpc_key not in keys:
        raise TVMCException(f"the tracker at {hostname}:{port} has no server with key {rpc_key!r} (keys: "
                            f"{', '.join(keys) or 'none'}); start one with --key {rpc_key} or fix --rpc-key")
    return autotvm.RPCRunner(rpc_key, hostname, port, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                             timeout=timeout)


def _prior(paths) -> tuple[list, list]:
    """(records, raw lines) of the existing logs."""
    from kiln.autotvm import record

    pairs, lines = [], []
    for path in paths:
        require_file(path, "tuning records", "pass a log written by tvmc tune, or leave --tuning-records out")
        pairs += list(record.load_from_file(path))
        with open(path) as f:
            lines += [row if row.endswith("\n") else row + "\n" for row in f if row.strip()]
    return pairs, lines


class TuningFailed(TVMCException):
    """Every measured trial failed: the log holds no usable config."""


class _Tally:
    """A tuner callback counting trials and failures, keeping the first failure."""

    def __init__(self):
        self.trials, self.failed, self.first, self.first_message = 0, 0, None, ""

    def __call__(self, tuner, inputs, results):
        from kiln.autotvm.measure import MeasureErrorNo

        for res in results:
            self.trials += 1
            if res.error_no != MeasureErrorNo.NO_ERROR:
                self.failed += 1
                if self.first is None:
                    self.first = MeasureErrorNo(res.error_no).name
                    detail = str(res.costs[0] if res.costs else "") or "no message"
                    detail = detail.split("Traceback (most recent call last)")[0]  # -v shows the rest
                    self.first_message = " ".join(detail.split())[:400]


def tune_model(tvmc_model: TVMCModel, target: str, tuning_records: str | None = None,
               prior_records: str | None = None, rpc_key: str | None = None, hostname: str | None = None,
               port: int = 9190, trials: int = 1000, early_stopping: int | None = None, repeat: int = 3,
               number: int = 10, min_repeat_ms: float = 0, timeout: float = 10, parallel: int = 4,
               tuner: str = "xgb", target_host: str | None = None, desired_layout: str | None = None,
               mixed_precision: bool = False, mixed_precision_ops=None,
               mixed_precision_calculation_type: str = "float16", mixed_precision_acc_type: str = "float32",
               target_options: dict | None = None, progress=None, enable_autoscheduler: bool = False,
               additional_target_options: dict | None = None, pick_in_model: bool = False) -> str:
    """Tune every task of ``tvmc_model``; returns the log path (``tuning_records``, default
    ``<model>.log``). ``hostname``/``port`` are the tracker's when ``rpc_key`` is given.
    ``progress``: a stream for the progress line (default stdout). ``pick_in_model``: then pick
    each task's config inside the whole model, run here (autotvm.in_model), into
    ``<log stem>.picked<ext>``, a log for ``tvmc compile --tuning-records``."""
    from kiln import autotvm

    if enable_autoscheduler:
        raise TVMCException("enable_autoscheduler: kiln tunes with AutoTVM templates only; leave it False")
    target_options = target_options or additional_target_options
    if isinstance(tvmc_model, (str, os.PathLike)):
        from .model import load
        tvmc_model = load(tvmc_model)
    tgt = target_from_cli(target, target_host, target_options)
    if tuner not in TUNERS:
        raise TVMCException(f"--tuner {tuner!r}: use one of {', '.join(TUNERS)}")
    if trials < 1:
        raise TVMCException(f"--trials {trials}: must be >= 1")
    log = os.fspath(tuning_records or (os.path.splitext(tvmc_model.model_path or "model")[0] + ".log"))
    folder = os.path.dirname(os.path.abspath(log))
    if not os.path.isdir(folder):
        raise TVMCException(f"cannot write {log!r}: the folder {folder!r} does not exist; create it first")
    if pick_in_model:
        if rpc_key:
            raise TVMCException("--pick-in-model times the model on this machine; it cannot pick for the "
                                f"RPC device {rpc_key!r}: tune with --rpc-key, then compile with the log as it is")
        from kiln.autotvm.in_model import check_runs_here
        try:
            check_runs_here(tgt)
        except KilnError as err:
            raise TVMCException(f"--pick-in-model: {err}") from None
    runner = _runner(rpc_key, hostname, port, number, repeat, min_repeat_ms, timeout)
    if prior_records and not os.path.exists(prior_records):
        # 002's first run names the records file it will keep: nothing is known yet
        print(f"tvmc: {prior_records} does not exist yet; tuning without prior records", file=progress or sys.stdout)
        prior_records = None
    sources = [p for p in (prior_records, log if os.path.exists(log) else None) if p]
    sources = list(dict.fromkeys(os.path.abspath(p) for p in sources))
    history, lines = _prior(sources)

    mod = apply_graph_transforms(tvmc_model.mod, {
        "mixed_precision": mixed_precision, "mixed_precision_ops": mixed_precision_ops,
        "mixed_precision_calculation_type": mixed_precision_calculation_type,
        "mixed_precision_acc_type": mixed_precision_acc_type, "desired_layout": desired_layout},
        params=tvmc_model.params)
    tasks = autotvm.task.extract_from_program(mod["main"], target=tgt, params=None)
    if not tasks:
        logger.warning("tvmc tune: the model has no tunable ops for %s; the log stays empty", tgt)
    # The output log starts as everything already known (prior records first), then grows.
    if prior_records and os.path.abspath(prior_records) != os.path.abspath(log):
        known = set(open(log).readlines()) if os.path.exists(log) else set()
        with open(log, "a") as f:
            f.writelines(row for row in lines if row not in known)
    elif not os.path.exists(log):
        open(log, "w").close()
    measure = autotvm.measure_option(builder=autotvm.LocalBuilder(timeout=timeout, n_parallel=parallel),
                                     runner=runner)
    stream = progress or sys.stdout
    tally = _Tally()
    for i, task in enumerate(tasks):
        prefix = "[Task %2d/%2d] " % (i + 1, len(tasks))
        # A task already done is skipped before its tuner learns from the whole history.
        seen = {inp.config.index for inp, _ in autotvm.record.of_task(history, task)}
        budget = min(trials, len(task.config_space)) - len(seen)  # what load_history marks visited
        if budget <= 0:
            print(f"{prefix}already measured {len(seen)} configs; skipped", file=stream)
            continue
        tuner_obj = make_tuner(tuner, task)
        tuner_obj.load_history(history)
        tuner_obj.tune(n_trial=budget, early_stopping=early_stopping or None, measure_option=measure,
                       callbacks=[autotvm.callback.progress_bar(budget, prefix=prefix, out=stream),
                                  autotvm.callback.log_to_file(log), tally])
    if tally.trials:
        print(f"tvmc: {tally.trials} trials measured on {len(tasks)} tasks, {tally.failed} failed", file=stream)
    if tally.trials and tally.failed == tally.trials:
        raise TuningFailed(f"all {tally.trials} trials failed, so {log} holds no usable config; the first "
                           f"error ({tally.first}): {tally.first_message}. Check that the device can run "
                           f"{tgt} code (target, --target-host, --rpc-key); -v shows every trial")
    if pick_in_model and tasks:
        from kiln.autotvm.in_model import pick_in_model as pick
        stem, ext = os.path.splitext(log)
        picked = f"{stem}.picked{ext or '.log'}"
        pick(mod, tvmc_model.params, tgt, tasks, log, out=picked)
        print(f"tvmc: configs picked inside the model in {picked} (compile with --tuning-records {picked})",
              file=stream)
    return log
