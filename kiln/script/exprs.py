"""Expressions of TVMScript: Python expression syntax (``ast``) to TIR expression nodes.

Nodes are built as written, never folded, so text printed by kiln.ir.printer parses back to
the same tree: ``2 * 64`` is a Mul of two constants, ``T.Cast("float32", x)`` a Cast even when
x is a constant. A bare Python number takes the dtype of the expression it meets (``x + 1`` with
an int64 x adds an int64 1), as in TVM.
"""

from __future__ import annotations

import ast
import difflib
import types

from kiln.errors import ScriptError
from kiln.ir import expr as E
from kiln.ir.dtype import BOOL_T, dtype as _dtype
from kiln.ir.printer import INTRINSICS, load_dtype, shorthand_dtype
from kiln.ir.stmt import Buffer

_BINOPS = {ast.Add: E.Add, ast.Sub: E.Sub, ast.Mult: E.Mul, ast.Div: E.Div, ast.FloorDiv: E.FloorDiv,
           ast.Mod: E.FloorMod}
_BITOPS = {ast.BitAnd: "tir.bitwise_and", ast.BitOr: "tir.bitwise_or", ast.BitXor: "tir.bitwise_xor",
           ast.LShift: "tir.shift_left", ast.RShift: "tir.shift_right"}
_CMPOPS = {ast.Eq: E.EQ, ast.NotEq: E.NE, ast.Lt: E.LT, ast.LtE: E.LE, ast.Gt: E.GT, ast.GtE: E.GE}
_TWO = {"max": E.Max, "min": E.Min, "truncmod": E.Mod, "truncdiv": E.Div, "floordiv": E.FloorDiv,
        "floormod": E.FloorMod, "Max": E.Max, "Min": E.Min}

# Every name the parser knows after ``T.`` (for "did you mean" hints).
STATEMENT_NAMES = {
    "prim_func", "Buffer", "handle", "match_buffer", "func_attr", "grid", "serial", "parallel", "vectorized",
    "unroll", "thread_binding", "allocate", "alloc_buffer", "launch_thread", "attr", "evaluate", "block",
    "init", "reads", "writes", "where", "axis", "block_attr", "LetStmt", "Assert",
}
EXPR_NAMES = {
    "Cast", "Select", "Ramp", "Broadcast", "Let", "call_intrin", "call_extern", "call_pure_extern",
    "reinterpret", "Range", "abs", "cast", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64", "float16", "float32", "float64",
} | set(_TWO) | INTRINSICS


def is_dtype_name(name: str) -> bool:
    try:
        _dtype(name)
    except ValueError:
        return False
    return True


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _short_int(value: int) -> str:
    text = str(value)
    return text if len(text) <= 30 else f"{text[:12]}...({len(text)} digits)"


class ExprParser:
    """Evaluates expression nodes in the parser's scopes. Subclassed by the statement parser."""

    lines: list[str]
    line_offset: int
    col_offset: int

    # Errors ------------------------------------------------------------------------------
    def error(self, node, message: str):
        lineno = getattr(node, "lineno", 0) or 0  # a SyntaxError may carry None
        col = getattr(node, "col_offset", 0) or 0
        text = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
        return ScriptError(message, lineno + self.line_offset, col + 1 + self.col_offset,
                           " " * self.col_offset + text, self.filename)

    def text(self, node) -> str:
        return ast.get_source_segment(self.source, node) or ast.unparse(node)

    # Names -------------------------------------------------------------------------------
    def lookup(self, node: ast.Name):
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        if node.id in self.outer:
            return self.outer[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        if node.id == "range":
            return _Builtin("serial")
        if node.id in ("frozenset", "set"):
            return frozenset
        known = [n for s in self.scopes for n in s]
        hint = difflib.get_close_matches(node.id, known, 1)
        raise self.error(node, f"{node.id}: unknown name" + (f" (did you mean {hint[0]}?)" if hint else ""))

    def t_name(self, node) -> str | None:
        """'serial' for ``T.serial``, 'axis.spatial' for ``T.axis.spatial``; None if not under T."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or not parts:
            return None
        parts.reverse()
        if node.id in self.t_aliases and not any(node.id in s for s in self.scopes):
            return ".".join(parts)
        # A path through Python modules, such as tvm.script.tir.Buffer.
        obj = self.outer.get(node.id)
        while isinstance(obj, types.ModuleType) and parts:
            if obj.__name__ == "kiln.script.tir":
                return ".".join(parts)
            obj = getattr(obj, parts.pop(0), None)
        return None

    def unknown_t(self, node, name: str):
        known = sorted(STATEMENT_NAMES | EXPR_NAMES | {"axis.spatial", "axis.reduce", "axis.remap", "axis.S", "axis.R"})
        hint = difflib.get_close_matches(name, known, 1)
        alias = next(iter(self.t_aliases))
        more = f" (did you mean {alias}.{hint[0]}?)" if hint else ""
        return self.error(node, f"{alias}.{name}: unknown name in {alias}{more}")

    # Values ------------------------------------------------------------------------------
    def to_expr(self, value, node, like=None) -> E.PrimExpr:
        if isinstance(value, Buffer):
            raise self.error(node, f"{self.text(node)}: a buffer is not a value; index it (A[i]) or use A.data")
        try:
            out = E._to_expr(value, like) if like is not None else E.convert(value)
        except TypeError as exc:
            raise self.error(node, f"{self.text(node)}: not an expression ({exc})") from None
        if not isinstance(out, E.PrimExpr):
            raise self.error(node, f"{self.text(node)}: expected an expression, got {type(value).__name__}")
        return out

    def expr(self, node) -> E.PrimExpr:
        value = self.ev(node)
        if isinstance(value, (bool, int, float, str)) or isinstance(value, E.PrimExpr):
            return self.to_expr(value, node)
        if isinstance(value, E.IterVar):
            return value.var
        raise self.error(node, f"{self.text(node)}: expected an expression, got {type(value).__name__}")

    def dtype_arg(self, node):
        value = self.ev(node)
        if isinstance(value, _DTypeName):
            return value.dtype
        if isinstance(value, E.StringImm):
            value = value.value
        if not isinstance(value, str):
            raise self.error(node, f"{self.text(node)}: expected a dtype such as \"float32\"")
        try:
            return _dtype(value)
        except ValueError as exc:
            raise self.error(node, str(exc)) from None

    def ev(self, node):
        method = getattr(self, "ev_" + type(node).__name__, None)
        if method is None:
            raise self.error(node, f"{self.text(node)}: {type(node).__name__} is not supported in TVMScript")
        return method(node)

    def ev_Constant(self, node):
        value = node.value
        # 2**63 is allowed as a literal only under a minus sign (ev_UnaryOp): -9223372036854775808.
        if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
            raise self.error(node, f"integer literal {_short_int(value)} does not fit in 64 bits; "
                                   "write a value in int64's range (or split the computation)")
        return value

    def ev_Name(self, node):
        return self.lookup(node)

    def ev_Tuple(self, node):
        return tuple(self.ev(e) for e in node.elts)

    def ev_List(self, node):
        return [self.ev(e) for e in node.elts]

    def ev_Dict(self, node):
        return {self.ev(k): self.ev(v) for k, v in zip(node.keys, node.values)}

    def ev_Attribute(self, node):
        name = self.t_name(node)
        if name is not None:
            if is_dtype_name(name):
                return _DTypeName(_dtype(name))
            if name in STATEMENT_NAMES or name in EXPR_NAMES or name.startswith("axis."):
                return _Builtin(name)
            raise self.unknown_t(node, name)
        base = self.ev(node.value)
        if isinstance(base, Buffer) and node.attr in ("data", "shape", "dtype", "strides", "elem_offset", "scope"):
            return getattr(base, node.attr)
        if isinstance(base, Buffer) and node.attr == "vload":
            return _BufferMethod(base)
        raise self.error(node, f"{self.text(node)}: unknown attribute {node.attr!r}")

    def ev_UnaryOp(self, node):
        if (isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
                and type(node.operand.value) is int and node.operand.value == -_INT64_MIN):
            return _INT64_MIN
        value = self.ev(node.operand)
        if isinstance(node.op, ast.USub) and isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
        if isinstance(node.op, ast.UAdd):
            return value
        x = self.expr(node.operand) if not isinstance(value, E.PrimExpr) else value
        if isinstance(node.op, ast.USub):
            return -x
        if isinstance(node.op, ast.Not):
            return E.Not(x, BOOL_T.with_lanes(x.dtype.lanes))
        return ~x

    def binary(self, cls, left, right, node):
        lnum = isinstance(left, (int, float)) and not isinstance(left, bool)
        rnum = isinstance(right, (int, float)) and not isinstance(right, bool)
        if lnum and rnum:
            left, right = E.const(left), E.const(right)
        try:
            a, b = E._match(self._operand(left, node), self._operand(right, node))
            if issubclass(cls, E.CmpOp):
                return cls(a, b, BOOL_T.with_lanes(a.dtype.lanes))
            if cls in (E.Div, E.FloorDiv, E.FloorMod, E.Mod) and isinstance(b, E.IntImm) and b.value == 0:
                raise ZeroDivisionError("division by the constant zero")
            return cls(a, b, a.dtype)
        except (TypeError, ZeroDivisionError) as exc:
            raise self.error(node, f"{self.text(node)}: {exc}") from None

    def _operand(self, value, node):
        if isinstance(value, E.IterVar):
            return value.var
        if isinstance(value, (E.PrimExpr, int, float, bool)):
            return value
        raise self.error(node, f"{self.text(node)}: {type(value).__name__} cannot be an operand")

    def ev_BinOp(self, node):
        left, right = self.ev(node.left), self.ev(node.right)
        cls = _BINOPS.get(type(node.op))
        if cls is not None:
            return self.binary(cls, left, right, node)
        op = _BITOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"{self.text(node)}: operator {type(node.op).__name__} is not supported")
        a, b = E._match(self._operand(left, node), self._operand(right, node))
        return E.Call(a.dtype, op, (a, b))

    def ev_Compare(self, node):
        terms = [self.ev(node.left)] + [self.ev(c) for c in node.comparators]
        out = None
        for op, a, b in zip(node.ops, terms, terms[1:]):
            cls = _CMPOPS.get(type(op))
            if cls is None:
                raise self.error(node, f"{self.text(node)}: comparison {type(op).__name__} is not supported")
            cmp = self.binary(cls, a, b, node)
            out = cmp if out is None else E.And(out, cmp, out.dtype)
        return out

    def ev_BoolOp(self, node):
        cls = E.And if isinstance(node.op, ast.And) else E.Or
        values = [self.expr(v) for v in node.values]
        out = values[0]
        for v in values[1:]:
            if not (out.dtype.is_bool and v.dtype.is_bool):
                raise self.error(node, f"{self.text(node)}: 'and'/'or' need bool operands, got {out.dtype} and {v.dtype}")
            out = cls(out, v, out.dtype)
        return out

    def ev_Subscript(self, node):
        base = self.ev(node.value)
        if isinstance(base, (list, tuple)):
            return base[self.ev(node.slice)]
        if not isinstance(base, Buffer):
            raise self.error(node, f"{self.text(node.value)} is not a buffer and cannot be indexed")
        indices = self.indices(base, node)
        return E.BufferLoad(base, indices, load_dtype(base, indices))

    def indices(self, buf: Buffer, node) -> tuple:
        sl = node.slice
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if any(isinstance(i, ast.Slice) for i in items):
            raise self.error(node, f"{self.text(node)}: slices are not supported; index one element")
        out = tuple(self.expr(i) for i in items)
        if len(out) != len(buf.shape):
            raise self.error(node, f"{self.text(node)}: buffer {self.text(node.value)} has {len(buf.shape)} "
                                   f"dimension(s) {tuple(str(s) for s in buf.shape)}, indexed with {len(out)}")
        for i, item in zip(out, items):
            if not i.dtype.element_of().is_integer or i.dtype.is_bool:
                raise self.error(item, f"{self.text(item)}: index has dtype {i.dtype}; indices must be integers")
        return out

    # Calls -------------------------------------------------------------------------------
    def ev_Call(self, node):
        func = self.ev(node.func)
        if isinstance(func, _BufferMethod):
            args = [self.ev(a) for a in node.args]
            if len(args) != 2:
                raise self.error(node, f"{self.text(node)}: vload takes ([indices], dtype)")
            return E.BufferLoad(func.buffer, tuple(self.to_expr(i, node) for i in args[0]), self.dtype_arg(node.args[1]))
        if isinstance(func, _DTypeName):
            return self.dtype_call(func.dtype, node)
        if func is frozenset:
            return frozenset(*self._args(node))
        if not isinstance(func, _Builtin):
            raise self.error(node, f"{self.text(node.func)}: not a function TVMScript can call")
        handler = getattr(self, "call_" + func.name.replace(".", "_"), None)
        if handler is not None:
            return handler(node)
        if func.name in _TWO:
            a, b = self._args(node, 2)
            return self.binary(_TWO[func.name], a, b, node)
        if func.name in INTRINSICS:
            return self.intrinsic(func.name, node)
        raise self.error(node, f"{self.text(node.func)} cannot be used in an expression")

    def _args(self, node, n: int | None = None, names: str = "") -> list:
        if node.keywords:
            raise self.error(node, f"{self.text(node)}: unexpected keyword {node.keywords[0].arg}=")
        if n is not None and len(node.args) != n:
            raise self.error(node, f"{self.text(node.func)} takes {n} argument(s) ({names}), got {len(node.args)}")
        return [self.ev(a) for a in node.args]

    def dtype_call(self, dt, node):
        if not node.args:
            raise self.error(node, f"{self.text(node)} declares a variable; write `name = {self.text(node)}`")
        (value,) = self._args(node, 1, "value")
        if isinstance(value, str):
            value = float(value)
        if isinstance(value, (bool, int, float)):
            try:
                return E.const(value, dt)
            except (TypeError, ValueError) as exc:
                raise self.error(node, f"{self.text(node)}: {exc}") from None
        return E.cast(self.to_expr(value, node.args[0]), dt)

    def intrinsic(self, name: str, node):
        args = tuple(self.to_expr(a, n) for a, n in zip(self._args(node), node.args))
        if name == "if_then_else" and len(args) == 3:
            t, f = E._match(*args[1:])
            args = (args[0], t, f)
        if name in ("pow", "fmod", "atan2", "hypot", "copysign") or name.startswith(("bitwise_", "shift_")):
            if len(args) == 2:
                args = E._match(*args)
        dt = shorthand_dtype(name, args)
        if dt is None:
            raise self.error(node, f"{self.text(node)}: cannot tell the dtype; use T.call_intrin(dtype, \"tir.{name}\", ...)")
        return E.Call(dt, f"tir.{name}", args)

    def call_Cast(self, node):
        dt = self.dtype_arg(node.args[0])
        return E.Cast(dt, self.expr(node.args[1]))

    def call_cast(self, node):
        return E.cast(self.expr(node.args[0]), self.dtype_arg(node.args[1]))

    def call_Select(self, node):
        c, t, f = self._args(node, 3, "condition, true_value, false_value")
        t, f = E._match(self._operand(t, node), self._operand(f, node))
        return E.Select(self.to_expr(c, node), t, f, t.dtype)

    def call_Ramp(self, node):
        base, stride, lanes = self._args(node, 3, "base, stride, lanes")
        base = self.to_expr(base, node)
        stride = self.to_expr(stride, node, like=base)
        return E.Ramp(base, stride, int(lanes), base.dtype.with_lanes(int(lanes)))

    def call_Broadcast(self, node):
        value, lanes = self._args(node, 2, "value, lanes")
        value = self.to_expr(value, node)
        return E.Broadcast(value, int(lanes), value.dtype.with_lanes(int(lanes)))

    def call_Let(self, node):
        where = next((k.value for k in node.keywords if k.arg == "where"), None)
        if not isinstance(where, ast.Dict) or len(where.keys) != 1 or not isinstance(where.keys[0], ast.Name):
            raise self.error(node, f"{self.text(node)}: write T.Let(body, where={{x: value}})")
        value = self.expr(where.values[0])
        var = E.Var(where.keys[0].id, value.dtype)
        self.scopes.append({var.name: var})
        try:
            body = self.expr(node.args[0])
        finally:
            self.scopes.pop()
        return E.Let(var, value, body, body.dtype)

    def call_call_intrin(self, node):
        dt = self.dtype_arg(node.args[0])
        op = self.ev(node.args[1])
        args = tuple(self.expr(a) for a in node.args[2:])
        return E.Call(dt, op if op.startswith("tir.") else "tir." + op, args)

    def call_call_extern(self, node):
        dt = self.dtype_arg(node.args[0])
        name = self.ev(node.args[1])
        if not isinstance(name, str):
            raise self.error(node.args[1], f"{self.text(node.args[1])}: the extern function name must be a string")
        return E.Call(dt, name, tuple(self.expr(a) for a in node.args[2:]))

    call_call_pure_extern = call_call_extern

    def call_reinterpret(self, node):
        return E.Call(self.dtype_arg(node.args[0]), "tir.reinterpret", (self.expr(node.args[1]),))

    def call_Range(self, node):
        lo, ext = self._args(node, 2, "min, extent")
        return E.Range(self.to_expr(lo, node), self.to_expr(ext, node))

    def ev_Set(self, node):
        return frozenset(self.ev(e) for e in node.elts)

    def call_abs(self, node):
        from kiln.tir.op import abs as _abs

        return _abs(self.expr(node.args[0]))


class _Builtin:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class _DTypeName:
    __slots__ = ("dtype",)

    def __init__(self, dt):
        self.dtype = dt


class _BufferMethod:
    __slots__ = ("buffer",)

    def __init__(self, buffer):
        self.buffer = buffer


