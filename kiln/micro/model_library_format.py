"""Model Library Format: a relay.build result as a tar a firmware build can consume.

    codegen/host/src/<mod>_lib0.c    the kernels (C target)
    codegen/host/src/<mod>_lib1.c    the AOT run function, arena and constants (AOT only)
    codegen/host/include/tvmgen_<mod>.h
    executor-config/graph/<mod>.graph  the graph JSON (graph executor; kept for AOT as a record)
    parameters/<mod>.params          the constants (kiln param_dict bytes)
    src/relay.txt                    the optimized relay module
    metadata.json                    version, target, executor, memory (arena, constants, I/O)
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time

from kiln.errors import KilnError

MLF_VERSION = 1


def _add(tar: tarfile.TarFile, name: str, data) -> None:
    data = data.encode() if isinstance(data, str) else bytes(data)
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


def export_model_library_format(mod, file_name) -> str:
    """Write ``mod`` (what relay.build returned for target 'c') to the tar ``file_name``; returns it."""
    from kiln.relay.backend.aot import AOTExecutorFactoryModule
    from kiln.relay.param_dict import save_param_dict

    file_name = os.fspath(file_name)
    lib = mod.get_lib()
    if lib is None or "c" not in getattr(lib, "sources", {}):
        raise KilnError("export_model_library_format: the module has no C source; build it with target 'c'")
    name = mod.libmod_name
    aot = isinstance(mod, AOTExecutorFactoryModule)
    files = {}
    if aot:
        for fname, text in mod.sources.items():
            files[f"codegen/host/src/{fname}"] = text
        for fname, text in mod.headers.items():
            files[f"codegen/host/include/{fname}"] = text
    else:
        files[f"codegen/host/src/{name}_lib0.c"] = lib.get_source("c")
    files[f"executor-config/graph/{name}.graph"] = mod.get_graph_json()
    files[f"parameters/{name}.params"] = save_param_dict(mod.get_params())
    files["src/relay.txt"] = str(mod.ir_mod)
    from kiln import __version__
    meta = {"version": MLF_VERSION, "kiln_version": __version__, "model_name": name, "target": str(mod.target),
            "executors": ["aot" if aot else "graph"],
            "style": "full-model", "kernels": [f["name"] for f in lib.metadata["functions"]]}
    if aot:
        meta["memory"] = mod.get_executor_config()
        meta["runtime"] = mod.runtime.name
    files["metadata.json"] = json.dumps(meta, indent=2)
    tmp = file_name + ".part"
    try:
        with tarfile.open(tmp, "w") as tar:
            for path, data in files.items():
                _add(tar, path, data)
        os.replace(tmp, file_name)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return file_name
