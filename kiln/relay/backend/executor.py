"""``Executor`` and ``Runtime``: how relay.build's output runs (seed API: tvm.relay.backend).

    Executor("graph")                                  graph JSON run by a graph executor (default)
    Executor("aot", {"interface-api": "c", "unpacked-api": True})
                                                       one C function that calls every kernel in
                                                       order over a statically planned arena (aot.py)
    Runtime("cpp") | Runtime("crt", {"system-lib": True})
                                                       the host runtime, or the bare-metal C runtime
"""

from __future__ import annotations

from kiln.errors import CompileError

_EXECUTORS = {
    "graph": {"link-params": bool},
    "aot": {"interface-api": str, "unpacked-api": bool, "workspace-byte-alignment": int,
            "constant-byte-alignment": int, "link-params": bool},
}
_RUNTIMES = {"cpp": {"system-lib": bool}, "crt": {"system-lib": bool}}
_DEFAULTS = {"aot": {"interface-api": "packed", "unpacked-api": False, "workspace-byte-alignment": 16,
                     "constant-byte-alignment": 16, "link-params": True},
             "graph": {"link-params": False}}


def _checked(kind: str, table: dict, name: str, options: dict | None) -> dict:
    if name not in table:
        raise CompileError(f"{kind} {name!r} is unknown; known: {', '.join(table)}")
    out = dict(_DEFAULTS.get(name, {}) if kind == "executor" else {})
    for key, value in (options or {}).items():
        want = table[name].get(key)
        if want is None:
            raise CompileError(f"{kind} {name!r} has no option {key!r}; options: {', '.join(table[name])}")
        if want is bool and isinstance(value, int):
            value = bool(value)
        if not isinstance(value, want):
            raise CompileError(f"{kind} {name!r} option {key!r} must be a {want.__name__}, got {value!r}")
        out[key] = value
    return out


class Executor:
    """``Executor("aot", {"interface-api": "c", "unpacked-api": True})``; ``executor["unpacked-api"]``."""

    def __init__(self, name: str = "graph", options: dict | None = None):
        self.name = name
        self.attrs = _checked("executor", _EXECUTORS, name, options)
        if name == "aot":
            if self.attrs["interface-api"] not in ("c", "packed"):
                raise CompileError("executor 'aot': interface-api is 'c' or 'packed'")
            if self.attrs["workspace-byte-alignment"] & (self.attrs["workspace-byte-alignment"] - 1):
                raise CompileError("executor 'aot': workspace-byte-alignment must be a power of two")

    def __getitem__(self, key: str):
        return self.attrs[key]

    def get(self, key: str, default=None):
        return self.attrs.get(key, default)

    def __repr__(self) -> str:
        return f"Executor({self.name!r}, {self.attrs})"


class Runtime:
    """``Runtime("crt")``: code for the bare-metal C runtime (src/crt); ``Runtime("cpp")``: the host's."""

    def __init__(self, name: str = "cpp", options: dict | None = None):
        self.name = name
        self.attrs = _checked("runtime", _RUNTIMES, name, options)

    def __getitem__(self, key: str):
        return self.attrs[key]

    def get(self, key: str, default=None):
        return self.attrs.get(key, default)

    def __repr__(self) -> str:
        return f"Runtime({self.name!r}, {self.attrs})"
