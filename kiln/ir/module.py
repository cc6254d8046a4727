"""IRModule: a named collection of functions (TIR PrimFuncs, relay Functions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator


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


@dataclass(frozen=True)
class GraphIR:
    """A graph IR above this package (relay) as modules hold it: its expression types, how an
    expression becomes a module's function, and how a function prints as module text. The IR
    registers itself when it is imported (relay/expr.py), so this package never imports it."""

    types: tuple
    to_function: Callable
    to_text: Callable  # (function, name) -> text


_GRAPH_IRS: list[GraphIR] = []


def register_graph_ir(ir: GraphIR) -> None:
    _GRAPH_IRS.append(ir)


def graph_ir_of(value) -> GraphIR | None:
    """The registered graph IR that ``value`` (an expression or function) belongs to, or None."""
    return next((ir for ir in _GRAPH_IRS if isinstance(value, ir.types)), None)


class IRModule:
    """Functions by name. ``mod["main"]``, ``mod["main"] = f``, ``mod.functions``."""

    # The module's text (TVMScript, or relay's text for graph modules): installed by printer.py
    # when kiln.ir loads, as Node.text_form is.
    text_form: Callable[["IRModule"], str]

    def __init__(self, functions: dict | None = None, type_definitions: dict | None = None, attrs: dict | None = None):
        self._functions: dict[str, Any] = {}
        for key, func in (functions or {}).items():
            self[key] = func
        self.type_definitions = dict(type_definitions or {})
        self.attrs = dict(attrs or {})

    @staticmethod
    def from_expr(expr, functions: dict | None = None, type_defs: dict | None = None) -> "IRModule":
        """Wrap a relay expression (or Function) into a module whose "main" is it."""
        ir = graph_ir_of(expr)
        if ir is None:
            raise TypeError(f"IRModule.from_expr takes a relay expression or Function, not {type(expr).__name__}")
        mod = IRModule(functions, type_defs)
        mod["main"] = ir.to_function(expr)
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
        return self.text_form(self)

    astext = script

    def __str__(self) -> str:
        return self.script()

    __repr__ = __str__
