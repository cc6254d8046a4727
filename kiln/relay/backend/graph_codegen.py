"""Graph JSON for the graph executor, from a fused relay ``main``.

The layout is TVM's graph executor JSON:

    {"nodes": [{"op": "null", "name": "data", "inputs": []},
               {"op": "tvm_op", "name": "tvmgen_default_fused_nn_conv2d_add_nn_relu",
                "attrs": {"func_name": ..., "num_inputs": "3", "num_outputs": "1", "flatten_data": "0"},
                "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}, ...],
     "arg_nodes": [0, 1, 2],                 # the "null" nodes: data inputs and parameters
     "heads": [[3, 0, 0]],                   # graph outputs as [node, output index, version]
     "attrs": {"shape": ["list_shape", [...]], "dltype": ["list_str", [...]],
               "storage_id": ["list_int", [...]]},   # one entry per node output
     "node_row_ptr": [0, 1, 2, 3, 4]}        # first entry of each node

A graph output whose size depends on the data (``dyn.with_length``, relay/op/dynamic.py) adds a
key, ``"dynamic_heads": [[head, axis, length head], ...]``: only the first ``length`` entries
along ``axis`` of that head are valid. The length heads come after the model's own outputs; the
executor hides them and returns the valid part of the bounded head.

Constants of ``main`` (the bound ``params``) become parameter inputs named ``p0, p1, ...``,
returned separately as numpy arrays; a constant weight that a kernel wants in another layout
(conv2d's blocked kernel) is stored already transformed.
"""

from __future__ import annotations

import json

import numpy as np

from kiln.errors import CompileError

from ..expr import Call, Constant, Function, Tuple, TupleGetItem, Var
from ..ty import TupleType
from ..visitor import post_order
from .memory_plan import plan_storage
from .te_compiler import TECompiler


class GraphCodegen:
    def __init__(self, compiler: TECompiler, plan_inplace: bool = False):
        self.compiler = compiler
        self.plan_inplace = plan_inplace  # find in-place candidates (only the AOT plan uses them)
        self.nodes: list[dict] = []
        self.entry_types: list = []  # (shape, dtype) per entry, in node order
        self.entry_scopes: list = []  # storage scope per entry ("global.texture*": adreno images)
        self._texture_of: dict = {}  # call -> "global.texture" (adreno_textures.plan_scopes)
        self.params: dict[str, np.ndarray] = {}
        self._param_of: dict = {}  # (id(constant), transform key) -> entry
        self._used_names: set[str] = set()
        self.external: list = []  # ExternalFunctions of the offloaded calls (backend/contrib)
        self._with_length: dict = {}  # id(entry list) of a with_length result -> (axis, length entry)
        self.inplace: dict = {}  # node id -> input position the kernel may overwrite (the AOT plan's)

    def codegen(self, func: Function) -> tuple[str, dict]:
        """(graph JSON text, {param name: numpy array})."""
        self._used_names = set()
        for p in func.params:
            if p.name_hint in self._used_names:
                raise CompileError(f"graph codegen: main has two inputs named {p.name_hint!r}; the graph executor "
                                   "sets inputs by name, so give every relay.var a distinct name")
            self._used_names.add(p.name_hint)
        if self.compiler.family == "adreno":
            from . import adreno_textures

            with self.compiler.target:
                self._texture_of = adreno_textures.plan_scopes(func)
        entries: dict = {}
        for p in func.params:  # inputs first, in signature order, even when unused
            entries[p] = [self._input(p.name_hint, p.checked_type)]
        for node in post_order(func.body):
            # Constants get their parameter node when a consumer asks (_get): a weight that its
            # kernel wants transformed is then stored only in the transformed layout.
            if node in entries or isinstance(node, (Function, Constant)):
                continue
            entries[node] = self._visit(node, entries)
        heads = self._get(func.body, entries)
        dynamic = []
        for i, head in enumerate(list(heads)):
            if id(head) in self._with_length:
                axis, length = self._with_length[id(head)]
                dynamic.append([i, axis, len(heads)])
                heads.append(length)
        return self._to_json(heads, dynamic), self.params

    # -- nodes ---------------------------------------------------------------------------------
    def _get(self, node, entries) -> list:
        if isinstance(node, Constant):
            return [self._constant(node, None)]
        return entries[node]

    def _visit(self, node, entries) -> list:
        if isinstance(node, Tuple):
            return [e for f in node.fields for e in self._get(f, entries)]
        if isinstance(node, TupleGetItem):
            return [self._get(node.tuple_value, entries)[node.index]]
        if isinstance(node, Call) and isinstance(node.op, Function):
            return self._kernel(node, entries)
        if isinstance(node, Call):
            raise CompileError(f"graph codegen: {node.op} is called outside a fused function; relay.build "
                               "runs FuseOps first, so a pass after it must have produced this call")
        if isinstance(node, Var):
            raise CompileError(f"graph codegen: free variable %{node.name_hint} is not a parameter of main")
        raise CompileError(f"graph codegen: {type(node).__name__} nodes (control flow, let) are not "
                           "supported by the graph executor")

    def _input(self, name: str, ty, scope: str = "global") -> list:
        self._add_node({"op": "null", "name": name, "inputs": []}, [ty], [scope])
        return [len(self.nodes) - 1, 0, 0]

    def _constant(self, const: Constant, transform, scope: str = "global") -> list:
        key = (id(const), transform.key if transform else None)
        ref = self._param_of.get(key)
        if ref is None:
            # np.require, not np.ascontiguousarray: the latter turns a 0-d constant into shape (1,)
            data = np.require(transform.fn(const.data) if transform else const.data, requirements="C")
            if data.dtype.name == "bfloat16":  # the runtime holds bfloat16 as its bits (docs/abi.md)
                data = data.view(np.uint16)
            name = self._fresh_name()
            self.params[name] = data
            ref = self._input(name, _ArrayType(data), scope)
            self._param_of[key] = ref
        return ref

    def _kernel(self, call: Call, entries) -> list:
        func = call.op
        if func.attrs and func.attrs.get("Compiler"):
            return self._external(call, entries)
        if not (func.attrs and func.attrs.get("Primitive")):
            raise CompileError("graph codegen: main calls a non-primitive function; inline it (or run FuseOps)")
        body = func.body
        if isinstance(body, Call) and getattr(body.op, "name", "") == "dyn.with_length" and \
                all(isinstance(a, Var) for a in body.args):
            # no kernel: the data's own entry, with its length recorded for the heads
            args = [self._get(call.args[func.params.index(a)], entries)[0] for a in body.args]
            data = list(args[0])
            self._with_length[id(data)] = (int(body.attrs.axis) % max(len(body.checked_type.shape), 1), args[1])
            return [data]
        const_params = frozenset(i for i, a in enumerate(call.args) if isinstance(a, Constant))
        scopes = None
        if self._texture_of:  # adreno: which arguments and outputs are images
            from .adreno_textures import arg_scope

            scopes = (tuple(arg_scope(a, self._texture_of) for a in call.args),
                      (self._texture_of.get(call, "global"),))
        lowered = self.compiler.lower(func, const_params, scopes)
        transforms = {t.index: t for t in lowered.transforms}
        in_scopes = lowered.scopes[0] or ("global",) * len(call.args)
        inputs = []
        for i, arg in enumerate(call.args):
            if i in transforms:
                inputs.append(self._constant(arg, transforms[i], in_scopes[i]))
            else:
                inputs.extend(self._get(arg, entries))
        out_type = func.body.checked_type
        out_types = list(out_type.fields) if isinstance(out_type, TupleType) else [out_type]
        self._add_node({"op": "tvm_op", "name": lowered.name,
                        "attrs": {"func_name": lowered.name, "flatten_data": "0",
                                  "num_inputs": str(len(inputs)), "num_outputs": str(len(out_types))},
                        "inputs": inputs}, out_types, lowered.scopes[1] or None)
        nid = len(self.nodes) - 1
        if self.plan_inplace and len(inputs) == len(call.args):
            from .aot_memory_plan import inplace_input
            pos = inplace_input(func, call.args)
            if pos is not None and pos not in transforms:
                self.inplace[nid] = pos
        return [[nid, i, 0] for i in range(len(out_types))]

    def _external(self, call: Call, entries) -> list:
        """A function offloaded to an external compiler: its codegen writes the JSON the runtime
        module runs; the node names the function's symbol, and the constants the codegen lifted
        out come after the call's arguments as parameters (docs/byoc.md)."""
        from .contrib import get_codegen

        ext = get_codegen(str(call.op.attrs["Compiler"]))(call.op)
        self.external.append(ext)
        inputs = [e for a in call.args for e in self._get(a, entries)]
        inputs += [self._constant(c, None) for c in ext.constants]
        out_type = call.op.body.checked_type
        out_types = list(out_type.fields) if isinstance(out_type, TupleType) else [out_type]
        self._add_node({"op": "tvm_op", "name": ext.symbol,
                        "attrs": {"func_name": ext.symbol, "flatten_data": "0", "compiler": ext.compiler,
                                  "num_inputs": str(len(inputs)), "num_outputs": str(len(out_types))},
                        "inputs": inputs}, out_types)
        nid = len(self.nodes) - 1
        return [[nid, i, 0] for i in range(len(out_types))]

    def _add_node(self, node: dict, types: list, scopes=None) -> None:
        self.entry_scopes.extend(scopes if scopes and len(scopes) == len(types) else ["global"] * len(types))
        for ty in types:
            if isinstance(ty, TupleType):
                raise CompileError(f"graph codegen: {node['name']} has a nested tuple type {ty}; the graph "
                                   "executor passes tensors only")
            dtype = "uint16" if str(ty.dtype) == "bfloat16" else str(ty.dtype)  # bfloat16 bits
            self.entry_types.append((tuple(int(d) for d in ty.shape), dtype))
        self.nodes.append(node)

    def _fresh_name(self) -> str:
        k = len(self.params)
        while f"p{k}" in self._used_names:
            k += 1
        name = f"p{k}"
        self._used_names.add(name)
        return name

    # -- JSON ----------------------------------------------------------------------------------
    def _to_json(self, heads: list, dynamic: list = ()) -> str:
        row_ptr = [0]
        for node in self.nodes:
            row_ptr.append(row_ptr[-1] + int(node.get("attrs", {}).get("num_outputs", 1)))
        sizes = [int(np.prod(shape, dtype=np.int64)) * np.dtype(_np_dtype(dtype)).itemsize
                 for shape, dtype in self.entry_types]
        kinds = [None if scope == "global" else (scope, shape, dtype)
                 for scope, (shape, dtype) in zip(self.entry_scopes, self.entry_types)]
        storage = plan_storage(self.nodes, sizes, row_ptr, heads, kinds)
        graph = {
            "nodes": self.nodes,
            "arg_nodes": [i for i, n in enumerate(self.nodes) if n["op"] == "null"],
            "heads": heads,
            "attrs": {"shape": ["list_shape", [list(s) for s, _ in self.entry_types]],
                      "dltype": ["list_str", [d for _, d in self.entry_types]],
                      "storage_id": ["list_int", storage]},
            "node_row_ptr": row_ptr,
        }
        if dynamic:
            graph["dynamic_heads"] = [list(d) for d in dynamic]
        if any(scope != "global" for scope in self.entry_scopes):  # docs/adreno.md
            graph["attrs"]["storage_scope"] = ["list_str", list(self.entry_scopes)]
        return json.dumps(graph, separators=(",", ":"))


class _ArrayType:
    """The (shape, dtype) of a parameter array, in the form _add_node reads from relay types."""

    def __init__(self, data: np.ndarray):
        self.shape = data.shape
        self.dtype = "bool" if data.dtype == np.bool_ else data.dtype.name


def _np_dtype(dtype: str):
    return np.bool_ if dtype == "bool" else dtype
