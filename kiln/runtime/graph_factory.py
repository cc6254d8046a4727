"""A library exported from ``relay.build`` carries its graph: ``lib["default"](dev)``.

``relay.build(...).export_library("deploy.so")`` links three data symbols next to the kernels
(written by kiln/relay/backend/graph_object.py, described in docs/graph.md):

    __kiln_graph_name    NUL-terminated name of the factory function ("default")
    __kiln_graph_json    NUL-terminated graph JSON
    __kiln_graph_params  u64 little-endian byte count, then the parameter blob (params.py)

``LibraryModule`` asks ``graph_functions(lib)`` for the functions these symbols give it:
``<name>(dev)`` creates a graph executor with the parameters loaded, ``get_graph_json()`` and
``get_params()`` return what ``relay.build``'s factory module returned.
"""

from __future__ import annotations

import ctypes

NAME_SYMBOL, JSON_SYMBOL, PARAMS_SYMBOL = "__kiln_graph_name", "__kiln_graph_json", "__kiln_graph_params"


class EmbeddedGraph:
    def __init__(self, lib, name: str, graph_json: str, params_address: int):
        self.lib = lib
        self.name = name
        self.graph_json = graph_json
        size = ctypes.c_uint64.from_address(params_address).value
        # A view of the library's read-only data: no copy until an executor loads it.
        self.params_blob = memoryview((ctypes.c_char * size).from_address(params_address + 8)).cast("B")

    def create(self, dev):
        from .graph_executor import GraphExecutor

        ex = GraphExecutor(self.graph_json, self.lib, dev)
        ex.load_params(self.params_blob)
        return ex

    def get_params(self) -> dict:
        from .ndarray import array
        from .params import load_params

        return {k: array(v) for k, v in load_params(self.params_blob, copy=False).items()}

    def functions(self) -> dict:
        return {self.name: self.create, "get_graph_json": lambda: self.graph_json,
                "get_params": self.get_params}


def read_embedded(lib, symbol_address) -> EmbeddedGraph | None:
    """The graph a loaded library carries, or None. ``symbol_address(lib, name)`` -> int | None."""
    cdll = lib._lib
    json_at = symbol_address(cdll, JSON_SYMBOL)
    if json_at is None:
        return None
    name_at, params_at = symbol_address(cdll, NAME_SYMBOL), symbol_address(cdll, PARAMS_SYMBOL)
    if name_at is None or params_at is None:
        from ..errors import KilnError
        raise KilnError(f"{lib.path}: it has {JSON_SYMBOL} but not {NAME_SYMBOL}/{PARAMS_SYMBOL}; "
                        "re-export it with relay.build(...).export_library")
    name = ctypes.string_at(name_at).decode()
    graph_json = ctypes.string_at(json_at).decode()
    return EmbeddedGraph(lib, name, graph_json, params_at)
