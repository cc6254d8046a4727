"""Small helpers shared by the computes and schedules: constant shapes, padding tuples, knobs."""

from __future__ import annotations

from kiln.errors import ShapeError, TuningError
from kiln.ir.expr import IntImm, PrimExpr
from kiln.tir.simplify import simplify


def const_int(x, what: str = "value") -> int:
    """x as a Python int; raises ShapeError naming ``what`` when x is symbolic."""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, PrimExpr):
        x = simplify(x)
        if isinstance(x, IntImm):
            return int(x.value)
    raise ShapeError(f"{what} must be a constant integer, got {x}")


def const_shape(tensor, what: str = "tensor") -> tuple[int, ...]:
    return tuple(const_int(s, f"{what} dim {i}") for i, s in enumerate(tensor.shape))


def is_const_shape(tensor) -> bool:
    try:
        const_shape(tensor)
        return True
    except ShapeError:
        return False


def check_ndim(op: str, name: str, tensor, ndim: int, layout: str = "") -> None:
    if len(tensor.shape) != ndim:
        hint = f" ({layout})" if layout else ""
        raise ShapeError(f"{op}: input '{name}' has {len(tensor.shape)} dims; expected {ndim}{hint}")


def as_pair(value, op: str, name: str) -> tuple[int, int]:
    """(a, b) from an int or a 1- or 2-sequence."""
    if isinstance(value, (int, IntImm)):
        v = const_int(value, f"{op}: {name}")
        return v, v
    vals = [const_int(v, f"{op}: {name}") for v in value]
    if len(vals) == 1:
        return vals[0], vals[0]
    if len(vals) != 2:
        raise ShapeError(f"{op}: {name} must be an int or 2 ints, got {list(value)}")
    return vals[0], vals[1]


def pad_tuple(padding, kernel: tuple[int, int], op: str = "conv2d") -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from an int, (h, w), (top, left, bottom, right), or 'SAME'/'VALID'."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return 0, 0, 0, 0
        if mode == "SAME":
            ph, pw = kernel[0] - 1, kernel[1] - 1
            return ph // 2, pw // 2, ph - ph // 2, pw - pw // 2
        raise ShapeError(f"{op}: padding {padding!r} is not 'SAME', 'VALID' or integers")
    if isinstance(padding, (int, IntImm)):
        p = const_int(padding, f"{op}: padding")
        return p, p, p, p
    vals = [const_int(p, f"{op}: padding") for p in padding]
    if len(vals) == 1:
        return vals[0], vals[0], vals[0], vals[0]
    if len(vals) == 2:
        return vals[0], vals[1], vals[0], vals[1]
    if len(vals) == 4:
        return vals[0], vals[1], vals[2], vals[3]
    raise ShapeError(f"{op}: padding must have 1, 2 or 4 entries, got {vals}")


def knob(cfg, name: str, default):
    """cfg[name] if the config sets it, else default.

    cfg is any mapping (a plain dict, or later an autotvm ConfigEntity); values may be ints,
    bools, lists, or objects with ``.val`` / ``.size`` (autotvm knob and split entities).
    """
    if cfg is None:
        return default
    try:
        value = cfg[name]
    except (KeyError, IndexError, TypeError, TuningError):  # an autotvm config without this knob
        return default
    if value is None:
        return default
    if hasattr(value, "val"):
        return value.val
    if hasattr(value, "size"):
        return list(value.size)
    return value


def divisor_at_most(n: int, limit: int, prefer=()) -> int:
    """A divisor of n no larger than limit: the first of ``prefer`` that divides, else the largest."""
    for p in prefer:
        if p <= limit and n % p == 0:
            return p
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def with_default(space: dict, default: dict) -> dict:
    """``space`` with each knob's default among its candidates: tuning measures the declared
    default first, and the defaults follow the CPU (vector width, registers) while a candidate
    list may not."""
    out = {}
    for name, values in space.items():
        values = list(values)
        if name in default and default[name] not in values:
            values.append(default[name])
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                values.sort()
        out[name] = values
    return out


def find_stage(out, match, what: str):
    """The first stage feeding ``out`` (out itself included) whose op satisfies ``match``: the
    product under an elementwise epilogue that a schedule tiles. ValueError naming ``what`` if none."""
    stack, seen = [out], set()
    while stack:
        t = stack.pop()
        if id(t.op) in seen:
            continue
        seen.add(id(t.op))
        if match(t.op):
            return t
        stack.extend(getattr(t.op, "input_tensors", []))
    raise ValueError(f"no {what} under {out.name}")


def has_stage(out, match) -> bool:
    """Whether a stage feeding ``out`` (out itself included) satisfies ``match`` (find_stage's test)."""
    try:
        find_stage(out, match, "stage")
    except ValueError:
        return False
    return True
