"""CompiledModule: objects fresh from a code generator, exportable as .so or .tar.

It links itself into a private shared library on first call when its triple runs here;
for other triples it can only be exported (and run on the device through RPC).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

from ..errors import KilnError
from .elf import describe, host_arch, is_host_triple
from .integrity import seal, seal_build_id
from .module import Module

# get_source() without a format gives the code the module's kind is written in.
_DEFAULT_SOURCE = {"llvm": "ll", "c": "c", "cuda": "cu", "opencl": "cl"}
_SOURCE_ALIASES = {"s": "asm", "asm": "asm", "ll": "ll", "llvm": "ll", "c": "c", "cc": "c",
                   "cu": "cu", "cuda": "cu", "cl": "cl", "opencl": "cl", "ptx": "ptx"}


class CompiledModule(Module):
    """What ``tvm.build`` returns.

    ``objects``: ELF relocatable PIC objects that together define every function in
    ``metadata["functions"]`` and the symbols ``__kiln_metadata``, ``__kiln_num_threads``,
    ``__kiln_last_error`` (docs/abi.md). ``sources``: text by format ("ll", "asm", "c", ...).
    ``triple``: the LLVM target triple the objects are for.
    """

    def __init__(self, objects: list[bytes], metadata: dict, sources: dict[str, str] | None = None,
                 triple: str = "", type_key: str = "llvm"):
        super().__init__()
        if not objects or not all(isinstance(o, (bytes, bytearray)) for o in objects):
            raise TypeError("CompiledModule: objects must be a non-empty list of bytes (ELF objects)")
        self.objects = [bytes(o) for o in objects]
        self.metadata = metadata
        self.sources = dict(sources or {})
        self.triple = triple or metadata.get("triple", "")
        self.type_key = type_key
        self._functions = [f["name"] for f in metadata.get("functions", [])]
        self._library = None
        self._workdir = None
        if metadata.get("device_code"):
            from .device_code import device_modules
            self.imported_modules = device_modules(metadata)

    @property
    def entry_name(self) -> str:
        return self.metadata.get("entry") or (self._functions[0] if self._functions else "")

    def function_names(self) -> list[str]:
        return list(self._functions)

    @property
    def is_host(self) -> bool:
        return is_host_triple(self.triple)

    # -- running here ------------------------------------------------------------------------
    def load(self, so_path: str | None = None):
        """Link into a shared library (``so_path`` or a private temp file) and load it."""
        if self._library is None:
            if not self.is_host:
                raise KilnError(
                    f"this module is built for {self.triple}; this machine is "
                    f"{describe(host_arch())}. export_library it and run it on the device "
                    "through RPC (or build with target 'llvm' to run here)")
            from .library import LibraryModule
            if so_path is None:
                from ..contrib.utils import tempdir
                self._workdir = tempdir()
                so_path = self._workdir.relpath("module.so")
            self.export_library(so_path)
            self._library = LibraryModule(so_path, self.imported_modules or None)
        return self._library

    def _get_function(self, name: str):
        if name not in self._functions:
            return None
        return self.load().get_function(name)

    # -- files -------------------------------------------------------------------------------
    def export_library(self, file_name: str, fcompile=None, **kwargs) -> None:
        """Write ``.so`` (host: cc; other triples: ld.lld; or ``fcompile``) or ``.tar``.

        The file appears complete or not at all: it is written beside the target and renamed.
        """
        file_name = os.fspath(file_name)
        from ..contrib import cc, tar
        from ..contrib.utils import tempdir
        with tempdir() as work:
            files = []
            for i, obj in enumerate(self.objects):
                files.append(work.relpath(f"lib{i}.o"))
                with open(files[-1], "wb") as f:
                    f.write(obj)
            with _atomic_output(file_name) as tmp:
                if file_name.endswith(".tar"):
                    meta = work.relpath("metadata.json")
                    with open(meta, "w") as f:
                        json.dump(self.metadata, f, indent=1)
                    tar.tar(tmp, files + [meta])
                elif fcompile is not None:
                    fcompile(tmp, files, **kwargs)
                elif self.is_host:
                    cc.create_shared(tmp, files, **_with_seal_id(kwargs, "-Wl,--build-id="))
                else:
                    cc.lld_link(tmp, files, self.triple, **_with_seal_id(kwargs, "--build-id="))
                if not os.path.exists(tmp):
                    raise KilnError(f"export_library: {getattr(fcompile, '__name__', fcompile)} "
                                    f"did not write {file_name}")
                if not file_name.endswith(".tar"):
                    seal(tmp)

    def get_source(self, fmt: str = "") -> str:
        key = _SOURCE_ALIASES.get(fmt, fmt) if fmt else _DEFAULT_SOURCE.get(self.type_key, "")
        if not fmt and key not in self.sources and self.sources:
            key = next(iter(self.sources))
        if key not in self.sources:
            have = ", ".join(repr(k) for k in self.sources) or "none"
            raise KilnError(f"get_source: this {self.type_key} module has no {fmt or 'default'} "
                            f"source; formats it has: {have}")
        return self.sources[key]

    def save(self, file_name: str, fmt: str = "") -> None:
        """Save one object (``.o``), a source (``.ll``, ``.s``, ...) or the metadata (``.json``)."""
        file_name = os.fspath(file_name)
        fmt = fmt or file_name.rsplit(".", 1)[-1]
        if fmt in ("o", "obj"):
            if len(self.objects) != 1:
                raise KilnError(f"save: this module has {len(self.objects)} objects; one .o "
                                "cannot hold them, use export_library('x.tar')")
            data = self.objects[0]
        elif fmt == "json":
            data = json.dumps(self.metadata, indent=1).encode()
        else:
            data = self.get_source(fmt).encode()
        with _atomic_output(file_name) as tmp, open(tmp, "wb") as f:
            f.write(data)

    def __repr__(self) -> str:
        return f"CompiledModule({self.type_key}, {self.triple}, functions=[{', '.join(self._functions)}])"


def _with_seal_id(kwargs: dict, flag: str) -> dict:
    """The linker options plus the build id that marks the library as sealed (integrity.py)."""
    return {**kwargs, "options": [*(kwargs.get("options") or []), flag + seal_build_id()]}


@contextlib.contextmanager
def _atomic_output(path: str):
    """A temporary path in ``path``'s directory, renamed to ``path`` only on success."""
    directory, base = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".part", dir=directory)
    os.close(fd)
    os.unlink(tmp)  # tools such as tar and cc create the file themselves
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_tar(path: str):
    """``load_module("x.tar")``: check the triple, relink beside the tar (or in a temp dir), load."""
    from ..contrib import tar
    from ..contrib.utils import tempdir
    from .library import check_metadata
    name = os.path.basename(path)
    with tempdir() as work:
        members = tar.untar(path, work.path)
        if "metadata.json" not in members:
            raise KilnError(f"{name} is not a kiln module archive: it has no metadata.json "
                            "(make it with export_library('x.tar'))")
        try:
            with open(work.relpath("metadata.json"), "rb") as f:
                raw = json.loads(f.read().decode())
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            raise KilnError(f"{name}: metadata.json is not JSON ({type(err).__name__}); the archive is damaged: "
                            "export it again with export_library('x.tar')") from None
        if not isinstance(raw, dict):
            raise KilnError(f"{name}: metadata.json is not a JSON object; the archive is damaged: export it again")
        metadata = check_metadata(raw, name)
        objects = []
        for i in range(len(members)):
            if f"lib{i}.o" not in members:
                break
            with open(work.relpath(f"lib{i}.o"), "rb") as f:
                objects.append(f.read())
    if not objects:
        raise KilnError(f"{name} holds no objects (lib0.o, ...); re-export the module")
    triple = metadata.get("triple", "")
    if not is_host_triple(triple):
        raise KilnError(f"{name} was built for {triple}; this machine is {describe(host_arch())}. "
                        "Load it on a matching device through RPC, or rebuild with target 'llvm'")
    kind = (metadata.get("target") or "llvm").split()[0]
    module = CompiledModule(objects, metadata, {}, triple, type_key=kind)
    beside = os.path.abspath(path) + ".so"
    existed = os.path.exists(beside)
    try:
        return module.load(beside)
    except PermissionError:
        return module.load()
    except BaseException:
        if not existed:  # a failed load leaves nothing behind (linked but refused by dlopen, ...)
            with contextlib.suppress(OSError):
                os.unlink(beside)
        raise
