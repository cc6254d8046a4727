"""``relay.ext.cublas``: the JSON graph of a function offloaded to cuBLAS.

Node kinds: ``dense`` (data (M, K), weight (N, K)) and ``batch_matmul`` (a (B, M, K), b (B, N, K)
with ``transpose_b``, or (B, K, N) without), run by kiln/runtime/json_cublas.py.
"""

from __future__ import annotations

from kiln.errors import CompileError

from ...expr import Call, Function
from .json_graph import ExternalFunction, Serializer


def cublas_codegen(func: Function) -> ExternalFunction:
    return Serializer(func, _convert).serialize()


def _convert(s: Serializer, call: Call):
    name = getattr(call.op, "name", "")
    if name == "nn.dense":
        return s.add("dense", name, [s.ref(call.args[0]), s.ref(call.args[1])], {}, call)
    if name == "nn.batch_matmul":
        return s.add("batch_matmul", name, [s.ref(call.args[0]), s.ref(call.args[1])],
                     {"transpose_b": bool(call.attrs.get("transpose_b", True))}, call)
    raise CompileError(f"{s.symbol}: the cuBLAS codegen has no rule for {name or 'a composite'}")
