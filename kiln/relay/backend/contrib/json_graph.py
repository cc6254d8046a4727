"""The JSON graph of an offloaded function, and the serializer that writes it.

    {"format": "kiln-json-graph", "version": 1, "compiler": "dnnl",
     "symbol": "tvmgen_default_dnnl_main_0",
     "inputs":    [{"name": ..., "shape": [1, 3, 224, 224], "dtype": "float32"}, ...],
     "constants": [{"name": "tvmgen_default_dnnl_main_0_const_0", "shape": [...], "dtype": ...}, ...],
     "nodes":     [{"kind": "conv2d", "name": "dnnl.conv2d_bias_relu", "inputs": [0, 2, 3],
                    "attrs": {...}, "shape": [1, 64, 112, 112], "dtype": "float32"}, ...],
     "outputs":   [5]}

Entries are numbered inputs first, then constants, then one per node; ``inputs`` and
``outputs`` of nodes refer to entries. The function the runtime exports under ``symbol``
takes the input tensors, then the constants, then the output tensors (the graph executor's
calling convention: arguments, then results).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from kiln.errors import CompileError

from ...expr import Call, Constant, Function, Tuple, TupleGetItem, Var
from ...visitor import post_order


@dataclass
class ExternalFunction:
    """What a codegen returns for one partitioned function."""

    compiler: str
    symbol: str
    graph: dict
    constants: list = field(default_factory=list)  # relay Constants, in the graph's order

    @property
    def source(self) -> str:
        return json.dumps(self.graph, separators=(",", ":"))


class Serializer:
    """Walks a partitioned function; ``convert(serializer, call) -> entry id`` adds the nodes of
    one call (a primitive op or a composite)."""

    def __init__(self, func: Function, convert):
        self.func = func
        self.convert = convert
        self.symbol = str(func.attrs.get("global_symbol"))
        self.compiler = str(func.attrs.get("Compiler"))
        self.inputs = [{"name": p.name_hint, "shape": _shape(p), "dtype": p.checked_type.dtype}
                       for p in func.params]
        self.constants: list[Constant] = []
        self.nodes: list[dict] = []
        self.entry: dict = {p: i for i, p in enumerate(func.params)}

    def serialize(self) -> ExternalFunction:
        for node in post_order(self.func.body):
            if node in self.entry or isinstance(node, (Var, Constant, Function)):
                continue
            if isinstance(node, Tuple):
                if node is not self.func.body:
                    raise CompileError(f"{self.symbol}: a tuple inside an offloaded function")
                continue
            if isinstance(node, TupleGetItem):
                raise CompileError(f"{self.symbol}: TupleGetItem inside an offloaded function")
            if not isinstance(node, Call):
                raise CompileError(f"{self.symbol}: cannot offload a {type(node).__name__}")
            self.entry[node] = self.convert(self, node)
        body = self.func.body
        outs = list(body.fields) if isinstance(body, Tuple) else [body]
        n_in, n_const = len(self.inputs), len(self.constants)
        graph = {"format": "kiln-json-graph", "version": 1, "compiler": self.compiler, "symbol": self.symbol,
                 "inputs": self.inputs,
                 "constants": [{"name": f"{self.symbol}_const_{k}", "shape": list(c.data.shape),
                                "dtype": str(c.data.dtype)} for k, c in enumerate(self.constants)],
                 "nodes": [dict(n, inputs=[self._final(i, n_in, n_const) for i in n["inputs"]])
                           for n in self.nodes],
                 "outputs": [self._final(self.ref(o), n_in, n_const) for o in outs]}
        return ExternalFunction(self.compiler, self.symbol, graph, list(self.constants))

    # While walking, node entries are numbered after the inputs ("n", k) and constants ("c", k)
    # separately, as the constant count is only known at the end.
    @staticmethod
    def _final(ref, n_in: int, n_const: int) -> int:
        kind, k = ref
        return k if kind == "i" else n_in + k if kind == "c" else n_in + n_const + k

    def ref(self, expr):
        """The entry of ``expr`` (an input, a node already added, or a constant, lifted now)."""
        if isinstance(expr, Constant):
            return self.constant(expr)
        e = self.entry.get(expr)
        if e is None:
            raise CompileError(f"{self.symbol}: {type(expr).__name__} is used before it is computed")
        return ("i", e) if isinstance(e, int) else e

    def constant(self, const) -> tuple:
        if not isinstance(const, Constant):
            const = Constant(np.ascontiguousarray(const))
        for k, c in enumerate(self.constants):
            if c is const:
                return ("c", k)
        self.constants.append(const)
        return ("c", len(self.constants) - 1)

    def add(self, kind: str, name: str, inputs: list, attrs: dict, out) -> tuple:
        self.nodes.append({"kind": kind, "name": name, "inputs": list(inputs), "attrs": attrs,
                           "shape": _shape(out), "dtype": out.checked_type.dtype})
        return ("n", len(self.nodes) - 1)


def _shape(e) -> list:
    return [int(d) for d in e.checked_type.shape]
