"""A graph executor on the host whose tensors live on the board and whose kernels run there.

``create_local_graph_executor(graph_json, sess.get_system_lib(), sess.device)``: every storage id
of the graph's memory plan is one allocation in the board's page allocator, the parameters are
uploaded once (``set_input(**params)``), and ``run()`` calls the kernels on the board in order."""

from __future__ import annotations

import json

import numpy as np


class MicroGraphExecutor:
    def __init__(self, graph_json: str, lib, sess):
        self.g = json.loads(graph_json)
        self.lib, self.sess = lib, sess
        nodes = self.g["nodes"]
        self.row = [0]
        for n in nodes:
            self.row.append(self.row[-1] + (int(n["attrs"].get("num_outputs", 1)) if n["op"] == "tvm_op" else 1))
        attrs = self.g["attrs"]
        shape, dtype, sid = attrs["shape"][1], attrs["dltype"][1], attrs["storage_id"][1]
        sizes = {}
        for e in range(self.row[-1]):
            sizes[sid[e]] = max(sizes.get(sid[e], 0), int(np.prod(shape[e])) * np.dtype(dtype[e]).itemsize)
        storage = {s: sess.empty((max(n, 1),), "uint8") for s, n in sizes.items()}
        from .session import MicroNDArray
        self.entries = [MicroNDArray(sess, storage[sid[e]].handle, tuple(shape[e]), dtype[e]) for e in range(self.row[-1])]
        self.index = {nodes[i]["name"]: self.row[i] for i in self.g["arg_nodes"]}
        self.steps = []
        funcs = {}
        for nid, n in enumerate(nodes):
            if n["op"] != "tvm_op":
                continue
            name = n["attrs"]["func_name"]
            if name not in funcs:
                funcs[name] = lib.get_function(name)
            eids = [self.row[i] + k for i, k, *_ in n["inputs"]]
            eids += [self.row[nid] + k for k in range(int(n["attrs"].get("num_outputs", 1)))]
            self.steps.append((funcs[name], [self.entries[e] for e in eids]))
        self.heads = [self.row[h[0]] + h[1] for h in self.g["heads"]]

    def set_input(self, key=None, value=None, **params) -> None:
        if key is not None:
            params[key] = value
        for name, v in params.items():
            v = v.numpy() if hasattr(v, "numpy") else np.asarray(v)
            self.entries[self.index[name]].copyfrom(v)

    def run(self) -> int:
        """Runs every kernel on the board; returns the board ticks they took."""
        return sum(f.call_ticks(*args) for f, args in self.steps)

    def get_output(self, i: int):
        return self.entries[self.heads[i]]


def create_local_graph_executor(graph_json: str, lib, sess) -> MicroGraphExecutor:
    return MicroGraphExecutor(graph_json, lib, sess)


class MicroAOTExecutor:
    """The AOT run function on the board, driven from the host: inputs and outputs in board memory."""

    def __init__(self, sess, module):
        meta = module.get_executor_config()
        self.sess = sess
        self.run_fn = sess.get_system_lib().get_function(f"{meta['prefix']}_run_packed")
        self.inputs = {t["name"]: sess.empty(t["shape"], t["dtype"]) for t in meta["inputs"]}
        self.outputs = [sess.empty(t["shape"], t["dtype"]) for t in meta["outputs"]]

    def set_input(self, key=None, value=None, **inputs) -> None:
        if key is not None:
            inputs[key] = value
        for name, v in inputs.items():
            self.inputs[name].copyfrom(v.numpy() if hasattr(v, "numpy") else np.asarray(v))

    def run(self) -> int:
        """Runs the model on the board; returns the board ticks it took."""
        return self.run_fn.call_ticks(*self.inputs.values(), *self.outputs)

    def get_output(self, i: int):
        return self.outputs[i]


def create_local_aot_executor(sess, module) -> MicroAOTExecutor:
    """``module``: what relay.build returned with the AOT executor (its interface: names, shapes)."""
    return MicroAOTExecutor(sess, module)
