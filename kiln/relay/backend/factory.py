"""What ``relay.build`` returns: the kernels, the graph and the parameters, together.

>>> lib = relay.build(mod, target="llvm", params=params)
>>> lib.export_library("deploy.so")                    # kernels + graph + params in one file
>>> m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
>>> graph, kernels, params = relay.build(mod, "llvm")   # the older three-value form
"""

from __future__ import annotations

import numpy as np

from kiln.errors import KilnError
from kiln.runtime.params import save_params

from .graph_object import data_object, graph_symbols


class GraphExecutorFactoryModule:
    """``get_graph_json()``, ``get_params()``, ``get_lib()``, ``lib[mod_name](dev)``, ``export_library``."""

    def __init__(self, ir_mod, target, graph_json: str, lib, params: dict, mod_name: str = "default"):
        self.ir_mod = ir_mod
        self.target = target
        self.graph_json = graph_json
        self.lib = lib
        self.params = params  # name -> numpy array
        self.libmod_name = mod_name
        self.kernel_workloads: dict = {}  # kernel name -> tunable workload (relay.build fills it)

    # -- the seed API --------------------------------------------------------------------------
    def get_graph_json(self) -> str:
        return self.graph_json

    def get_params(self) -> dict:
        """``{name: NDArray}``: the constants of the model, as graph inputs ``p0, p1, ...``."""
        from kiln import nd
        return {k: nd.array(v) for k, v in self.params.items()}

    def get_lib(self):
        """The kernel module (a CompiledModule): ``export_library`` it for the three-file form."""
        return self.lib

    def get_executor_config(self) -> str:
        return self.graph_json

    @property
    def module(self):
        return self

    def __getitem__(self, name: str):
        if name == self.libmod_name:
            return self._create
        if name == "get_graph_json":
            return self.get_graph_json
        if name == "get_params":
            return self.get_params
        if name == "get_lib":
            return self.get_lib
        return self.lib[name]

    def _create(self, dev):
        """The graph executor on ``dev`` (a local device), parameters loaded."""
        from kiln.runtime.graph_executor import GraphExecutor

        if getattr(dev, "session", None) is not None:
            raise KilnError(f"{self.libmod_name}({dev}): a remote device needs the library on the server: "
                            "lib.export_library('lib.so'); remote.upload('lib.so'); "
                            "remote.load_module('lib.so')['default'](dev)")
        ex = GraphExecutor(self.graph_json, self.lib, dev)
        for name, value in self.params.items():
            ex.set_input(name, value)
        return ex

    def __iter__(self):
        """``graph_json, lib, params = relay.build(...)`` (TVM's pre-0.8 form)."""
        return iter((self.graph_json, self.lib, self.get_params()))

    # -- files ---------------------------------------------------------------------------------
    def export_library(self, file_name, fcompile=None, **kwargs) -> None:
        """One ``.so``/``.tar`` with the kernels, the graph JSON and the parameters linked in;
        ``tvm.runtime.load_module(file)["default"](dev)`` runs it."""
        from kiln.runtime.compiled import CompiledModule

        if self.lib is None:
            raise KilnError("export_library: the model has no kernels (it only forwards its inputs)")
        blob = save_params(self.params)
        extra = data_object(self.lib.objects[0], graph_symbols(self.libmod_name, self.graph_json, blob))
        bundle = CompiledModule(self.lib.objects + [extra], self.lib.metadata, self.lib.sources,
                                self.lib.triple, self.lib.type_key)
        bundle.export_library(file_name, fcompile, **kwargs)

    def save_params(self) -> bytes:
        """The parameter blob (``mod.params``), same as ``relay.save_param_dict(lib.get_params())``."""
        return save_params(self.params)

    def __repr__(self) -> str:
        size = sum(np.asarray(v).nbytes for v in self.params.values())
        return (f"GraphExecutorFactoryModule({self.libmod_name}, {self.target}, "
                f"{len(self.lib.function_names()) if self.lib else 0} kernels, {len(self.params)} params, "
                f"{size / 1e6:.1f} MB)")
