"""A graph executor on the host whose tensors live on the board and whose kernels run there.

``create_local_graph_executor(graph_json, sess.get_system_lib(), sess.device)``: every storage id
of the graph's memory plan is one allocation in the board's page allocator, the parameters are
uploaded once (``set_input(**params)``), and ``run()`` calls the kernels on the board in order."""

from __future__ import annotations

import json

import numpy as np

from kiln.errors import KilnError


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
    """The AOT run function on the board, driven from the host: inputs and outputs in board memory.

    TVM 0.13's AotModule methods: ``set_input``, ``get_input`` (a board tensor with ``copyfrom``),
    ``run``, ``get_output``, ``get_num_inputs``, ``get_num_outputs``, ``get_input_index``, and
    ``module.time_evaluator("run", dev, number=...)``."""

    def __init__(self, sess, config: dict):
        self.sess, self.config = sess, config
        self.run_fn = sess.get_system_lib().get_function(f"{config['prefix']}_run_packed")
        self.inputs = {t["name"]: sess.empty(t["shape"], t["dtype"]) for t in config["inputs"]}
        self.outputs = [sess.empty(t["shape"], t["dtype"]) for t in config["outputs"]]
        self.module = _AOTModule(self)

    def get_input_index(self, name: str) -> int:
        names = list(self.inputs)
        if name not in names:  # the interface names inputs as C identifiers ("input_1:0" -> "input_1_0")
            from kiln.relay.backend.aot import c_ident
            name = c_ident(name) if c_ident(name) in names else name
        if name not in names:
            raise KilnError(f"the model has no input {name!r}; its inputs: {', '.join(names)}")
        return names.index(name)

    def get_input(self, key):
        """The board tensor of input ``key`` (a name or an index)."""
        names = list(self.inputs)
        if isinstance(key, int):
            if not 0 <= key < len(names):
                raise KilnError(f"input index {key} is out of range: the model has {len(names)} inputs")
            key = names[key]
        return self.inputs[names[self.get_input_index(key)]]

    def set_input(self, key=None, value=None, **inputs) -> None:
        if key is not None:
            inputs[key if isinstance(key, str) else list(self.inputs)[key]] = value
        for name, v in inputs.items():
            self.get_input(name).copyfrom(v.numpy() if hasattr(v, "numpy") else np.asarray(v))

    def get_num_inputs(self) -> int:
        return len(self.inputs)

    def get_num_outputs(self) -> int:
        return len(self.outputs)

    def run(self) -> int:
        """Runs the model on the board; returns the board ticks it took."""
        return self.run_fn.call_ticks(*self.inputs.values(), *self.outputs)

    def get_output(self, i: int, out=None):
        if not 0 <= i < len(self.outputs):
            raise KilnError(f"output index {i} is out of range: the model has {len(self.outputs)} outputs")
        if out is not None:
            out.copyfrom(self.outputs[i].numpy())
            return out
        return self.outputs[i]


class _AOTModule:
    """``aot.module.time_evaluator("run", dev, number=1, repeat=1)()``: board seconds per run."""

    def __init__(self, executor: MicroAOTExecutor):
        self.executor = executor

    def time_evaluator(self, name: str, dev=None, number: int = 1, repeat: int = 1, **_):
        if name != "run":
            raise KilnError(f"time_evaluator: the AOT executor times 'run', not {name!r}")
        ex = self.executor

        def timed():
            from .session import _Timing
            hz = ex.sess.ticks_hz
            return _Timing([sum(ex.run() for _ in range(number)) / number / hz for _ in range(repeat)])
        return timed


def read_aot_config(sess) -> dict:
    """The AOT interface (prefix, inputs, outputs: names, shapes, dtypes) the firmware carries."""
    import json
    import struct

    from .project import CONFIG_FUNC
    from .session import MicroSessionError

    try:
        fn = sess.get_system_lib().get_function(CONFIG_FUNC)
    except MicroSessionError:
        raise KilnError("create_local_aot_executor: the firmware serves no AOT model; generate the project "
                        "from an AOT build (Executor('aot'), Runtime('crt', {'system-lib': True})) or pass the "
                        "relay.build result as the second argument") from None
    head = sess.empty((4,), "uint8")
    fn(head)
    (n,) = struct.unpack("<I", head.numpy().tobytes())
    head.free()
    buf = sess.empty((n + 4,), "uint8")
    fn(buf)
    text = buf.numpy().tobytes()[4:]
    buf.free()
    return json.loads(text)


def create_local_aot_executor(sess, module=None) -> MicroAOTExecutor:
    """The AOT executor of the model the board serves (TVM 0.13: ``create_local_aot_executor(session)``).
    Its interface is read from the firmware; ``module`` (what relay.build returned) may give it instead."""
    config = module.get_executor_config() if module is not None else read_aot_config(sess)
    return MicroAOTExecutor(sess, config)
