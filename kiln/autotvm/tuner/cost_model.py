"""The XGBoost cost model: predicts the relative speed of configs from their features.

``loss_type="rank"`` trains a pairwise ranking objective (only the order of configs matters,
which is all the search needs and is robust to the scale of each task); ``"reg"`` regresses the
normalized GFLOPS. xgboost is imported here, on first use, not with kiln.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from kiln.errors import TuningError

from . import features

logger = logging.getLogger("autotvm")


def _xgboost():
    try:
        import xgboost
    except ImportError:
        raise TuningError("XGBTuner needs xgboost: pip install xgboost-cpu (or pip install "
                          "'kiln[tune]'); or use GATuner/RandomTuner, which need nothing") from None
    return xgboost


# Features of other tasks' records (transfer learning), shared by every model in the process:
# each record decodes to its own task object, so the per-task cache cannot hold them, and the
# tuner of each of a model's tasks reads the same prior log (tvmc tune --tuning-records, a
# resumed bench): without this MobileNetV2's 31 tasks lowered ~40000 configs, 4.5 min.
_TRANSFER_CACHE: dict = {}
_TRANSFER_CACHE_MAX = 50_000


def _transfer_features(feature_type: str, extract, inp):
    key = (feature_type, str(inp.target), inp.task.workload, inp.config.index)
    if key not in _TRANSFER_CACHE:
        if len(_TRANSFER_CACHE) >= _TRANSFER_CACHE_MAX:
            _TRANSFER_CACHE.clear()
        try:
            _TRANSFER_CACHE[key] = extract(inp.task, inp.config)
        except Exception:  # noqa: BLE001 - template changed since the log was written
            _TRANSFER_CACHE[key] = None
    return _TRANSFER_CACHE[key]


class XGBoostCostModel:
    def __init__(self, task, feature_type: str = "itervar", loss_type: str = "rank",
                 num_threads: int | None = None, num_rounds: int = 120, seed: int | None = None):
        if feature_type not in features.EXTRACTORS:
            raise TuningError(f"unknown feature_type {feature_type!r}; use one of "
                              f"{sorted(features.EXTRACTORS)}")
        if loss_type not in ("rank", "reg"):
            raise TuningError(f"unknown loss_type {loss_type!r}; use 'rank' or 'reg'")
        self.xgb = _xgboost()
        self.task, self.feature_type, self.loss_type = task, feature_type, loss_type
        self.extract = features.EXTRACTORS[feature_type]
        self.params = {
            "max_depth": 6, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0, "eta": 0.3,
            "lambda": 1.0, "alpha": 0.0, "verbosity": 0, "seed": int(seed or 0),
            "nthread": num_threads or os.cpu_count() or 1,
            "objective": "rank:pairwise" if loss_type == "rank" else "reg:squarederror",
        }
        self.num_rounds = num_rounds
        self.bst = None
        # Features depend only on (task, config), so every model of a task shares one cache:
        # a second tuner on the same task (repeats, restarts) does not extract them again.
        self._cache: dict[int, np.ndarray] = task.__dict__.setdefault("feature_cache", {}) \
            .setdefault(feature_type, {})
        self._extra_x: np.ndarray | None = None
        self._extra_y: np.ndarray | None = None

    # -- features ------------------------------------------------------------------------------
    def features(self, indices) -> np.ndarray:
        space = self.task.config_space
        rows = []
        for idx in indices:
            vec = self._cache.get(idx)
            if vec is None:
                try:
                    vec = self.extract(self.task, space.get(idx))
                except Exception:  # noqa: BLE001 - a config the template rejects: predict it worst
                    vec = None
                self._cache[idx] = vec
            rows.append(vec)
        width = max((len(r) for r in rows if r is not None), default=1)
        if not rows:
            return np.empty((0, width), np.float32)
        return np.stack([r if r is not None else np.full(width, np.nan, np.float32) for r in rows])

    # -- training ------------------------------------------------------------------------------
    def fit(self, indices, flops) -> None:
        if len(indices):
            x = self.features(indices)
            y = np.asarray(flops, dtype=np.float64)
            y = y / max(y.max(), 1e-9)
        else:
            x, y = None, None
        if self._extra_x is not None and (x is None or self._extra_x.shape[1] == x.shape[1]):
            x = self._extra_x if x is None else np.concatenate([x, self._extra_x])
            y = self._extra_y if y is None else np.concatenate([y, self._extra_y])
        if x is None:
            return
        dtrain = self.xgb.DMatrix(x, label=y)
        if self.loss_type == "rank":
            dtrain.set_group([len(y)])
        self.bst = self.xgb.train(self.params, dtrain, num_boost_round=self.num_rounds)

    def fit_log(self, records) -> int:
        """Add records of other tasks (same feature width) as extra training data: transfer
        learning. Returns how many were usable. Only itervar/curve features transfer."""
        if self.feature_type == "knob":
            return 0
        by_task: dict[tuple, list] = {}
        for inp, res in records:
            if res.error_no != 0 or inp.task.func is None:
                continue
            by_task.setdefault(inp.task.workload, []).append((inp, res))
        xs, ys = [], []
        for pairs in by_task.values():
            # Each task's speeds are normalized to its own best, so tasks of any size mix.
            flops = [1.0 / float(np.mean(r.costs)) for _, r in pairs]
            top = max(flops)
            for (inp, _), f in zip(pairs, flops):
                vec = _transfer_features(self.feature_type, self.extract, inp)
                if vec is None:
                    continue
                xs.append(vec)
                ys.append(f / top)
        if not xs:
            return 0
        width = max(len(x) for x in xs)
        keep = [i for i, x in enumerate(xs) if len(x) == width]
        self._extra_x = np.stack([xs[i] for i in keep])
        self._extra_y = np.array([ys[i] for i in keep])
        return len(keep)

    def predict(self, indices) -> np.ndarray:
        x = self.features(indices)
        if self.bst is None or not len(x):
            return np.zeros(len(indices))
        scores = self.bst.predict(self.xgb.DMatrix(x))
        scores[np.isnan(x).all(axis=1)] = -1e9
        return scores
