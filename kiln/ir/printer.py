"""TIR as TVMScript text: what ``print(tvm.lower(...))`` shows and what ``kiln.script`` parses back.

The printer writes a shorthand only where the parser rebuilds the very same node from it
(``T.exp(x)`` for a call whose dtype is x's, ``A[i]`` for a load of A's dtype, a bare ``3`` for
an int32 constant); anything else gets an explicit form (``T.call_intrin("int32", "tir.f", x)``,
``A.vload([i], "float32x4")``). So printing then parsing gives a structurally equal function.
"""

from __future__ import annotations

import keyword
import math
import re

from . import block as B
from . import expr as E
from . import stmt as S
from .module import IRModule, graph_ir_of
from .structural import structural_equal

# Python precedence, loosest first; comparisons never chain (both sides bind tighter).
_OR, _AND, _NOT, _CMP, _ADD, _MUL, _UNARY, _ATOM = range(1, 9)
_BINARY = {
    E.Add: ("+", _ADD), E.Sub: ("-", _ADD), E.Mul: ("*", _MUL), E.Div: ("/", _MUL),
    E.FloorDiv: ("//", _MUL), E.FloorMod: ("%", _MUL), E.EQ: ("==", _CMP), E.NE: ("!=", _CMP),
    E.LT: ("<", _CMP), E.LE: ("<=", _CMP), E.GT: (">", _CMP), E.GE: (">=", _CMP),
    E.And: ("and", _AND), E.Or: ("or", _OR),
}
_FUNCS = {E.Mod: "T.truncmod", E.Min: "T.min", E.Max: "T.max"}
KIND_NAMES = {S.ForKind.SERIAL: "serial", S.ForKind.PARALLEL: "parallel", S.ForKind.VECTORIZED: "vectorized",
              S.ForKind.UNROLLED: "unroll", S.ForKind.THREAD_BINDING: "thread_binding"}

# Intrinsics written ``T.<name>(args)``: the parser gives the call the dtype shorthand_dtype says.
BOOL_INTRINSICS = {"isnan", "isinf", "isfinite", "likely"}
INT32_INTRINSICS = {"tvm_storage_sync"}
INTRINSICS = {
    "exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "tanh", "erf", "sin", "cos",
    "tan", "asin", "acos", "atan", "sinh", "cosh", "floor", "ceil", "trunc", "nearbyint", "fabs", "pow",
    "fmod", "popcount", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
    "shift_right", "if_then_else", "sigmoid", "atan2", "hypot", "copysign", "round",
} | BOOL_INTRINSICS | INT32_INTRINSICS


def shorthand_dtype(name: str, args: tuple):
    """The dtype the parser gives ``T.<name>(*args)``; None when it cannot tell."""
    if name in BOOL_INTRINSICS:
        return E.BOOL_T
    if name in INT32_INTRINSICS:
        return E.INT32
    if name == "if_then_else":
        return args[1].dtype if len(args) == 3 else None
    first = next((a for a in args if isinstance(a, E.PrimExpr) and not isinstance(a, E.StringImm)), None)
    return first.dtype if first is not None else None


def load_dtype(buffer, indices: tuple):
    """The dtype of ``buffer[indices]``: the buffer's, widened to the lanes of a vector index."""
    lanes = max((getattr(getattr(i, "dtype", None), "lanes", 1) for i in indices), default=1)
    return buffer.dtype.with_lanes(lanes) if lanes > 1 else buffer.dtype


def identifier(name: str) -> str:
    """A Python identifier close to name (``j.outer`` -> ``j_outer``)."""
    text = re.sub(r"\W", "_", name or "v")
    if not text or text[0].isdigit():
        text = "v_" + text
    if keyword.iskeyword(text) or text in ("T", "I"):
        text += "_"
    return text


class _Printer:
    def __init__(self):
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.data_owner: dict[int, object] = {}  # id(data var) -> the buffer printed as its owner
        self.aliases: dict[int, list] = {}  # id(data var) -> other buffers over the same data
        self.loops: dict[int, object] = {}  # id(loop var) -> its For, for T.axis.remap

    def fresh(self, base: str) -> str:
        base = identifier(base)
        candidate, i = base, 1
        while candidate in self.used:
            candidate = f"{base}_{i}"
            i += 1
        self.used.add(candidate)
        return candidate

    def name(self, v) -> str:
        key = id(v)
        if key not in self.names:
            owner = self.data_owner.get(key)
            if owner is not None and owner is not v:
                return f"{self.name(owner)}.data"
            self.names[key] = self.fresh(getattr(v, "name", "v"))
        return self.names[key]

    # Expressions ------------------------------------------------------------------------
    def expr(self, e, prec: int = 0) -> str:
        t = type(e)
        if isinstance(e, E.Var):
            return self.name(e)
        if t is E.IntImm:
            if e.dtype.is_bool:
                return "T.bool(True)" if e.value else "T.bool(False)"
            if e.dtype == E.INT32:
                text = str(e.value)
                return f"({text})" if e.value < 0 and prec > _UNARY else text
            return f"T.{e.dtype}({e.value})"
        if t is E.FloatImm:
            v = e.value
            return f"T.{e.dtype}({v!r})" if math.isfinite(v) else f"T.{e.dtype}(\"{v!r}\")"
        if t is E.StringImm:
            return _string(e.value)
        if t in _BINARY:
            op, p = _BINARY[t]
            left = p + 1 if p == _CMP else p
            text = f"{self.expr(e.a, left)} {op} {self.expr(e.b, p + 1)}"
            return f"({text})" if p < prec else text
        if t in _FUNCS:
            return f"{_FUNCS[t]}({self.expr(e.a)}, {self.expr(e.b)})"
        if t is E.Not:
            text = f"not {self.expr(e.a, _NOT)}"
            return f"({text})" if _NOT < prec else text
        if t is E.Cast:
            return f"T.Cast(\"{e.dtype}\", {self.expr(e.value)})"
        if t is E.Select:
            return f"T.Select({self.expr(e.condition)}, {self.expr(e.true_value)}, {self.expr(e.false_value)})"
        if t is E.Ramp:
            return f"T.Ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes})"
        if t is E.Broadcast:
            return f"T.Broadcast({self.expr(e.value)}, {e.lanes})"
        if t is E.Let:
            return f"T.Let({self.expr(e.body)}, where={{{self.name(e.var)}: {self.expr(e.value)}}})"
        if t is E.Call:
            return self.call(e)
        if t is E.BufferLoad:
            idx = ", ".join(self.expr(i) for i in e.indices) or "()"
            if e.dtype != load_dtype(e.buffer, e.indices):
                return f"{self.buffer_name(e.buffer)}.vload([{idx}], \"{e.dtype}\")"
            return f"{self.buffer_name(e.buffer)}[{idx}]"
        if t is E.ProducerLoad:
            return f"{e.producer.name}[{', '.join(self.expr(i) for i in e.indices)}]"
        if t is E.Reduce:
            axes = ", ".join(self.name(a.var) for a in e.axis)
            src = ", ".join(self.expr(s) for s in e.source)
            return f"T.reduce({e.combiner.name}, {src}, axis=[{axes}])"
        if t is E.Range:
            return f"T.Range({self.expr(e.min)}, {self.expr(e.extent)})"
        if t is E.IterVar:
            dom = f"T.Range({self.expr(e.dom.min)}, {self.expr(e.dom.extent)})" if e.dom is not None else "None"
            return f"T.iter_var({self.name(e.var)}, {dom}, {e.iter_type}, {e.thread_tag!r})"
        return f"<{t.__name__}>"

    def call(self, e) -> str:
        args = [self.expr(a) for a in e.args]
        if e.op.startswith("tir."):
            name = e.op[4:]
            if name == "reinterpret" and len(e.args) == 1:
                return f"T.reinterpret(\"{e.dtype}\", {args[0]})"
            if name in INTRINSICS and shorthand_dtype(name, e.args) == e.dtype:
                return f"T.{name}({', '.join(args)})"
            return f"T.call_intrin(\"{e.dtype}\", \"{e.op}\"{''.join(', ' + a for a in args)})"
        return f"T.call_extern(\"{e.dtype}\", \"{e.op}\"{''.join(', ' + a for a in args)})"

    def value(self, v) -> str:
        """An attribute or annotation value: IR constants keep their dtype, Python values stay Python."""
        if isinstance(v, E.IntImm) and not v.dtype.is_bool:
            return f"T.{v.dtype}({v.value})"
        if isinstance(v, (E.PrimExpr, E.IterVar, E.Range)):
            return self.expr(v)
        if isinstance(v, S.Buffer):
            return self.buffer_name(v)
        if isinstance(v, dict):
            return "{" + ", ".join(f"{self.value(k)}: {self.value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(self.value(x) for x in v) + "]"
        if isinstance(v, tuple):
            return "(" + "".join(self.value(x) + ", " for x in v) + ")"
        if isinstance(v, (set, frozenset)):
            return "frozenset({" + ", ".join(sorted(self.value(x) for x in v)) + "})" if v else "frozenset()"
        if isinstance(v, str):
            return _string(v)
        return repr(v)

    def buffer_name(self, buf) -> str:
        return self.name(buf)

    def buffer_args(self, b, data: str | None = None) -> str:
        shape = "".join(self.expr(x) + ", " for x in b.shape).rstrip(" ")
        text = f"({shape[:-1] if len(b.shape) > 1 else shape}), \"{b.dtype}\""
        if data is not None:
            text += f", data={data}"
        if b.strides:
            text += ", strides=(" + "".join(self.expr(x) + ", " for x in b.strides) + ")"
        if b.elem_offset is not None:
            text += f", elem_offset={self.expr(b.elem_offset)}"
        if b.scope != "global":
            text += f", scope=\"{b.scope}\""
        if b.offset_factor:
            text += f", offset_factor={b.offset_factor}"
        return text

    def declare_aliases(self, owner, d: int) -> None:
        for alias in self.aliases.pop(id(owner.data), []):
            if alias is not owner:
                self.emit(d, f"{self.name(alias)} = T.Buffer({self.buffer_args(alias, self.name(owner) + '.data')})")

    # Statements ------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def stmt(self, s, d: int, last: bool = True) -> None:
        """Print s at depth d; last says nothing follows it in its printed block."""
        t = type(s)
        if t is S.SeqStmt:
            items = _flat(s)
            for i, item in enumerate(items):
                self.stmt(item, d, last and i == len(items) - 1)
        elif t is S.For:
            self.emit(d, f"for {self.name(s.loop_var)} in {self.loop_head(s)}:")
            self.loops[id(s.loop_var)] = s
            self.stmt(s.body, d + 1)
        elif t is B.BlockRealize:
            self.block(s, d)
        elif t is S.BufferStore:
            idx = ", ".join(self.expr(i) for i in s.indices) or "()"
            self.emit(d, f"{self.buffer_name(s.buffer)}[{idx}] = {self.expr(s.value)}")
        elif t is S.Allocate:
            b = s.buffer
            ext = ", ".join(self.expr(x) for x in s.extents)
            self.data_owner[id(b.data)] = b
            extra = ""
            if not _same_shape(b.shape, s.extents):
                extra += ", shape=(" + "".join(self.expr(x) + ", " for x in b.shape) + ")"
            if s.condition is not None:
                extra += f", condition={self.expr(s.condition)}"
            call = f"T.allocate([{ext}], \"{b.dtype}\", \"{b.scope}\"{extra})"
            self.binder(s, d, last, f"{self.name(b)} = {call}", f"with {call} as {self.name(b)}:", b)
        elif t is S.LetStmt:
            value = self.expr(s.value)
            name = self.name(s.var)
            self.binder(s, d, last, f"{name}: T.{s.var.dtype} = {value}",
                        f"with T.LetStmt({value}, \"{s.var.dtype}\") as {name}:")
        elif t is S.AttrStmt:
            self.attr_stmt(s, d, last)
        elif t is S.AssertStmt:
            cond, msg = self.expr(s.condition), self.expr(s.message)
            self.binder(s, d, last, f"assert {cond}, {msg}", f"with T.Assert({cond}, {msg}):")
        elif t is S.IfThenElse:
            self.emit(d, f"if {self.expr(s.condition)}:")
            self.stmt(s.then_case, d + 1)
            if s.else_case is not None:
                self.emit(d, "else:")
                self.stmt(s.else_case, d + 1)
        elif t is S.While:
            self.emit(d, f"while {self.expr(s.condition)}:")
            self.stmt(s.body, d + 1)
        elif t is S.Evaluate:
            self.emit(d, f"T.evaluate({self.expr(s.value)})")
        else:
            self.emit(d, f"<{t.__name__}>")

    def block(self, realize, d: int) -> None:
        blk = realize.block
        self.emit(d, f"with T.block({_string(blk.name_hint)}):")
        d += 1
        self.block_axes(blk.iter_vars, realize.iter_values, d)
        pred = realize.predicate
        if not (isinstance(pred, E.IntImm) and pred.value):
            self.emit(d, f"T.where({self.expr(pred)})")
        self.emit(d, f"T.reads({', '.join(self.region(r) for r in blk.reads)})")
        self.emit(d, f"T.writes({', '.join(self.region(r) for r in blk.writes)})")
        if blk.annotations:
            self.emit(d, f"T.block_attr({self.value(dict(blk.annotations))})")
        for b in blk.alloc_buffers:
            self.data_owner[id(b.data)] = b
            self.emit(d, f"{self.name(b)} = T.alloc_buffer({self.buffer_args(b)})")
            self.declare_aliases(b, d)
        if blk.init is not None:
            self.emit(d, "with T.init():")
            self.stmt(blk.init, d + 1)
        self.stmt(blk.body, d)

    def block_axes(self, iter_vars, values, d: int) -> None:
        kinds = {E.IterType.DATA_PAR: "S", E.IterType.COMM_REDUCE: "R"}
        remap = bool(iter_vars) and all(
            iv.iter_type in kinds and isinstance(v, E.Var) and id(v) in self.loops and iv.var.dtype == v.dtype
            and _same_range(iv.dom, self.loops[id(v)]) for iv, v in zip(iter_vars, values))
        if remap:
            names = ", ".join(self.name(iv.var) for iv in iter_vars)
            code = "".join(kinds[iv.iter_type] for iv in iter_vars)
            self.emit(d, f"{names} = T.axis.remap(\"{code}\", [{', '.join(self.expr(v) for v in values)}])")
            return
        words = {E.IterType.DATA_PAR: "spatial", E.IterType.COMM_REDUCE: "reduce", E.IterType.ORDERED: "scan",
                 E.IterType.OPAQUE: "opaque"}
        for iv, v in zip(iter_vars, values):
            dom = iv.dom
            if isinstance(dom.min, E.IntImm) and dom.min.value == 0 and dom.extent.dtype == v.dtype:
                text = self.expr(dom.extent)
            else:
                text = f"T.Range({self.expr(dom.min)}, {self.expr(dom.extent)})"
            self.emit(d, f"{self.name(iv.var)} = T.axis.{words[iv.iter_type]}({text}, {self.expr(v)})")

    def region(self, r) -> str:
        parts = []
        for rng in r.region:
            lo, ext = rng.min, rng.extent
            if isinstance(ext, E.IntImm) and ext.value == 1 and ext.dtype == lo.dtype:
                parts.append(self.expr(lo))
            elif isinstance(lo, E.IntImm) and isinstance(ext, E.IntImm) and lo.dtype == E.INT32 == ext.dtype:
                parts.append(f"{lo.value}:{lo.value + ext.value}")
            else:
                parts.append(f"{self.expr(lo)}:{self.expr(E.Add(lo, ext, lo.dtype))}")
        return f"{self.buffer_name(r.buffer)}[{', '.join(parts)}]"

    def binder(self, s, d: int, last: bool, concise: str, scoped: str, buffer=None) -> None:
        """A statement whose body is the rest of its block when it ends one, a ``with`` block otherwise."""
        inner = d if last else d + 1
        self.emit(d, concise if last else scoped)
        if buffer is not None:
            self.declare_aliases(buffer, inner)
        self.stmt(s.body, inner, True)

    def loop_head(self, s) -> str:
        kind = KIND_NAMES[s.kind]
        zero = isinstance(s.min, E.IntImm) and s.min.value == 0 and s.min.dtype == s.loop_var.dtype
        if zero and s.extent.dtype == s.loop_var.dtype:
            args = [self.expr(s.extent)]
        else:
            args = [self.expr(s.min), f"extent={self.expr(s.extent)}"]
        iv = s.thread_binding
        if iv is not None:
            args.append(f"thread=\"{iv.thread_tag}\"")
            if iv.dom is not None:
                args.append(f"dom=T.Range({self.expr(iv.dom.min)}, {self.expr(iv.dom.extent)})")
        if s.annotations:
            args.append(f"annotations={self.value(dict(s.annotations))}")
        return f"T.{kind}({', '.join(args)})"

    def attr_stmt(self, s, d: int, last: bool) -> None:
        node = s.node
        if isinstance(node, E.IterVar) and s.attr_key == "thread_extent" and id(node.var) not in self.names:
            dom = ""
            if node.dom is not None:
                dom = f", dom=T.Range({self.expr(node.dom.min)}, {self.expr(node.dom.extent)})"
            call = f"T.launch_thread(\"{node.thread_tag}\", {self.value(s.value)}{dom})"
            name = self.name(node.var)
            self.binder(s, d, last, f"{name} = {call}", f"with {call} as {name}:")
        else:
            call = f"T.attr({self.value(node)}, \"{s.attr_key}\", {self.value(s.value)})"
            self.binder(s, d, last, call, f"with {call}:")

    def func(self, f: S.PrimFunc, name: str, d: int = 0) -> None:
        info = _scan(f)
        for buf in f.buffer_map.values():
            self.data_owner.setdefault(id(buf.data), buf)
        for buffers in info.by_data.values():
            owner = self.data_owner.get(id(buffers[0].data))
            rest = [b for b in buffers if b is not owner]
            if rest:
                self.aliases[id(buffers[0].data)] = rest
        params, matches = [], []
        for p in f.params:
            buf = f.buffer_map.get(p)
            if buf is not None and buf.data is not p and _simple(buf):
                # The handle itself is never written in the body: the buffer takes the name.
                params.append(f"{self.name(buf)}: T.Buffer({self.buffer_args(buf)})")
                continue
            self.names[id(p)] = pname = self.fresh(p.name)
            if buf is None:
                params.append(f"{pname}: T.{p.dtype}")
            else:
                params.append(f"{pname}: T.handle")
                matches.append((pname, buf, buf.data is p))
        self.emit(d, "@T.prim_func")
        self.emit(d, f"def {identifier(name)}({', '.join(params)}):")
        defined = info.defined | {id(p) for p in f.params} | {id(b.data) for b in f.buffer_map.values()}
        for v in info.vars:
            if id(v) not in defined and id(v) not in info.by_data:
                self.emit(d + 1, f"{self.name(v)} = T.{v.dtype}()")
        if f.attrs:
            self.emit(d + 1, f"T.func_attr({self.value(dict(f.attrs))})")
        for pname, buf, data_is_param in matches:
            args = self.buffer_args(buf, pname if data_is_param else None)
            self.emit(d + 1, f"{self.name(buf)} = T.match_buffer({pname}, {args})")
        for buf in f.buffer_map.values():
            self.declare_aliases(buf, d + 1)
        for key, buffers in list(info.by_data.items()):
            if key in defined:
                continue
            # A buffer over data that no parameter or allocation provides: declared free.
            first = buffers[0]
            self.data_owner[key] = first
            self.aliases[key] = buffers[1:]
            self.emit(d + 1, f"{self.name(first)} = T.Buffer({self.buffer_args(first)})")
            self.declare_aliases(first, d + 1)
        self.stmt(f.body, d + 1)


def _flat(s) -> list:
    out = []
    for item in s.seq:
        out.extend(_flat(item) if isinstance(item, S.SeqStmt) else [item])
    return out


def _string(text: str) -> str:
    out = repr(text)
    return out if out.startswith('"') else '"' + out[1:-1].replace('"', '\\"').replace("\\'", "'") + '"'


def _same_shape(shape, extents) -> bool:
    return len(shape) == len(extents) and all(structural_equal(a, b) for a, b in zip(shape, extents))


def _same_range(dom, loop) -> bool:
    return dom is not None and structural_equal(dom.min, loop.min) and structural_equal(dom.extent, loop.extent)


def _simple(buf) -> bool:
    """Whether ``name: T.Buffer(...)`` in the signature describes buf (constant shape, no free vars)."""
    return all(isinstance(x, E.IntImm) for x in buf.shape) and not any(
        not isinstance(x, E.IntImm) for x in buf.strides) and (buf.elem_offset is None or isinstance(buf.elem_offset, E.IntImm))


class _Scan:
    """Vars (in order of appearance), the ones bound inside the function, and buffers by data var."""

    def __init__(self):
        self.vars: list = []
        self.seen: set = set()
        self.defined: set = set()
        self.allocated: set = set()
        self.by_data: dict[int, list] = {}
        self.buffers: set = set()

    def var(self, v) -> None:
        if id(v) not in self.seen:
            self.seen.add(id(v))
            self.vars.append(v)

    def buffer(self, b) -> None:
        if id(b) in self.buffers:
            return
        self.buffers.add(id(b))
        self.by_data.setdefault(id(b.data), []).append(b)
        for x in (*b.shape, *b.strides, b.elem_offset):
            if x is not None:
                self.walk(x)

    def walk(self, node) -> None:
        import dataclasses

        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, E.Var):
                self.var(n)
                continue
            if isinstance(n, S.Buffer):
                self.buffer(n)
                continue
            if isinstance(n, (list, tuple)):
                stack.extend(reversed(n))
                continue
            if isinstance(n, dict):  # attrs may be keyed by Vars (texture layouts)
                stack.extend(reversed([x for kv in n.items() for x in kv]))
                continue
            if isinstance(n, (set, frozenset)):
                stack.extend(n)
                continue
            if not dataclasses.is_dataclass(n):
                continue
            if isinstance(n, S.For):
                self.defined.add(id(n.loop_var))
            elif isinstance(n, (S.LetStmt, E.Let)):
                self.defined.add(id(n.var))
            elif isinstance(n, S.Allocate):
                self.defined.add(id(n.buffer.data))
                self.allocated.add(id(n.buffer.data))
            elif isinstance(n, S.AttrStmt) and isinstance(n.node, E.IterVar) and n.attr_key == "thread_extent":
                self.defined.add(id(n.node.var))
            elif isinstance(n, B.Block):
                self.defined.update(id(iv.var) for iv in n.iter_vars)
                self.defined.update(id(b.data) for b in n.alloc_buffers)
            children = []
            for f in dataclasses.fields(n):
                if f.name in ("combiner", "producer", "type_annotation", "dtype"):
                    continue
                if isinstance(n, S.For) and f.name == "thread_binding":
                    continue
                children.append(getattr(n, f.name))
            stack.extend(reversed(children))


def _scan(f: S.PrimFunc) -> _Scan:
    scan = _Scan()
    for p in f.params:
        buf = f.buffer_map.get(p)
        if buf is not None:
            scan.buffer(buf)
    scan.walk(f.body)
    scan.walk(f.attrs)
    return scan


def to_text(node) -> str:
    p = _Printer()
    if isinstance(node, S.PrimFunc):
        p.func(node, node.attrs.get("global_symbol", "main"))
    elif isinstance(node, S.Stmt):
        p.stmt(node, 0)
    elif isinstance(node, S.Buffer):
        return f"T.Buffer({p.buffer_args(node)})"
    else:
        return p.expr(node)
    return "\n".join(p.lines)


def module_to_text(mod) -> str:
    if not any(isinstance(f, S.PrimFunc) for _, f in mod.items()):
        # A relay module prints in relay's own text form, one `def @name(...)` per function
        # (relay registers how: kiln/ir/module.py GraphIR).
        parts = []
        for name, f in mod.items():
            ir = graph_ir_of(f)
            if ir is None:
                raise TypeError(f"cannot print function {name!r} of the module: a {type(f).__name__}")
            parts.append(ir.to_text(f, name))
        return "\n\n".join(parts) + "\n"
    lines = ["# from tvm.script import ir as I", "# from tvm.script import tir as T", "", "@I.ir_module", "class Module:"]
    for name, func in mod.items():
        if isinstance(func, S.PrimFunc):
            p = _Printer()
            p.func(func, name, 1)
            lines.extend(p.lines)
        else:
            text = func.astext() if hasattr(func, "astext") else str(func)
            lines.extend("    " + line for line in text.splitlines())
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# The text form of every node and module (kiln/ir/expr.py Node.text_form): set here, above them.
E.Node.text_form = staticmethod(to_text)
IRModule.text_form = staticmethod(module_to_text)
