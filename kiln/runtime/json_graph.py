"""What every executor of offloaded JSON subgraphs reads (json_runtime.py): entry shapes, tensor
addresses, and why a vendor library does not load. Below the executors, so they share it
without importing json_runtime (which imports them)."""

from __future__ import annotations

import numpy as np

from ..errors import KilnError


def entry_shape(graph: dict, entry: int) -> list:
    """The shape of graph entry ``entry`` of an offloaded subgraph: inputs, then constants, then
    one per node."""
    n_inputs, n_in = len(graph["inputs"]), len(graph["inputs"]) + len(graph["constants"])
    if entry < n_inputs:
        return graph["inputs"][entry]["shape"]
    if entry < n_in:
        return graph["constants"][entry - n_inputs]["shape"]
    return graph["nodes"][entry - n_in]["shape"]


def load_error(load) -> str | None:
    """None when ``load()`` (a library loader that raises KilnError) succeeds, else its message."""
    try:
        load()
        return None
    except KilnError as err:
        return str(err)


def address(array) -> int:
    """The data address of an NDArray (or of a numpy array made contiguous)."""
    if hasattr(array, "_address"):
        return array._address()
    return np.ascontiguousarray(array).ctypes.data
