"""LibraryModule: a kiln module shared object loaded with dlopen (RTLD_LOCAL)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import tempfile

from .. import config
from ..errors import KilnError
from .elf import check_loadable
from .function import PackedFunc
from .module import Module

ABI_VERSION = 1

# dlopen returns the already-loaded library for a path it has seen, even if the file was
# replaced since; remember what each path held so a changed file is loaded from a fresh copy.
_loaded_files: dict[str, tuple[int, int, int]] = {}
_private_dir: str | None = None


class LibraryModule(Module):
    """A loaded module library. ``mod["add_one"](a, b)``; functions check their arguments."""

    type_key = "library"

    def __init__(self, path: str, device_modules: list | None = None):
        """``device_modules``: the modules for the metadata's device code, when the caller
        already has them (a CompiledModule shares its own, so programs are built once)."""
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        if not os.path.isfile(self.path):
            raise KilnError(f"module file {path} does not exist")
        check_loadable(self.path)
        self._lib = _dlopen(self.path)
        self.metadata = _read_metadata(self._lib, self.path)
        self._functions = {f["name"]: f for f in self.metadata.get("functions", [])}
        self._device_type = int(self.metadata.get("device_type", 1))
        self._cache: dict[str, PackedFunc] = {}
        self._error_address = _symbol_address(self._lib, "__kiln_last_error")
        self.run_list_address = _symbol_address(self._lib, "__kiln_run_list")  # function.CallList
        self.set_num_threads(config.get().num_threads)
        if self.metadata.get("device_code"):
            from . import device_code
            if device_modules is None:
                device_modules = device_code.device_modules(self.metadata)
            self.imported_modules = list(device_modules)
            device_code.install_launch_hook(self._lib, self.imported_modules[0],
                                            os.path.basename(self.path))
        # Subgraphs offloaded to external compilers (json_runtime.py), unless the caller passed them.
        from .json_runtime import read_symbol
        have = {getattr(m, "symbol", None) for m in self.imported_modules}
        self.imported_modules += [m for m in read_symbol(self._lib) if m.symbol not in have]
        # A library exported by relay.build also carries its graph: lib["default"](dev).
        from .graph_factory import read_embedded
        embedded = read_embedded(self, _symbol_address)
        self._graph_functions = embedded.functions() if embedded else {}

    @property
    def entry_name(self) -> str:
        return self.metadata.get("entry") or next(iter(self._functions), "")

    def function_names(self) -> list[str]:
        return list(self._functions) + list(self._graph_functions)

    def set_num_threads(self, n: int) -> None:
        """Threads for the module's parallel loops; 0 means one per online CPU."""
        address = _symbol_address(self._lib, "__kiln_num_threads")
        if address is not None:
            ctypes.c_int32.from_address(address).value = int(n)

    def _last_error(self) -> str:
        if self._error_address is None:
            return ""
        return ctypes.string_at(self._error_address).decode("utf-8", "replace")

    def _get_function(self, name: str):
        if name in self._graph_functions:
            return self._graph_functions[name]
        func = self._cache.get(name)
        if func is None and name in self._functions:
            address = _symbol_address(self._lib, name)
            if address is None:
                raise KilnError(f"{os.path.basename(self.path)}: metadata lists function "
                                f"{name!r} but the library does not export it; rebuild it")
            func = PackedFunc(name, address, self._functions[name], self._device_type,
                              self._last_error, module=self)
            self._cache[name] = func
        return func

    def get_source(self, fmt: str = "") -> str:
        if fmt in ("", "json", "metadata"):
            return json.dumps(self.metadata, indent=2)
        return super().get_source(fmt)

    def __repr__(self) -> str:
        return f"LibraryModule({self.path!r}, functions=[{', '.join(self._functions)}])"


def _dlopen(path: str) -> ctypes.CDLL:
    st = os.stat(path)
    identity = (st.st_dev, st.st_ino, st.st_mtime_ns)
    target = path
    if _loaded_files.setdefault(path, identity) != identity:
        target = _private_copy(path)
    try:
        return ctypes.CDLL(target, mode=os.RTLD_LOCAL)
    except OSError as err:
        raise KilnError(f"cannot load {path}: {err}. The library may need a newer libc or "
                        "missing shared libraries; check it with 'ldd'") from None


def _private_copy(path: str) -> str:
    global _private_dir
    if _private_dir is None:
        _private_dir = tempfile.mkdtemp(prefix="kiln-dlopen-")
        import atexit
        atexit.register(shutil.rmtree, _private_dir, True)
    fd, copy = tempfile.mkstemp(suffix="-" + os.path.basename(path), dir=_private_dir)
    os.close(fd)
    shutil.copyfile(path, copy)
    return copy


def _symbol_address(lib: ctypes.CDLL, name: str) -> int | None:
    try:
        return ctypes.addressof(ctypes.c_char.in_dll(lib, name))
    except ValueError:
        return None


def _read_metadata(lib: ctypes.CDLL, path: str) -> dict:
    name = os.path.basename(path)
    address = _symbol_address(lib, "__kiln_metadata")
    if address is None:
        raise KilnError(f"{name} is not a kiln module: it has no __kiln_metadata symbol "
                        "(export modules with Module.export_library)")
    try:
        metadata = json.loads(ctypes.string_at(address).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise KilnError(f"{name}: its __kiln_metadata is not valid JSON ({err}); rebuild it") from None
    return check_metadata(metadata, name)


def check_metadata(metadata: dict, name: str) -> dict:
    version = metadata.get("abi_version") if isinstance(metadata, dict) else None
    if version != ABI_VERSION:
        raise KilnError(f"{name} uses kiln ABI version {version!r}; this runtime speaks version "
                        f"{ABI_VERSION}. Rebuild the module with this kiln version "
                        f"({metadata.get('kiln_version', '?') if isinstance(metadata, dict) else '?'} built it)")
    return metadata
