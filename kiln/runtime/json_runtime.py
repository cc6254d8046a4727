"""JSON runtime modules: run the subgraphs a library offloads to an external compiler.

``relay.build`` of a partitioned model links one extra data symbol into the library:

    __kiln_external_modules   NUL-terminated JSON list of {"type_key", "symbol", "source"}

(``source`` is the JSON graph, kiln/relay/backend/contrib/json_graph.py). Every loader (the
CompiledModule ``relay.build`` returns, a ``.so``/``.tar`` from ``load_module``, an RPC server)
turns each entry into a ``JSONRuntimeModule`` among ``imported_modules``: its ``type_key`` is
the compiler ("dnnl") and ``get_source()`` the JSON. The graph JSON names the function by its
symbol, and the graph executor finds it there (``get_function(name, query_imports=True)``).

An executor per compiler runs the graph: oneDNN (json_dnnl.py, through the shim the library
carries), cuBLAS (json_cublas.py), cuDNN (json_cudnn.py). Nothing here compiles anything.
"""

from __future__ import annotations

import ctypes
import json

from ..errors import KilnError
from .json_dnnl import INSTALL_HINT, SHIM_SYMBOL, DNNLExecutor, dnnl_available, read_shim  # noqa: F401
from .json_graph import address as _address
from .json_graph import entry_shape, load_error  # noqa: F401 - the executors' helpers, by their old names
from .module import Module

SYMBOL = "__kiln_external_modules"


class JSONRuntimeModule(Module):
    """One offloaded function: ``type_key`` names its compiler, ``get_source()`` is its JSON."""

    def __init__(self, type_key: str, symbol: str, source: str, runtime: bytes | None = None):
        super().__init__()
        self.type_key = type_key
        self.symbol = symbol
        self.source = source
        self.runtime = runtime  # the prebuilt library the executor calls, when it needs one (oneDNN's shim)
        self._graph = None

    @property
    def graph(self) -> dict:
        if self._graph is None:
            self._graph = json.loads(self.source)
        return self._graph

    @property
    def entry_name(self) -> str:
        return self.symbol

    def function_names(self) -> list[str]:
        return [self.symbol]

    def get_source(self, fmt: str = "") -> str:
        return self.source

    def _get_function(self, name: str):
        if name != self.symbol:
            return None
        executor = EXECUTORS.get(self.type_key)
        if executor is None:
            raise KilnError(f"{self.symbol}: this runtime cannot run '{self.type_key}' subgraphs "
                            f"(it runs {sorted(EXECUTORS)})")
        return JSONFunction(self.symbol, executor(self.graph, self.runtime))

    def __repr__(self) -> str:
        return f"JSONRuntimeModule({self.type_key}, {self.symbol}, {len(self.graph['nodes'])} nodes)"


class JSONFunction:
    """The graph executor's view of an offloaded function: ``f(*inputs, *constants, *outputs)``
    and ``prepare`` (a callable taking the executor's (args, codes, n) and returning 0 or -1)."""

    def __init__(self, name: str, executor):
        self.name = name
        self.executor = executor
        self._error = None

    def __call__(self, *arrays) -> None:
        self.executor.bind(arrays)()

    def input_changed(self, array) -> None:
        """``array`` (one of the tensors this function reads) was overwritten in place: the graph
        executor's ``set_input``. Executors that keep converted copies (oneDNN's reordered
        weights) convert it again on the next run."""
        changed = getattr(self.executor, "input_changed", None)
        if changed is not None:
            changed(_address(array))

    def prepare(self, *arrays):
        run = self.executor.bind(arrays)

        def call(_args, _codes, _n):
            try:
                run()
                return 0
            except Exception as err:  # noqa: BLE001 - re-raised by _raise in the caller
                self._error = err
                return -1

        return call, None, None, 0, arrays

    def _raise(self, rc: int):
        err, self._error = self._error, None
        raise KilnError(f"{self.name}: {err}" if err else f"{self.name} returned {rc}")


def from_library(text: str, runtime: bytes | None = None) -> list[JSONRuntimeModule]:
    return [JSONRuntimeModule(e["type_key"], e["symbol"], e["source"], runtime if e["type_key"] == "dnnl" else None)
            for e in json.loads(text)]


def to_library(modules) -> str:
    return json.dumps([{"type_key": m.type_key, "symbol": m.symbol, "source": m.source} for m in modules])


def read_symbol(lib: ctypes.CDLL) -> list[JSONRuntimeModule]:
    """The modules a loaded library carries (none when it has no ``__kiln_external_modules``)."""
    try:
        address = ctypes.addressof(ctypes.c_char.in_dll(lib, SYMBOL))
    except ValueError:
        return []
    return from_library(ctypes.string_at(address).decode(), read_shim(lib))


def _cublas(graph, runtime):
    from .json_cublas import CuBLASExecutor
    return CuBLASExecutor(graph)


def _cudnn(graph, runtime):
    from .json_cudnn import CuDNNExecutor
    return CuDNNExecutor(graph)


# compiler name -> executor(graph, runtime bytes or None)
EXECUTORS = {"dnnl": DNNLExecutor, "cublas": _cublas, "cudnn": _cudnn}
