"""The tuning loop every tuner shares: propose a batch, measure it, learn, report.

Subclasses implement ``next_batch``, ``update`` and ``has_next``. The first batch of a task whose
template declares its untuned config (``cfg.define_default``) starts with that config. ``load_history`` marks the
configs a previous run of the same task already measured as visited (so a resumed run skips
them) and remembers their best.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from .. import console, record
from ..measure.measure import MeasureErrorNo, MeasureInput, create_measure_batch

logger = logging.getLogger("autotvm")


class Tuner:
    """Base class: ``tuner.tune(n_trial, measure_option, early_stopping=None, callbacks=())``."""

    def __init__(self, task, **kwargs):
        if task.config_space is None:
            raise ValueError("the task has no config space; make it with autotvm.task.create")
        self.task = task
        self.space = task.config_space
        self.param = kwargs
        self.visited: set[int] = set()
        self.best_config = None
        self.best_flops = 0.0
        self.best_measure_pair = None
        self.best_iter = 0
        self.ttl = None
        self.n_trial = 0
        self.early_stopping = None
        self.trial_count = 0  # candidates measured in this tuner's tune() calls
        self.history: list[tuple[int, float]] = []  # (trial, GFLOPS of that trial)
        self.started = time.monotonic()
        self.finished = False

    # -- for subclasses ------------------------------------------------------------------------
    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, batch_size: int) -> list:
        raise NotImplementedError

    def update(self, inputs, results) -> None:
        """Learn from measured candidates (the base class only tracks the best)."""

    # -- the loop ------------------------------------------------------------------------------
    def tune(self, n_trial: int, measure_option: dict, early_stopping: int | None = None,
             callbacks=(), si_prefix: str = "G"):
        """Measure up to ``n_trial`` new configs; stop early after ``early_stopping`` trials
        without a new best. Callbacks get ``(tuner, inputs, results)`` after every batch, and
        ``(tuner, [], [])`` once at the end."""
        del si_prefix  # progress is always shown in GFLOPS, as in the tutorials
        console.install()  # so that 004's logging.getLogger('autotvm').setLevel(DEBUG) prints each trial
        batch = create_measure_batch(self.task, measure_option)
        self.n_trial, self.early_stopping = n_trial, early_stopping
        stop_after = early_stopping if early_stopping else float("inf")
        self.started, self.finished = time.monotonic(), False
        i = 0
        default = self._unmeasured_default()
        try:
            while i < n_trial and self.has_next():
                size = min(batch.n_parallel, n_trial - i)
                if default:
                    # The template's untuned config goes first: whatever the search finds after,
                    # the best is then never slower than not tuning (by the same measurement).
                    self.visited.add(default[0].index)
                    configs = default + (self.next_batch(size - 1) if size > 1 else [])
                    default = []
                else:
                    configs = self.next_batch(size)
                if not configs:
                    break
                inputs = [MeasureInput(self.task.target, self.task, c) for c in configs]
                results = batch(inputs)
                self._record(inputs, results, i)
                i += len(results)
                self.ttl = min(stop_after + self.best_iter, n_trial) - i
                self.update(inputs, results)
                for callback in callbacks:
                    callback(self, inputs, results)
                if i >= self.best_iter + stop_after:
                    logger.debug("early stopped at trial %d; best at trial %d", i, self.best_iter)
                    break
        finally:
            batch.close()
            self.finished = True
            for callback in callbacks:
                callback(self, [], [])

    def _unmeasured_default(self) -> list:
        idx = self.space.default_index()
        return [] if idx is None or idx in self.visited else [self.space.get(idx)]

    def _record(self, inputs, results, first: int) -> None:
        for k, (inp, res) in enumerate(zip(inputs, results)):
            self.visited.add(inp.config.index)
            flops = 0.0
            if res.error_no == MeasureErrorNo.NO_ERROR:
                flops = self.task.flop / float(np.mean(res.costs))
            if flops > self.best_flops:
                self.best_flops, self.best_config = flops, inp.config
                self.best_measure_pair, self.best_iter = (inp, res), first + k
            self.trial_count += 1
            self.history.append((self.trial_count, flops / 1e9))
            logger.debug("No: %d\tGFLOPS: %.2f/%.2f\tresult: %s\t%s", first + k + 1, flops / 1e9,
                         self.best_flops / 1e9, _short(res), inp.config)

    def reset(self) -> None:
        self.visited.clear()
        self.best_config, self.best_flops, self.best_measure_pair, self.best_iter = None, 0.0, None, 0
        self.history.clear()

    def load_history(self, data_set, min_seed_records: int = 500) -> None:
        """Take in earlier records: those of this task (same workload and target) count as
        visited, so a resumed run does not measure them again."""
        del min_seed_records
        for inp, res in record.of_task(data_set, self.task):
            self.visited.add(inp.config.index)
            if res.error_no == MeasureErrorNo.NO_ERROR:
                flops = self.task.flop / float(np.mean(res.costs))
                if flops > self.best_flops:
                    self.best_flops, self.best_config = flops, self.space.get(inp.config.index)
                    self.best_measure_pair = (inp, res)


def _short(res) -> str:
    if res.error_no == MeasureErrorNo.NO_ERROR:
        return f"MeasureResult(costs={tuple(round(c, 9) for c in res.costs)})"
    return f"MeasureResult(error_no={MeasureErrorNo(res.error_no).name}, {str(res.costs[0])[:200]!r})"
