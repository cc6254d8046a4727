"""Which config a template gets when it runs: the dispatch context.

The active context is held in a ``contextvars.ContextVar`` (never a module-global object), so
threads and asyncio tasks each see their own, and ``with`` blocks nest:

>>> with autotvm.apply_history_best("matmul.log"):
...     s, args = matmul(1024, 1024, 1024, "float32")    # built with the best logged config

Kinds: ``ApplyConfig`` (one fixed config: task creation and candidate builds),
``ApplyHistoryBest`` (best records of a log), ``FallbackContext`` (defaults, with a warning).
A context that has no answer asks the one that was active when it was entered.
"""

from __future__ import annotations

import contextvars
import logging

from .. import tuning
from .space import FallbackConfigEntity

logger = logging.getLogger("autotvm")

_current: contextvars.ContextVar["DispatchContext | None"] = contextvars.ContextVar(
    "kiln_autotvm_dispatch", default=None)


def current() -> "DispatchContext":
    """The innermost active context; a fresh FallbackContext in a context that has none."""
    ctx = _current.get()
    if ctx is None:
        ctx = FallbackContext()
        _current.set(ctx)
    return ctx


class DispatchContext:
    """Base class: ``query(target, workload)`` returns the config to use."""

    def __init__(self):
        self._parent: DispatchContext | None = None
        self._fallback: FallbackContext | None = None  # answers misses when there is no parent
        self._tokens: list = []

    def _query_inside(self, target, workload):
        raise NotImplementedError

    def query(self, target, workload):
        cfg = self._query_inside(target, workload)
        if cfg is not None:
            return cfg
        parent = self._parent
        if parent is None:  # one fallback per context, so that each untuned workload warns once
            parent = self._fallback = self._fallback or FallbackContext()
        return parent.query(target, workload)

    def update(self, target, workload, cfg) -> None:
        """Record ``cfg`` as the answer for (target, workload) in this context."""
        raise NotImplementedError(f"{type(self).__name__} cannot be updated")

    def __enter__(self):
        self._parent = _current.get()
        self._tokens.append(_current.set(self))
        return self

    def __exit__(self, *exc):
        _current.reset(self._tokens.pop())


class ApplyConfig(DispatchContext):
    """Every query answers ``config`` (a ConfigSpace while a task is created, an entity when a
    candidate is built). Remembers the last workload it served."""

    def __init__(self, config):
        super().__init__()
        self._config = config
        self.workload = None

    def _query_inside(self, target, workload):
        self.workload = workload
        return self._config

    def update(self, target, workload, cfg) -> None:
        self._config = cfg


def _target_keys(target) -> list[str]:
    """Lookup keys for a target, most specific first: its full text, then its keys."""
    if target is None:
        return ["*"]
    from kiln.target import Target
    tgt = target if isinstance(target, Target) else Target(str(target))
    return [str(tgt), *tgt.keys, "*"]


class ApplyHistoryBest(DispatchContext):
    """The fastest valid record per (target, workload) of one or more logs.

    ``records``: a log file name, a list of them, or (MeasureInput, MeasureResult) pairs.
    """

    def __init__(self, records):
        super().__init__()
        self._best: dict[tuple, tuple[float, object]] = {}
        if records:
            self.load(records)

    def load(self, records) -> None:
        from . import record
        from .measure.measure import MeasureErrorNo
        if isinstance(records, str) or hasattr(records, "__fspath__"):
            records = record.load_from_file(records)
        elif isinstance(records, list) and records and isinstance(records[0], str):
            records = [r for name in records for r in record.load_from_file(name)]
        count = 0
        for inp, res in records:
            if res.error_no != MeasureErrorNo.NO_ERROR:
                continue
            cost = sum(res.costs) / len(res.costs)
            for key in _target_keys(inp.target):
                slot = (key, inp.task.workload)
                if slot not in self._best or cost < self._best[slot][0]:
                    self._best[slot] = (cost, inp.config)
            count += 1
        logger.debug("apply_history_best: %d valid records, %d (target, workload) entries",
                     count, len(self._best))

    def _query_inside(self, target, workload):
        for key in _target_keys(target):
            hit = self._best.get((key, workload))
            if hit is not None:
                return hit[1]
        return None

    def update(self, target, workload, cfg) -> None:
        for key in _target_keys(target):
            self._best[(key, workload)] = (0.0, cfg)

    @property
    def best_by_workload(self) -> dict:
        return {wkl: cfg for (key, wkl), (_, cfg) in self._best.items() if key == "*"}


class FallbackContext(DispatchContext):
    """Untuned defaults. Warns once per workload that the config is not tuned."""

    def __init__(self):
        super().__init__()
        self.memory: dict[tuple, FallbackConfigEntity] = {}
        self.silent = False

    def _query_inside(self, target, workload):
        key = (str(target), workload)
        cfg = self.memory.get(key)
        if cfg is None:
            if not self.silent:
                logger.warning("Cannot find config for target=%s, workload=%s. A fallback "
                               "configuration is used, which may bring great performance "
                               "regression. Tune this workload (autotvm) and compile under "
                               "autotvm.apply_history_best(log).", target, workload)
            cfg = self.memory[key] = FallbackConfigEntity()
        return cfg

    def clear_cache(self, target, workload) -> None:
        self.memory.pop((str(target), workload), None)

    def update(self, target, workload, cfg) -> None:
        self.memory[(str(target), workload)] = cfg


def apply_history_best(records) -> ApplyHistoryBest:
    """``with autotvm.apply_history_best("tuning.log"): lib = relay.build(...)``"""
    return ApplyHistoryBest(records)


def _build_config(workload, target):
    """The active context's config for a relay build's ``workload``, or None (kiln/tuning.py)."""
    ctx = current()
    if type(ctx) is FallbackContext:
        # Outside any apply_history_best: only configs someone stored explicitly count; a query
        # would log a "not tuned" warning for every conv of every untuned build.
        cfg = ctx.memory.get((str(target), workload))
    else:
        cfg = ctx.query(target, workload)
    if cfg is None or getattr(cfg, "is_fallback", False):
        return None
    return cfg


tuning.set_tuned_config_lookup(_build_config)
