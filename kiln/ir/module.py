"""IRModule: a named collection of functions (TIR PrimFuncs, relay Functions)."""

from __future__ import annotations

from typing import Any, Iterator


class GlobalVar:
    """The name of a function inside an IRModule."""

    __slots__ = ("name_hint",)

    def __init__(self, name_hint: str):
        self.name_hint = name_hint

    def __repr__(self) -> str:
        return f"@{self.name_hint}"

    def __eq__(self, other) -> bool:
        return isinstance(other, GlobalVar) and other.name_hint == self.name_hint

    def __hash__(self) -> int:
        return hash(("GlobalVar", self.name_hint))


class IRModule:
    """Functions by name. ``mod["main"]``, ``mod["main"] = f``, ``mod.functions``."""

    def __init__(self, functions: dict | None = None, type_definitions: dict | None = None, attrs: dict | None = None):
        self._functions: dict[str, Any] = {}
        for key, func in (functions or {}).items():
            self[key] = func
        self.type_definitions = dict(type_definitions or {})
        self.attrs = dict(attrs or {})

    @staticmethod
    def from_expr(expr, functions: dict | None = None, type_defs: dict | None = None) -> "IRModule":
        """Wrap a relay expression (or Function) into a module whose "main" is it."""
        from kiln.relay.expr import as_function  # relay sits above ir; import on use

        mod = IRModule(functions, type_defs)
        mod["main"] = as_function(expr)
        return mod

    @staticmethod
    def _name(key) -> str:
        if isinstance(key, GlobalVar):
            return key.name_hint
        if isinstance(key, str):
            return key
        raise TypeError(f"IRModule keys are names or GlobalVars, got {type(key).__name__}")

    def __getitem__(self, key):
        name = self._name(key)
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(f"IRModule has no function {name!r}; it has {sorted(self._functions)}") from None

    def __setitem__(self, key, func) -> None:
        self._functions[self._name(key)] = func

    def __contains__(self, key) -> bool:
        return self._name(key) in self._functions

    def __iter__(self) -> Iterator[str]:
        return iter(self._functions)

    def __len__(self) -> int:
        return len(self._functions)

    @property
    def functions(self) -> dict[GlobalVar, Any]:
        return {GlobalVar(k): v for k, v in self._functions.items()}

    def items(self):
        return self._functions.items()

    def get_global_var(self, name: str) -> GlobalVar:
        if name not in self._functions:
            raise KeyError(f"IRModule has no function {name!r}")
        return GlobalVar(name)

    def get_global_vars(self) -> list[GlobalVar]:
        return [GlobalVar(k) for k in self._functions]

    def update(self, other: "IRModule") -> None:
        self._functions.update(other._functions)

    def with_functions(self, functions: dict[str, Any]) -> "IRModule":
        """A new module with the same attributes and the given functions."""
        return IRModule(functions, self.type_definitions, self.attrs)

    def show(self) -> None:
        """Print the module as TVMScript (TVM's ``mod.show()``)."""
        print(self.script())

    def script(self) -> str:
        from kiln.ir.printer import module_to_text

        return module_to_text(self)

    astext = script

    def __str__(self) -> str:
        return self.script()

    __repr__ = __str__
