"""Relay text format, close to TVM's:

    def @main(%data: Tensor[(1, 3, 224, 224), float32], ...) -> Tensor[(1, 1000), float32] {
      %0 = nn.conv2d(%data, %w, strides=[2, 2], padding=[3, 3, 3, 3]) /* ty=Tensor[...] */;
      nn.relu(%0) /* ty=... */
    }

Attributes equal to the op's default are left out. Non-scalar constants print as
``meta[relay.Constant][i]`` with their type.
"""

from __future__ import annotations

from .expr import Call, Constant, Function, If, Let, RelayExpr, Tuple, TupleGetItem, Var
from .op.registry import OpDef
from .visitor import _walk, children


def _fmt_value(v) -> str:
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_fmt_value(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return f"{v:g}f"
    return str(v)


def _type_comment(e) -> str:
    t = e.__dict__.get("_checked_type")
    return f" /* ty={t} */" if t is not None else ""


class _Printer:
    def __init__(self, indent: str = "  ", names: dict | None = None, consts: list | None = None):
        self.indent = indent
        self.names: dict = names if names is not None else {}
        self.used: set = set(self.names.values())
        self.consts = consts if consts is not None else []
        self.lines: list[str] = []
        self.counter = 0

    def var_name(self, v: Var) -> str:
        if v not in self.names:
            base = "%" + (v.name_hint or "v")
            name, k = base, 1
            while name in self.used:
                name, k = f"{base}_{k}", k + 1
            self.names[v] = name
            self.used.add(name)
        return self.names[v]

    def atom(self, e, refs: dict) -> str:
        if isinstance(e, Var):
            return self.var_name(e)
        if isinstance(e, Constant):
            if e.data.ndim == 0:
                v = e.data.item()
                suffix = {"float32": "f", "float64": "f64", "int32": "", "int64": "i64", "bool": ""}.get(str(e.data.dtype), "")
                return f"{v}{suffix}"
            self.consts.append(e)
            return f"meta[relay.Constant][{len(self.consts) - 1}]"
        return refs[e]

    def emit(self, body, refs: dict) -> str:
        """Print the nodes of ``body`` as numbered lines; return how to refer to its result."""
        for node in _print_order(body):
            if node in refs or isinstance(node, (Var, Constant)):
                continue
            text = self.node_text(node, refs)
            if node is body:
                return text
            name = f"%{self.counter}"
            self.counter += 1
            self.lines.append(f"{self.indent}{name} = {text};")
            refs[node] = name
        return self.atom(body, refs)

    def node_text(self, node, refs: dict) -> str:
        a = lambda e: self.atom(e, refs)  # noqa: E731
        if isinstance(node, Call):
            if isinstance(node.op, OpDef):
                head = node.op.name
                extra = [f"{k}={_fmt_value(v)}" for k, v in node.attrs.items() if node.op.attrs.get(k) != v]
            else:
                head, extra = a(node.op), []
            return f"{head}(" + ", ".join([a(x) for x in node.args] + extra) + ")" + _type_comment(node)
        if isinstance(node, Tuple):
            return "(" + ", ".join(a(f) for f in node.fields) + ("," if len(node.fields) == 1 else "") + ")"
        if isinstance(node, TupleGetItem):
            return f"{a(node.tuple_value)}.{node.index}" + _type_comment(node)
        if isinstance(node, Function):
            return self.function(node, None)
        if isinstance(node, Let):
            value = a(node.value)
            self.lines.append(f"{self.indent}let {self.var_name(node.var)} = {value};")
            return self.emit(node.body, refs)
        if isinstance(node, If):
            inner_t = _Printer(self.indent + "  ", self.names, self.consts)
            t = inner_t.emit(node.true_branch, dict(refs))
            inner_f = _Printer(self.indent + "  ", self.names, self.consts)
            f = inner_f.emit(node.false_branch, dict(refs))
            return ("if (" + a(node.cond) + ") {\n" + "\n".join(inner_t.lines + [self.indent + "  " + t])
                    + f"\n{self.indent}}} else {{\n" + "\n".join(inner_f.lines + [self.indent + "  " + f])
                    + f"\n{self.indent}}}")
        return type(node).__name__

    def function(self, f: Function, name: str | None) -> str:
        inner = _Printer(self.indent + "  ", self.names, self.consts)
        params = [f"{inner.var_name(p)}" + (f": {p.type_annotation}" if p.type_annotation else "") for p in f.params]
        params += [f"{k}={_fmt_value(v)}" for k, v in f.attrs.items()]
        result = inner.emit(f.body, {})
        ft = f.__dict__.get("_checked_type")
        ret = f.ret_type or (ft.ret_type if ft is not None else None)
        head = f"def @{name}(" if name else "fn ("
        head += ", ".join(params) + ")" + (f" -> {ret}" if ret is not None else "") + " {"
        close = self.indent[:-2] + "}" if name else self.indent + "}"
        return "\n".join([head] + inner.lines + [inner.indent + result, close])


def astext(expr, name: str = "main") -> str:
    """Text of a relay expression or Function (a Function prints as ``def @main``)."""
    p = _Printer()
    if isinstance(expr, Function):
        p.indent = ""
        text = p.function(expr, name)
    else:
        result = p.emit(expr, {})
        text = "\n".join(p.lines + [p.indent + result])
    if p.consts:
        text += "\n/* meta: " + ", ".join(f"[{i}] {c.data.dtype}{list(c.data.shape)}" for i, c in enumerate(p.consts)) + " */"
    return text


def _print_order(body) -> list:
    """Post order, but a call's arguments come before a Function it calls, so each fused
    function is printed right above its use."""
    def kids(node):
        if isinstance(node, Call) and isinstance(node.op, Function):
            return list(node.args) + [node.op]
        return children(node)

    order: list = []
    _walk(body, {}, lambda n: order.append(n) or True, kids)
    return order


# The text form of every relay expression (kiln/relay/expr.py RelayExpr.text_form): set here, above it.
RelayExpr.text_form = staticmethod(astext)
