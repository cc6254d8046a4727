"""Executor wrappers with TVM's module paths (``tvm.runtime.executor.aot_executor.AotModule``)."""

from . import aot_executor  # noqa: F401
from .aot_executor import AotModule  # noqa: F401
