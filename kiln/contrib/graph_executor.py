"""``from kiln.contrib import graph_executor``: run a model built by ``relay.build``.

>>> lib = relay.build(mod, target="llvm", params=params)
>>> m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
>>> m.set_input("data", x); m.run(); y = m.get_output(0).numpy()

The same calls work on a remote library: ``rlib = remote.load_module("lib.so")`` and
``GraphModule(rlib["default"](remote.cpu()))`` run the model on the RPC server, and
``m.module.time_evaluator("run", dev, number, repeat)()`` times it there.
"""

from __future__ import annotations

from kiln.runtime.graph_executor import GraphExecutor


def create(graph_json_str: str, libmod, device):
    """A GraphModule over ``libmod``'s kernels, local or remote (then the executor lives on the server).

    ``device`` may be a list (TVM's heterogeneous form); kiln runs a graph on one device.
    """
    if isinstance(device, (list, tuple)):
        if len(device) != 1:
            raise ValueError(f"graph_executor.create: kiln runs a graph on one device, got {len(device)}")
        device = device[0]
    if not isinstance(graph_json_str, str):
        raise TypeError("graph_executor.create: pass the graph JSON text (lib.get_graph_json())")
    session = getattr(libmod, "_session", None)
    if session is not None:  # a RemoteModule: create the executor next to it, on the server
        if getattr(device, "session", None) is not session:
            raise ValueError(f"graph_executor.create: the library is remote ({session.peer}) but {device} is "
                             "not a device of that session; use remote.cpu()")
        fcreate = session.get_function("tvm.graph_executor.create")
        return GraphModule(fcreate(graph_json_str, libmod, device))
    return GraphModule(GraphExecutor(graph_json_str, libmod, device))


class GraphModule:
    """Wrapper over a graph executor module (local ``GraphExecutor`` or a remote one).

    ``module`` is the wrapped module; ``module.time_evaluator("run", dev, number, repeat)``
    times whole-graph runs where the executor lives.
    """

    def __init__(self, module):
        if hasattr(module, "get_graph_json") and not hasattr(module, "get_function"):
            raise TypeError("GraphModule takes an executor module: use GraphModule(lib['default'](dev))")
        self.module = module
        self._set_input = module["set_input"]
        self._run = module["run"]
        self._get_output = module["get_output"]
        self._get_input = module["get_input"]
        self._get_num_outputs = module["get_num_outputs"]
        self._get_num_inputs = module["get_num_inputs"]
        self._get_input_index = module["get_input_index"]
        self._load_params = module["load_params"]
        self._share_params = module["share_params"]

    def set_input(self, key=None, value=None, **params):
        """``set_input("data", x)``, ``set_input(0, x)`` or ``set_input(**params)``.

        Keyword values whose names are not inputs are skipped: parameters given to relay.build
        were folded into the model and have no input any more.
        """
        if key is not None:
            self._set_input(key, value)
        for name, val in params.items():
            if self._get_input_index(name) >= 0:
                self._set_input(name, val)

    def run(self, **input_dict):
        if input_dict:
            self.set_input(**input_dict)
        self._run()

    def get_output(self, index: int, out=None):
        """Output ``index`` as an array of the executor (overwritten by the next run); with ``out``,
        copied into it."""
        arr = self._get_output(index)
        if out is not None:
            out.copyfrom(arr.numpy())
            return out
        return arr

    def get_input(self, index, out=None):
        arr = self._get_input(index)
        if out is not None:
            out.copyfrom(arr.numpy())
            return out
        return arr

    def get_input_index(self, name: str) -> int:
        return self._get_input_index(name)

    def get_num_outputs(self) -> int:
        return self._get_num_outputs()

    def get_num_inputs(self) -> int:
        return self._get_num_inputs()

    def load_params(self, params_bytes):
        """Load a blob written by ``relay.save_param_dict`` (``mod.params``)."""
        if getattr(self.module, "_session", None) is None:
            self._load_params(bytes(params_bytes))
            return
        # A remote executor: one set_input per parameter, each array streamed into the
        # executor's input on the server, so no message holds the whole blob (it may be far
        # larger than a frame) and the server never keeps the blob next to the arrays.
        from kiln.runtime.params import load_params
        names = set(self.module["get_input_names"]())
        for name, value in load_params(params_bytes, copy=False).items():
            if name in names:
                self._set_input(name, value)

    def share_params(self, other: "GraphModule", params_bytes):
        self._share_params(other.module, bytes(params_bytes))

    def benchmark(self, device, func_name: str = "run", repeat: int = 5, number: int = 5, min_repeat_ms=None,
                  end_to_end: bool = False, **kwargs):
        """Time ``func_name`` where the executor lives; a ProfileResult in seconds per run."""
        del end_to_end, kwargs
        return self.module.time_evaluator(func_name, device, number=number, repeat=repeat,
                                          min_repeat_ms=min_repeat_ms or 0)()

    def __getitem__(self, key):
        return self.module[key]
