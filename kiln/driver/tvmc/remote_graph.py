"""Run a package on an RPC server that has no graph executor (the C ``kiln_rpc`` of the boards):
tvmc walks the graph itself and calls each kernel of the uploaded ``mod.so`` on the server.

Every graph entry gets its own array on the device (no memory plan: simple, and fine for the
models a board runs in tests); parameters and inputs are copied in once, outputs copied out.
Times come from the server: each kernel is timed there with ``time_evaluator`` and a run's time
is the sum over kernels of one repeat each, so the network is not in the figure (the
graph walk between kernels is not either; it is a few microseconds per kernel on a device
executor).
"""

from __future__ import annotations

import json

import numpy as np

from kiln.errors import KilnError


def server_has_graph_executor(session) -> bool:
    try:
        session.get_function("tvm.graph_executor.create")
    except AttributeError:
        return False
    return True


class _Local:
    """A host array answering ``.numpy()`` like the remote arrays tvmc's runner reads."""

    def __init__(self, value):
        self.value = value

    def numpy(self):
        return self.value


class KernelByKernel:
    """The subset of GraphModule tvmc's runner uses, over a remote kernel library."""

    def __init__(self, graph_json: str, lib, dev):
        graph = json.loads(graph_json)
        self.lib, self.dev = lib, dev
        self.nodes, self.row_ptr, self.heads = graph["nodes"], graph["node_row_ptr"], graph["heads"]
        # outputs of data-dependent size (graph_codegen's "dynamic_heads"): head -> (axis, length head);
        # the length heads are hidden, as the graph executor hides them
        self.dynamic = {h: (axis, n) for h, axis, n in graph.get("dynamic_heads", [])}
        self.num_outputs = len(self.heads) - len({n for _, n in self.dynamic.values()})
        self.inputs = {self.nodes[n]["name"]: self.row_ptr[n] for n in graph["arg_nodes"]}
        attrs = graph["attrs"]
        session = dev.session
        self.entries = [session.nd_empty(tuple(shape), dtype, dev)
                        for shape, dtype in zip(attrs["shape"][1], attrs["dltype"][1])]
        self.calls = []
        for nid, node in enumerate(self.nodes):
            if node["op"] == "null":
                continue
            name = node.get("attrs", {}).get("func_name", node["name"])
            args = [self.entries[self.row_ptr[i] + k] for i, k, *_ in node["inputs"]]
            args += [self.entries[e] for e in range(self.row_ptr[nid], self.row_ptr[nid + 1])]
            self.calls.append((name, lib.get_function(name), args))

    def set_input(self, name: str, value) -> None:
        self.entries[self.inputs[name]].copyfrom(np.ascontiguousarray(value))

    def load_params(self, blob: bytes) -> None:
        from kiln.runtime.params import load_params
        for name, value in load_params(blob).items():
            if name in self.inputs:
                self.set_input(name, value)

    def run(self) -> None:
        for _, func, args in self.calls:
            func(*args)

    def get_num_outputs(self) -> int:
        return self.num_outputs

    def _head(self, index: int):
        nid, k, *_ = self.heads[index]
        return self.entries[self.row_ptr[nid] + k]

    def get_output(self, index: int):
        """Output ``index``; one of data-dependent size is its valid part (a local array)."""
        arr = self._head(index)
        if index not in self.dynamic:
            return arr
        axis, length_head = self.dynamic[index]
        full = arr.numpy()
        length = int(self._head(length_head).numpy().reshape(-1)[0])
        if not 0 <= length <= full.shape[axis]:
            raise KilnError(f"tvmc run: a kernel reported {length} valid entries along axis {axis} of an output "
                            f"of shape {full.shape}; the kernel or the graph JSON is corrupt")
        return _Local(np.take(full, np.arange(length), axis=axis))

    def kernel_times(self, number: int, repeat: int) -> list:
        """``[(name, [seconds per call, one per repeat])]``, timed on the server."""
        out = []
        for name, _, args in self.calls:
            evaluator = self.lib.time_evaluator(name, self.dev, number=number, repeat=repeat)
            out.append((name, list(evaluator(*args).results)))
        return out

    def run_times(self, number: int, repeat: int) -> list:
        """Seconds per run, one per repeat: the sum of every kernel's time in that repeat."""
        per_kernel = self.kernel_times(number, repeat)
        return [sum(times[r] for _, times in per_kernel) for r in range(repeat)]

    def profile(self, number: int, repeat: int) -> list:
        return [{"node": i, "name": name, "ms": float(np.median(times)) * 1e3}
                for i, (name, times) in enumerate(self.kernel_times(number, repeat))]
