"""Tuners: ``from kiln.autotvm.tuner import XGBTuner, GATuner, RandomTuner, GridSearchTuner``."""

from .ga_tuner import GATuner  # noqa: F401
from .model_based import ModelBasedTuner, SimulatedAnnealingOptimizer  # noqa: F401
from .simple import GridSearchTuner, RandomTuner  # noqa: F401
from .tuner import Tuner  # noqa: F401
from .xgboost_tuner import XGBTuner  # noqa: F401
