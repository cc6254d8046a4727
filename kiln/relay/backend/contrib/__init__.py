"""External codegens (bring your own codegen): ``relay.ext.<compiler>`` by name.

A codegen turns one partitioned function (``attrs["Compiler"] == name``) into an
``ExternalFunction``: the JSON the runtime module of that compiler runs, plus the constants
lifted out of the function, which the graph passes in as parameters (so weights travel in the
parameter blob like every other weight). One literal table, no registration on import.
"""

from __future__ import annotations

import importlib

from kiln.errors import CompileError

# compiler name -> "module:function" of its codegen.
CODEGENS = {
    "dnnl": "kiln.relay.backend.contrib.dnnl:dnnl_codegen",
    "clml": "kiln.relay.backend.contrib.clml:clml_codegen",
    "cublas": "kiln.relay.backend.contrib.cublas:cublas_codegen",
    "cudnn": "kiln.relay.backend.contrib.cudnn:cudnn_codegen",
}


def get_codegen(name: str):
    """The codegen ``relay.ext.<name>``: ``codegen(func) -> ExternalFunction``."""
    spec = CODEGENS.get(name)
    if spec is None:
        raise CompileError(f"no external codegen 'relay.ext.{name}'; kiln has {sorted(CODEGENS)}")
    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)


def register_codegen(name: str, spec):
    """Add a codegen: ``spec`` is a callable or ``"module:function"``."""
    if callable(spec):
        key = f"_registered_{name}"
        globals()[key] = spec
        spec = f"{__name__}:{key}"
    CODEGENS[name] = spec


def constant_params(factory) -> dict:
    """``{"<symbol>_const_<k>": graph parameter name}`` for the constants of every offloaded
    function of a ``relay.build`` result (or a library loaded from its export): the names to give
    ``set_input`` to change an offloaded layer's weight after the build (docs/byoc.md)."""
    import json

    graph = json.loads(factory.get_graph_json())
    modules = {m.symbol: m for m in factory.get_lib().imported_modules if hasattr(m, "graph")}
    names = {}
    for node in graph["nodes"]:
        module = modules.get(node.get("attrs", {}).get("func_name"))
        if node["op"] != "tvm_op" or module is None:
            continue
        consts = module.graph["constants"]
        refs = node["inputs"][len(module.graph["inputs"]):]
        names.update({c["name"]: graph["nodes"][ref[0]]["name"] for c, ref in zip(consts, refs)})
    return names


def attach_external(lib, external: list, target, mod_name: str = "default"):
    """``lib`` plus the offloaded functions: a CompiledModule whose objects include the
    ``__kiln_external_modules`` data symbol (so .so/.tar exports carry the JSON) and whose
    ``imported_modules`` hold one JSONRuntimeModule per function."""
    from kiln.runtime.compiled import CompiledModule
    from kiln.runtime.json_runtime import SYMBOL, JSONRuntimeModule, to_library

    from ..graph_object import data_object

    if lib is None:  # every op was offloaded: a one-kernel host library still carries the JSON
        lib = _empty_host_module(target, mod_name)
    symbols, shim = [], None
    if any(e.compiler == "dnnl" for e in external):  # the device gets oneDNN's shim inside the library
        from kiln.contrib.dnnl_shim import shim_bytes
        from kiln.runtime.json_dnnl import SHIM_SYMBOL

        shim = shim_bytes(lib.triple)  # this machine's, or the prebuilt one for another triple
        symbols.append((SHIM_SYMBOL, len(shim).to_bytes(8, "little") + shim, 16))
    modules = [JSONRuntimeModule(e.compiler, e.symbol, e.source, shim if e.compiler == "dnnl" else None)
               for e in external]
    extra = data_object(lib.objects[0], [(SYMBOL, to_library(modules).encode() + b"\0", 8)] + symbols)
    out = CompiledModule(lib.objects + [extra], lib.metadata, lib.sources, lib.triple, lib.type_key)
    out.imported_modules = list(lib.imported_modules) + modules
    return out


def _empty_host_module(target, mod_name: str):
    import kiln
    from kiln import te

    a = te.placeholder((1,), name="a")
    b = te.compute((1,), lambda i: a[i], name="b")
    host = target.host if getattr(target, "host", None) is not None else target
    return kiln.build(te.create_schedule(b.op), [a, b], target=host, name=f"tvmgen_{mod_name}__external_host")
