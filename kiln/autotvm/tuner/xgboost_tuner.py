"""XGBTuner: model-based tuning with an XGBoost cost model and simulated annealing."""

from __future__ import annotations

import numpy as np

from .cost_model import XGBoostCostModel
from .model_based import ModelBasedTuner, SimulatedAnnealingOptimizer


class XGBTuner(ModelBasedTuner):
    """``XGBTuner(task, plan_size=64, feature_type="itervar", loss_type="rank", num_threads=None,
    optimizer="sa", seed=None)``.

    After every ``plan_size`` measurements the model is refit on all of them and the annealer
    picks the next ``plan_size`` configs it predicts fastest.
    """

    def __init__(self, task, plan_size: int = 64, feature_type: str = "itervar",
                 loss_type: str = "rank", num_threads: int | None = None, optimizer="sa",
                 diversity_filter_ratio=None, log_interval: int = 50, seed=None):
        del diversity_filter_ratio, log_interval  # accepted for TVM scripts; not used
        rng = np.random.default_rng(seed)
        model = XGBoostCostModel(task, feature_type=feature_type, loss_type=loss_type,
                                 num_threads=num_threads, seed=int(rng.integers(1 << 30)))
        if optimizer == "sa":
            optimizer = SimulatedAnnealingOptimizer(task.config_space, rng=rng)
        super().__init__(task, model, optimizer, plan_size=plan_size, seed=int(rng.integers(1 << 30)))
