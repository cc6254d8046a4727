"""The oneDNN shim, built by the compiler: src/contrib/dnnl_json_runtime.cc compiled for a triple.

``relay.build`` embeds it in every library with oneDNN subgraphs (kiln/runtime/json_dnnl.py
reads it back), so a device runs them with oneDNN's own library and nothing else: no C++
compiler, no kiln sources. It is built once per source version into the kiln cache directory.
Only the host triple can be built here (against this machine's oneDNN headers); for another
triple the shim must be prebuilt where that triple's oneDNN is installed (``make -C src/runtime
CROSS=<prefix> dnnl``) and listed in ``KILN_DNNL_SHIMS``: without one, the build for that triple
is one CompileError saying so, never a library that fails on the device.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from .. import config
from ..errors import CompileError
from ..runtime.elf import describe, elf_arch, host_arch, is_host_triple, normalize_arch
from ..runtime.json_dnnl import INSTALL_HINT

SOURCE = Path(__file__).resolve().parents[2] / "src" / "contrib" / "dnnl_json_runtime.cc"
_built: dict[str, bytes] = {}


def shim_bytes(triple: str = "") -> bytes:
    """The shim shared object for ``triple`` (the host's when empty): compiled here, if not
    cached, for this machine; for another triple the prebuilt one of ``KILN_DNNL_SHIMS``."""
    path = prebuilt_shim(triple) if triple and not is_host_triple(triple) else shim_path()
    data = _built.get(path)
    if data is None:
        data = _built[path] = Path(path).read_bytes()
    return data


def prebuilt_shim(triple: str) -> str:
    """The shim of ``KILN_DNNL_SHIMS`` built for ``triple``'s architecture; CompileError if none."""
    want = normalize_arch(triple)
    listed = [p for p in config.get().dnnl_shims.split(os.pathsep) if p]
    for path in listed:
        if os.path.isfile(path) and elf_arch(path) == want:
            return path
    raise CompileError(
        f"cannot build oneDNN (dnnl) subgraphs for {triple}: kiln compiles the oneDNN shim only for this "
        f"machine ({describe(host_arch())}) and KILN_DNNL_SHIMS lists none for {describe(want)}"
        f"{' (it lists ' + ', '.join(listed) + ')' if listed else ''}; build src/contrib/dnnl_json_runtime.cc "
        f"for {triple} where its oneDNN is installed (make -C src/runtime CROSS=<prefix> dnnl) and add the "
        "libkiln_dnnl.so to KILN_DNNL_SHIMS, or leave dnnl out of this target")


def shim_path() -> str:
    """The cached shim for this machine, compiled on first use."""
    if not SOURCE.is_file():
        raise CompileError(f"the oneDNN runtime shim {SOURCE} is missing; run kiln from its source tree")
    text = SOURCE.read_bytes()
    cache = os.environ.get("KILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kiln")
    if cache in ("off", ""):
        cache = tempfile.gettempdir()
    os.makedirs(cache, exist_ok=True)
    so = os.path.join(cache, f"kiln-dnnl-shim-{hashlib.sha256(text).hexdigest()[:16]}.so")
    if os.path.exists(so):
        return so
    if not any(os.path.exists(os.path.join(d, "dnnl.hpp")) for d in ("/usr/include", "/usr/local/include")):
        raise CompileError(INSTALL_HINT)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
    os.close(fd)
    try:
        proc = subprocess.run(["c++", "-O2", "-std=c++17", "-shared", "-fPIC", str(SOURCE), "-o", tmp, "-ldnnl"],
                              capture_output=True, text=True)
        if proc.returncode:
            raise CompileError(f"{INSTALL_HINT}. Compiling {SOURCE.name} failed:\n{proc.stderr[-2000:]}")
        os.replace(tmp, so)
    except FileNotFoundError:
        raise CompileError(INSTALL_HINT) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return so
