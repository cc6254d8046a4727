"""``T``: the TIR namespace of TVMScript (``from kiln.script import tir as T``).

At run time only ``@T.prim_func`` does anything: it parses the decorated function's source.
The other names exist so that Python can evaluate parameter annotations such as
``A: T.Buffer((128, 128), "float32")`` when it defines the function; their meaning comes from
the parser (kiln/script/parser.py), which never runs the body.
"""

from __future__ import annotations

from kiln.ir.dtype import dtype as _dtype


def prim_func(func=None, **options):
    """Parse a Python function written in TVMScript into a tir.PrimFunc."""
    del options
    if func is None:
        return prim_func
    from .source import parse_object

    return parse_object(func)


class _Annotation:
    """What T.Buffer(...) / T.int32 evaluate to in a signature; the parser reads the source instead."""

    def __init__(self, name: str, *args, **kwargs):
        self.name, self.args, self.kwargs = name, args, kwargs

    def __call__(self, *args, **kwargs):
        return _Annotation(self.name, *args, **kwargs)

    def __getitem__(self, item):
        return _Annotation(self.name, item)

    def __repr__(self) -> str:
        return f"T.{self.name}"


Buffer = _Annotation("Buffer")
handle = _Annotation("handle")


def __getattr__(name: str):
    try:
        _dtype(name)
    except ValueError:
        raise AttributeError(f"kiln.script.tir has no attribute {name!r}; TVMScript names are only "
                             "meaningful inside a @T.prim_func body") from None
    return _Annotation(name)
