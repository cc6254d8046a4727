"""``tvm.contrib.graph_runtime``: the seed-era name of ``graph_executor`` (004 imports it)."""

from .graph_executor import GraphModule, create  # noqa: F401
