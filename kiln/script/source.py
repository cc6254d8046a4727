"""Entry points that turn TVMScript source into TIR: text, decorated functions, decorated classes."""

from __future__ import annotations

import ast
import inspect

from kiln.ir.module import IRModule

from .parser import Parser


def from_source(text: str, filename: str = "<script>"):
    """Parse TVMScript text: an ``@I.ir_module`` class gives an IRModule, a lone ``@T.prim_func`` a PrimFunc."""
    parser = Parser(text, filename=filename)
    tree = parser.parse_tree()
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if classes:
        if len(classes) > 1 or funcs:
            raise parser.error(classes[-1] if len(classes) > 1 else funcs[0],
                               "one @I.ir_module class per source text (and no functions beside it)")
        return parser.module(classes[0])
    if len(funcs) == 1:
        return parser.prim_func(funcs[0])
    if funcs:
        return IRModule({f.name: Parser(text, filename=filename).prim_func(f) for f in funcs})
    raise parser.error(tree, "no @T.prim_func function or @I.ir_module class in the source")


def _outer_names(obj) -> dict:
    """The Python names a decorated function can read: its globals, then its closure."""
    names = dict(getattr(obj, "__globals__", {}) or {})
    code = getattr(obj, "__code__", None)
    if code is not None and obj.__closure__:
        for name, cell in zip(code.co_freevars, obj.__closure__):
            try:
                names[name] = cell.cell_contents
            except ValueError:
                pass
    return names


def parse_object(obj, outer: dict | None = None):
    """Parse the source of a decorated function or class (never running its body)."""
    try:
        lines, start = inspect.getsourcelines(obj)
        filename = inspect.getsourcefile(obj) or "<script>"
    except (OSError, TypeError) as exc:
        raise OSError(f"cannot read the source of {getattr(obj, '__name__', obj)} ({exc}); "
                      "use kiln.script.from_source(text) for code without a source file") from None
    source = "".join(lines)
    parser = Parser(source, line_offset=start - 1, outer=outer if outer is not None else _outer_names(obj), filename=filename)
    tree = parser.parse_tree()
    node = tree.body[0]
    if isinstance(node, ast.ClassDef):
        return parser.module(node)
    return parser.prim_func(node)
