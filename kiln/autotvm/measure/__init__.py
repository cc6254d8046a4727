"""Measurement: builders, runners, results, ``measure_option``, ``request_remote``."""

from .local_builder import LocalBuilder  # noqa: F401
from .local_runner import LocalRunner  # noqa: F401
from .measure import (  # noqa: F401
    Builder, BuildResult, MeasureBatch, MeasureErrorNo, MeasureInput, MeasureResult, Runner,
    create_measure_batch, measure_option,
)
from .rpc_runner import RPCRunner, check_remote, request_remote  # noqa: F401
