"""Readable text for TIR, in the style of TVMScript (``T.`` prefixes, Python-like loops)."""

from __future__ import annotations

from . import expr as E
from . import stmt as S

_BINARY = {
    E.Add: ("+", 4), E.Sub: ("-", 4), E.Mul: ("*", 5), E.Div: ("/", 5), E.FloorDiv: ("//", 5),
    E.FloorMod: ("%", 5), E.EQ: ("==", 2), E.NE: ("!=", 2), E.LT: ("<", 2), E.LE: ("<=", 2),
    E.GT: (">", 2), E.GE: (">=", 2), E.And: ("and", 1), E.Or: ("or", 0),
}
_FUNCS = {E.Mod: "T.truncmod", E.Min: "T.min", E.Max: "T.max"}
_KIND = {S.ForKind.SERIAL: "serial", S.ForKind.PARALLEL: "parallel", S.ForKind.VECTORIZED: "vectorized",
         S.ForKind.UNROLLED: "unroll", S.ForKind.THREAD_BINDING: "thread_binding"}


class _Printer:
    def __init__(self):
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def name(self, v) -> str:
        key = id(v)
        if key not in self.names:
            base = getattr(v, "name", "v") or "v"
            candidate, i = base, 1
            while candidate in self.used:
                candidate = f"{base}_{i}"
                i += 1
            self.used.add(candidate)
            self.names[key] = candidate
        return self.names[key]

    # Expressions ------------------------------------------------------------------------
    def expr(self, e, prec: int = 0) -> str:
        t = type(e)
        if isinstance(e, E.Var):
            return self.name(e)
        if t is E.IntImm:
            if e.dtype.is_bool:
                return "T.bool(True)" if e.value else "T.bool(False)"
            return str(e.value) if e.dtype.bits == 32 and e.dtype.kind == "int" else f"T.{e.dtype}({e.value})"
        if t is E.FloatImm:
            return f"T.{e.dtype}({e.value!r})"
        if t is E.StringImm:
            return repr(e.value)
        if t in _BINARY:
            op, p = _BINARY[t]
            text = f"{self.expr(e.a, p)} {op} {self.expr(e.b, p + 1)}"
            return f"({text})" if p < prec else text
        if t in _FUNCS:
            return f"{_FUNCS[t]}({self.expr(e.a)}, {self.expr(e.b)})"
        if t is E.Not:
            return f"not {self.expr(e.a, 6)}"
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
            name = e.op[4:] if e.op.startswith("tir.") else e.op
            args = ", ".join(self.expr(a) for a in e.args)
            return f"T.{name}({args})" if e.op.startswith("tir.") else f"T.call_extern(\"{e.dtype}\", \"{name}\", {args})"
        if t is E.BufferLoad:
            return f"{self.buffer_name(e.buffer)}[{', '.join(self.expr(i) for i in e.indices)}]"
        if t is E.ProducerLoad:
            return f"{e.producer.name}[{', '.join(self.expr(i) for i in e.indices)}]"
        if t is E.Reduce:
            axes = ", ".join(self.name(a.var) for a in e.axis)
            src = ", ".join(self.expr(s) for s in e.source)
            return f"T.reduce({e.combiner.name}, {src}, axis=[{axes}])"
        if t is E.Range:
            return f"T.Range({self.expr(e.min)}, {self.expr(e.extent)})"
        if t is E.IterVar:
            return f"T.iter_var({self.name(e.var)}, {self.expr(e.dom) if e.dom else None}, {e.thread_tag!r})"
        return f"<{t.__name__}>"

    def buffer_name(self, buf) -> str:
        return self.name(buf.data) if buf.data is not None else buf.name

    # Statements ------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def stmt(self, s, d: int) -> None:
        t = type(s)
        if t is S.SeqStmt:
            for item in s.seq:
                self.stmt(item, d)
        elif t is S.For:
            kind = _KIND[s.kind]
            if s.kind == S.ForKind.THREAD_BINDING and s.thread_binding is not None:
                head = f"for {self.name(s.loop_var)} in T.thread_binding({self.expr(s.extent)}, thread=\"{s.thread_binding.thread_tag}\"):"
            elif isinstance(s.min, E.IntImm) and s.min.value == 0:
                head = f"for {self.name(s.loop_var)} in T.{kind}({self.expr(s.extent)}):"
            else:
                end = s.min.value + s.extent.value if isinstance(s.min, E.IntImm) and isinstance(s.extent, E.IntImm) else None
                stop = str(end) if end is not None else self.expr(s.min + s.extent)
                head = f"for {self.name(s.loop_var)} in T.{kind}({self.expr(s.min)}, {stop}):"
            self.emit(d, head)
            for key, value in s.annotations.items():
                self.emit(d + 1, f"# {key} = {value}")
            self.stmt(s.body, d + 1)
        elif t is S.BufferStore:
            idx = ", ".join(self.expr(i) for i in s.indices)
            self.emit(d, f"{self.buffer_name(s.buffer)}[{idx}] = {self.expr(s.value)}")
        elif t is S.Allocate:
            b = s.buffer
            ext = ", ".join(self.expr(x) for x in s.extents)
            self.emit(d, f"{self.buffer_name(b)} = T.allocate([{ext}], \"{b.dtype}\", \"{b.scope}\")")
            self.stmt(s.body, d)
        elif t is S.LetStmt:
            self.emit(d, f"{self.name(s.var)}: T.{s.var.dtype} = {self.expr(s.value)}")
            self.stmt(s.body, d)
        elif t is S.AttrStmt:
            target = self.expr(s.node) if isinstance(s.node, (E.PrimExpr, E.IterVar)) else repr(s.node)
            self.emit(d, f"T.attr({target}, \"{s.attr_key}\", {self.expr(s.value)})")
            self.stmt(s.body, d)
        elif t is S.AssertStmt:
            self.emit(d, f"assert {self.expr(s.condition)}, {self.expr(s.message)}")
            self.stmt(s.body, d)
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

    def func(self, f: S.PrimFunc, name: str, d: int = 0) -> None:
        params = []
        for p in f.params:
            buf = f.buffer_map.get(p)
            if buf is not None:
                self.names[id(buf.data)] = self.name(buf.data) if id(buf.data) in self.names else self._claim(buf.name, buf.data)
                shape = ", ".join(self.expr(x) for x in buf.shape)
                params.append(f"{self.name(buf.data)}: T.Buffer(({shape}{',' if len(buf.shape) == 1 else ''}), \"{buf.dtype}\")")
            else:
                params.append(f"{self.name(p)}: T.{p.dtype}")
        self.emit(d, "@T.prim_func")
        self.emit(d, f"def {name}({', '.join(params)}):")
        attrs = {k: v for k, v in f.attrs.items()}
        if attrs:
            self.emit(d + 1, f"T.func_attr({attrs!r})")
        self.stmt(f.body, d + 1)

    def _claim(self, base: str, v) -> str:
        candidate, i = base, 1
        while candidate in self.used:
            candidate = f"{base}_{i}"
            i += 1
        self.used.add(candidate)
        return candidate


def to_text(node) -> str:
    p = _Printer()
    if isinstance(node, S.PrimFunc):
        p.func(node, node.attrs.get("global_symbol", "main"))
    elif isinstance(node, S.Stmt):
        p.stmt(node, 0)
    elif isinstance(node, S.Buffer):
        return f"T.Buffer({node.name}, {tuple(p.expr(s) for s in node.shape)}, \"{node.dtype}\")"
    else:
        return p.expr(node)
    return "\n".join(p.lines)


def module_to_text(mod) -> str:
    if not any(isinstance(f, S.PrimFunc) for _, f in mod.items()):
        # A relay module prints in relay's own text form, one `def @name(...)` per function.
        from kiln.relay.printer import astext

        return "\n\n".join(astext(f, name) for name, f in mod.items()) + "\n"
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
