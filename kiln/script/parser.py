"""TVMScript text to TIR: ``@T.prim_func`` functions and ``@I.ir_module`` classes, read with ``ast``.

The body is never run as Python. Statements that bind something for the rest of their block
(``x: T.int32 = v``, ``A = T.allocate(...)``, ``T.attr(...)``, ``tx = T.launch_thread(...)``,
``assert``) take the following statements as their body, as TVMScript does.

Blocks (``with T.block("C"):``) become ``BlockRealize``/``Block`` nodes (kiln/ir/block.py), kept
until ``tir.LowerBlocks`` runs first in the TIR pipeline, so that ``tvm.tir.Schedule`` can work on
them: ``T.axis.spatial/reduce/remap`` declare the block's iteration variables and bind them,
``T.reads``/``T.writes`` (inferred from the body when absent), ``T.where``, ``T.block_attr``,
``T.init()`` and the block's own ``T.alloc_buffer`` go into the block.
"""

from __future__ import annotations

import ast
import textwrap

from kiln.errors import ScriptError

from kiln.ir import expr as E
from kiln.ir.dtype import HANDLE_T, INT32
from kiln.ir.module import IRModule
from kiln.ir.stmt import (
    Allocate, AssertStmt, AttrStmt, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse, LetStmt,
    PrimFunc, SeqStmt, While,
)
from kiln.ir.structural import structural_equal

from .exprs import ExprParser, _Builtin, _DTypeName

_KINDS = {"serial": ForKind.SERIAL, "parallel": ForKind.PARALLEL, "vectorized": ForKind.VECTORIZED,
          "unroll": ForKind.UNROLLED, "thread_binding": ForKind.THREAD_BINDING}
_BINDERS = {"allocate", "alloc_buffer", "launch_thread", "attr"}


def _seq(items: list):
    flat = []
    for s in items:
        if isinstance(s, SeqStmt):
            flat.extend(s.seq)
        elif s is not None:
            flat.append(s)
    if not flat:
        return Evaluate(E.const(0))
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


MAX_DEPTH = 100  # nesting of the syntax tree; the parser and the IR passes recurse over it


def _check_depth(tree, parser) -> None:
    """Refuse a tree deeper than MAX_DEPTH before any recursive walk (iteratively, no recursion)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise parser.error(node, f"the source nests more than {MAX_DEPTH} levels deep; split the expression "
                                     "into several statements")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


class _Block:
    """What the statements of a ``with T.block(...)`` body declared so far."""

    def __init__(self, name: str, depth: int):
        self.name, self.depth = name, depth
        self.iter_vars: list = []
        self.values: list = []
        self.reads = self.writes = self.init = self.predicate = None
        self.alloc_buffers: list = []
        self.annotations: dict = {}


class Parser(ExprParser):
    def __init__(self, source: str, line_offset: int = 0, outer: dict | None = None, filename: str = "<script>"):
        dedented = textwrap.dedent(source)
        first = next((ln for ln in source.splitlines() if ln.strip()), "")
        first_d = next((ln for ln in dedented.splitlines() if ln.strip()), "")
        self.col_offset = len(first) - len(first_d)
        self.source = dedented
        self.lines = dedented.splitlines()
        self.line_offset = line_offset
        self.filename = filename
        self.outer = dict(outer or {})
        self.t_aliases = {"T"} | {k for k, v in self.outer.items() if getattr(v, "__name__", "") == "kiln.script.tir"}
        self.scopes: list[dict] = []
        self.blocks: list[_Block] = []
        self.loop_ranges: dict[int, E.Range] = {}  # id(loop var) -> its range, for T.axis.remap

    # Entry points ------------------------------------------------------------------------
    def parse_tree(self):
        if "\0" in self.source:
            line = self.source.count("\n", 0, self.source.index("\0")) + 1
            raise ScriptError("the source holds a NUL character; TVMScript is text (was a binary file passed?)",
                              line + self.line_offset, 0, "", self.filename)
        try:
            tree = ast.parse(self.source)
        except SyntaxError as exc:
            exc.col_offset = max((exc.offset or 1) - 1, 0)
            raise self.error(exc, f"invalid Python syntax: {exc.msg}") from None
        except RecursionError:  # Python's own parser refuses this depth
            raise ScriptError(f"the source nests deeper than Python can parse; at most {MAX_DEPTH} levels of "
                              "brackets and operators are supported", 0, 0, "", self.filename) from None
        _check_depth(tree, self)
        return tree

    def module(self, cls: ast.ClassDef) -> IRModule:
        funcs = {}
        for item in cls.body:
            if isinstance(item, ast.FunctionDef):
                funcs[item.name] = self.prim_func(item)
            elif not (isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant)):
                raise self.error(item, f"{self.text(item)}: an ir_module class holds only @T.prim_func functions")
        return IRModule(funcs)

    def prim_func(self, fdef: ast.FunctionDef) -> PrimFunc:
        self.scopes = [{}]
        self.func_state = {"params": [], "buffer_map": {}, "attrs": {}, "threads": {}}
        for arg in fdef.args.args:
            self.param(arg)
        body = self.stmts(fdef.body, top=True)
        st = self.func_state
        return PrimFunc(tuple(st["params"]), body, None, st["buffer_map"], st["attrs"])

    def param(self, arg: ast.arg) -> None:
        ann = arg.annotation
        if ann is None:
            raise self.error(arg, f"parameter {arg.arg} needs an annotation: T.Buffer((n,), \"float32\"), T.handle or T.int32")
        if isinstance(ann, ast.Subscript) and self.t_name(ann.value) == "Buffer":
            ann = ast.Call(ann.value, list(ann.slice.elts) if isinstance(ann.slice, ast.Tuple) else [ann.slice], [])
            ast.copy_location(ann, arg.annotation)
        if isinstance(ann, ast.Call) and self.t_name(ann.func) == "Buffer":
            buf = self.make_buffer(arg.arg, ann)
            handle = E.Var(arg.arg, HANDLE_T)
            self.func_state["params"].append(handle)
            self.func_state["buffer_map"][handle] = buf
            self.scopes[-1][arg.arg] = buf
            return
        kind = self.ev(ann)
        if not isinstance(kind, _DTypeName) and not (isinstance(kind, _Builtin) and kind.name == "handle"):
            raise self.error(ann, f"{self.text(ann)}: a parameter is a T.Buffer(...), T.handle or a scalar T.<dtype>")
        var = E.Var(arg.arg, kind.dtype if isinstance(kind, _DTypeName) else HANDLE_T)
        self.func_state["params"].append(var)
        self.scopes[-1][arg.arg] = var

    def make_buffer(self, name: str, call: ast.Call, shape_node=None) -> Buffer:
        args = list(call.args)
        kw = {k.arg: k.value for k in call.keywords}
        shape_node = shape_node if shape_node is not None else (args.pop(0) if args else kw.pop("shape", None))
        if shape_node is None:
            raise self.error(call, f"{self.text(call)}: a buffer needs a shape")
        shape = self.ev(shape_node)
        shape = shape if isinstance(shape, (tuple, list)) else (shape,)
        dt = self.dtype_arg(args.pop(0) if args else kw.pop("dtype")) if args or "dtype" in kw else self.dtype_arg(ast.Constant("float32"))
        data = self.ev(kw.pop("data")) if "data" in kw else None
        if isinstance(data, Buffer):
            data = data.data
        if data is not None and not (isinstance(data, E.Var) and data.dtype.is_handle):
            raise self.error(call, f"{self.text(call)}: data= must be a handle (a buffer's .data)")
        strides = tuple(self.to_expr(s, call) for s in self.ev(kw.pop("strides"))) if "strides" in kw else ()
        elem_offset = self.expr(kw.pop("elem_offset")) if "elem_offset" in kw else None
        scope = self.ev(kw.pop("scope")) if "scope" in kw else "global"
        offset_factor = self.ev(kw.pop("offset_factor")) if "offset_factor" in kw else 0
        kw.pop("align", None)
        if kw:
            raise self.error(call, f"{self.text(call)}: unknown buffer argument {next(iter(kw))}=")
        dims = tuple(self.to_expr(s, shape_node) for s in shape)
        for d in dims:
            if not d.dtype.is_integer or d.dtype.is_bool:
                raise self.error(shape_node, f"{self.text(shape_node)}: buffer dimensions must be integers, got {d.dtype}")
        return Buffer(name, data if data is not None else E.Var(name, HANDLE_T), dt, dims, strides, elem_offset,
                      scope, offset_factor)

    # Statements --------------------------------------------------------------------------
    def stmts(self, nodes: list, top: bool = False):
        out = []
        header = top  # still in the function's leading declarations (attrs, match_buffer, vars)
        for k, node in enumerate(nodes):
            rest = nodes[k + 1:]
            s = self.stmt(node, rest, header)
            header = header and (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                                 or self._is_header(node))
            if isinstance(s, _Bound):
                out.append(s.stmt)
                break
            if s is not None:
                out.append(s)
        return _seq(out)

    def _is_header(self, node) -> bool:
        call = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
        return isinstance(call, ast.Call) and self.t_name(call.func) in ("func_attr", "match_buffer", "Buffer") or (
            isinstance(call, ast.Call) and isinstance(self._peek(call.func), _DTypeName) and not call.args)

    def _peek(self, func):
        try:
            return self.ev(func)
        except Exception:  # noqa: BLE001 - only a probe
            return None

    def scoped(self, nodes, bindings: dict | None = None):
        self.scopes.append(dict(bindings or {}))
        try:
            return self.stmts(nodes)
        finally:
            self.scopes.pop()

    def stmt(self, node, rest: list, header: bool):
        method = getattr(self, "st_" + type(node).__name__, None)
        if method is None:
            raise self.error(node, f"{type(node).__name__} statements are not supported in TVMScript")
        return method(node, rest, header)

    def st_Pass(self, node, rest, header):
        return None

    def st_Expr(self, node, rest, header):
        v = node.value
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            return None  # a docstring
        name = self.t_name(v.func) if isinstance(v, ast.Call) else None
        if name == "func_attr":
            if not header:
                raise self.error(node, "T.func_attr must come first in the function body")
            attrs = self.ev(v.args[0])
            if not isinstance(attrs, dict):
                raise self.error(v, f"{self.text(v)}: T.func_attr takes a dict")
            self.func_state["attrs"].update(attrs)
            return None
        if name == "evaluate":
            return Evaluate(self.expr(v.args[0]))
        if name == "attr":
            return _Bound(self.attr(v, rest))
        if name in ("reads", "writes", "block_attr", "where"):
            if not self.blocks:
                raise self.error(node, f"T.{name} is only valid inside a T.block")
            self.block_decl(name, v)
            return None
        value = self.ev(v)
        if not isinstance(value, E.PrimExpr):
            raise self.error(node, f"{self.text(node)}: an expression statement must be a call such as T.evaluate(...)")
        return Evaluate(value)

    def attr(self, call, rest):
        node, key, value = (self.ev(a) for a in call.args)
        if isinstance(value, (int, float, bool, str)) and not isinstance(value, bool):
            value = E.convert(value)
        return AttrStmt(node, key, value, self.scoped(rest))

    def st_Assert(self, node, rest, header):
        msg = self.expr(node.msg) if node.msg is not None else E.StringImm("assertion failed")
        return _Bound(AssertStmt(self.expr(node.test), msg, self.scoped(rest)))

    def st_If(self, node, rest, header):
        cond = self.expr(node.test)
        if not cond.dtype.is_bool:
            raise self.error(node.test, f"{self.text(node.test)}: an if condition must be bool, got {cond.dtype}")
        then = self.scoped(node.body)
        other = self.scoped(node.orelse) if node.orelse else None
        return IfThenElse(cond, then, other)

    def st_While(self, node, rest, header):
        return While(self.expr(node.test), self.scoped(node.body))

    def st_AnnAssign(self, node, rest, header):
        if not isinstance(node.target, ast.Name) or node.value is None:
            raise self.error(node, f"{self.text(node)}: write `name: T.<dtype> = value`")
        kind = self.ev(node.annotation)
        dt = kind.dtype if isinstance(kind, _DTypeName) else HANDLE_T if isinstance(kind, _Builtin) and kind.name == "handle" else None
        if dt is None:
            raise self.error(node.annotation, f"{self.text(node.annotation)}: expected T.<dtype>")
        value = self.to_expr(self.ev(node.value), node.value, like=E.Var("_", dt) if not dt.is_handle else None)
        if value.dtype != dt:
            raise self.error(node.value, f"{self.text(node.value)}: type mismatch: value is {value.dtype}, "
                                         f"annotation says {dt}; cast it with T.{dt}(...)")
        var = E.Var(node.target.id, dt)
        return _Bound(LetStmt(var, value, self.scoped(rest, {var.name: var})))

    def st_Assign(self, node, rest, header):
        if len(node.targets) != 1:
            raise self.error(node, f"{self.text(node)}: one assignment target at a time")
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Subscript):
            return self.store(target, value)
        call_name = self.t_name(value.func) if isinstance(value, ast.Call) else None
        if call_name is not None and call_name.startswith("axis."):
            return self.axis(target, value, call_name)
        if not isinstance(target, ast.Name):
            raise self.error(target, f"{self.text(target)}: only names and buffer elements can be assigned")
        name = target.id
        if call_name == "alloc_buffer" and self.blocks and self.blocks[-1].depth == len(self.scopes):
            buf = self.make_buffer(name, value)
            self.blocks[-1].alloc_buffers.append(buf)
            self.scopes[-1][name] = buf
            return None
        if call_name in ("allocate", "alloc_buffer"):
            alloc = self.allocate(name, value, call_name)
            body = self.scoped(rest, {name: alloc.buf})
            return _Bound(Allocate(alloc.buf, alloc.extents, body, alloc.cond))
        if call_name == "launch_thread":
            return _Bound(self.launch_thread(name, value, rest))
        if call_name == "match_buffer":
            self.match_buffer(name, value, header)
            return None
        if call_name == "Buffer":
            self.scopes[-1][name] = self.make_buffer(name, value)
            return None
        if isinstance(value, ast.Call) and not value.args and not value.keywords:
            kind = self._peek(value.func)
            if isinstance(kind, _DTypeName) or isinstance(kind, _Builtin) and kind.name == "handle":
                self.scopes[-1][name] = E.Var(name, kind.dtype if isinstance(kind, _DTypeName) else HANDLE_T)
                return None
        v = self.expr(value)
        var = E.Var(name, v.dtype)
        return _Bound(LetStmt(var, v, self.scoped(rest, {name: var})))

    def store(self, target, value_node):
        buf = self.ev(target.value)
        if not isinstance(buf, Buffer):
            raise self.error(target, f"{self.text(target.value)} is not a buffer")
        indices = self.indices(buf, target)
        from kiln.ir.printer import load_dtype

        want = load_dtype(buf, indices)
        raw = self.ev(value_node)
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            value = E.const(raw, want)
        else:
            value = self.to_expr(raw, value_node)
        if value.dtype != want:
            raise self.error(value_node, f"{self.text(value_node)}: type mismatch: storing {value.dtype} into "
                                         f"{self.text(target.value)} of {want}; cast it with T.{want.element_of()}(...)")
        return BufferStore(buf, value, indices)

    def allocate(self, name, call, kind):
        if kind == "alloc_buffer":
            buf = self.make_buffer(name, call)
            n = None
            for d in buf.shape:
                n = d if n is None else n * d
            from kiln.tir.simplify import simplify

            extents = (simplify(n) if n is not None else E.const(1),)
        else:
            args = list(call.args)
            kw = {k.arg: k.value for k in call.keywords}
            extents = tuple(self.to_expr(x, call) for x in self.ev(args[0]))
            dt = self.dtype_arg(args[1] if len(args) > 1 else kw["dtype"])
            scope = self.ev(args[2]) if len(args) > 2 else self.ev(kw["scope"]) if "scope" in kw else "global"
            shape = tuple(self.to_expr(x, call) for x in self.ev(kw["shape"])) if "shape" in kw else extents
            buf = Buffer(name, E.Var(name, HANDLE_T), dt, shape, (), None, scope)
        cond = self.expr(call_kw(call, "condition")) if call_kw(call, "condition") is not None else None
        return _AllocLater(buf, extents, cond)

    def launch_thread(self, name, call, rest):
        tag = self.ev(call.args[0])
        ext = self.ev(call.args[1])
        ext = ext if isinstance(ext, E.PrimExpr) else E.convert(ext)
        dom = self.ev(call_kw(call, "dom")) if call_kw(call, "dom") is not None else None
        var = E.Var(name, INT32)
        iv = E.IterVar(dom, var, E.IterType.THREAD_INDEX, tag)
        return AttrStmt(iv, "thread_extent", ext, self.scoped(rest, {name: var}))

    def match_buffer(self, name, call, header):
        if not header:
            raise self.error(call, "T.match_buffer must come at the top of the function body")
        param = self.ev(call.args[0])
        if not (isinstance(param, E.Var) and any(param is p for p in self.func_state["params"])):
            raise self.error(call.args[0], f"{self.text(call.args[0])}: T.match_buffer needs a T.handle parameter")
        call2 = ast.Call(call.func, call.args[1:], call.keywords)
        ast.copy_location(call2, call)
        buf = self.make_buffer(name, call2)
        if buf.offset_factor and buf.elem_offset is None:
            # As in TVM: a parameter buffer with an offset_factor starts at a symbolic element
            # offset, which tensor intrinsics read as ``X.elem_offset``.
            from dataclasses import replace

            buf = replace(buf, elem_offset=E.Var(f"{name}_elem_offset", INT32))
        self.func_state["buffer_map"][param] = buf
        self.scopes[-1][name] = buf

    # Loops -------------------------------------------------------------------------------
    def st_For(self, node, rest, header):
        if node.orelse:
            raise self.error(node, "for ... else is not supported")
        it = node.iter
        if not isinstance(it, ast.Call):
            raise self.error(it, f"{self.text(it)}: loop over T.serial/T.parallel/T.grid/... or range(...)")
        fn = self.ev(it.func)
        name = fn.name if isinstance(fn, _Builtin) else None
        if name not in _KINDS and name != "grid":
            raise self.error(it, f"{self.text(it.func)}: not a loop kind (T.serial, T.parallel, T.vectorized, "
                                 "T.unroll, T.thread_binding, T.grid, range)")
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            raise self.error(node.target, f"{self.text(node.target)}: loop variables must be names")
        if name == "grid":
            if len(targets) != len(it.args):
                raise self.error(node, f"T.grid has {len(it.args)} extents for {len(targets)} loop variables")
            loops = [(ForKind.SERIAL, None, self.expr(a), None, {}) for a in it.args]
        else:
            if len(targets) != 1:
                raise self.error(node.target, f"T.{name} binds one loop variable")
            loops = [self.loop_range(name, it)]
        # The loop variable has the dtype of an explicit start, else of the extent.
        vars_ = [E.Var(t.id, (lo if lo is not None else ext).dtype) for t, (_, lo, ext, _, _) in zip(targets, loops)]
        for var, (_, lo, ext, _, _) in zip(vars_, loops):
            self.loop_ranges[id(var)] = E.Range(lo if lo is not None else E.const(0, var.dtype), ext)
        body = self.scoped(node.body, {v.name: v for v in vars_})
        for var, (kind, lo, ext, binding, ann) in reversed(list(zip(vars_, loops))):
            lo = lo if lo is not None else E.const(0, var.dtype)
            body = self.wrap_loop(For(var, lo, ext, kind, None, binding, ann), body)
        return body

    def wrap_loop(self, loop: For, body):
        from dataclasses import replace

        return replace(loop, body=body)

    def loop_range(self, name, call):
        kw = {k.arg: k.value for k in call.keywords}
        pos = [a for a in call.args]
        thread = None
        if name == "thread_binding" and pos and isinstance(pos[-1], ast.Constant) and isinstance(pos[-1].value, str):
            thread = pos.pop().value
        if "thread" in kw:
            thread = self.ev(kw.pop("thread"))
        if name == "thread_binding" and not thread:
            raise self.error(call, f"{self.text(call)}: T.thread_binding needs thread=\"threadIdx.x\" (or blockIdx.x, ...)")
        ann = self.ev(kw.pop("annotations")) if "annotations" in kw else {}
        dom = self.ev(kw.pop("dom")) if "dom" in kw else None
        if "extent" in kw:
            lo, ext = self.expr(pos[0]), self.expr(kw.pop("extent"))
        elif len(pos) == 1:
            lo, ext = None, self.expr(pos[0])
        elif len(pos) == 2:
            a, b = self.ev(pos[0]), self.ev(pos[1])
            if all(isinstance(x, int) for x in (a, b)):
                lo, ext = E.const(a), E.const(b - a)
            else:
                lo, stop = self.to_expr(a, pos[0]), self.to_expr(b, pos[1])
                if isinstance(stop, E.Add) and structural_equal(stop.a, lo):
                    ext = stop.b
                else:
                    from kiln.tir.simplify import simplify

                    ext = simplify(stop - lo)
        else:
            raise self.error(call, f"{self.text(call)}: a loop takes (extent) or (start, stop)")
        if kw:
            raise self.error(call, f"{self.text(call)}: unknown loop argument {next(iter(kw))}=")
        binding = None
        if thread:
            threads = self.func_state["threads"]
            binding = threads.get((thread, id(dom)))
            if binding is None or dom is not None:
                binding = E.IterVar(dom, E.Var(thread, INT32), E.IterType.THREAD_INDEX, thread)
                threads[(thread, id(dom))] = binding
        return _KINDS[name], lo, ext, binding, ann

    # Blocks ------------------------------------------------------------------------------
    def st_With(self, node, rest, header):
        if len(node.items) != 1 or not isinstance(node.items[0].context_expr, ast.Call):
            raise self.error(node, f"{self.text(node)}: expected `with T.block(\"name\"):` or `with T.init():`")
        call = node.items[0].context_expr
        name = self.t_name(call.func)
        if name == "init":
            if not self.blocks:
                raise self.error(node, "T.init() is only valid inside a T.block")
            self.blocks[-1].init = self.scoped(node.body)
            return None
        if name in ("allocate", "LetStmt", "launch_thread", "attr", "Assert"):
            return self.with_binder(name, node, call)
        if name != "block":
            raise self.error(call, f"{self.text(call.func)}: expected T.block, T.init, T.allocate, T.LetStmt, "
                                   "T.launch_thread, T.attr or T.Assert")
        label = self.ev(call.args[0]) if call.args else self.ev(call_kw(call, "name_hint") or ast.Constant(""))
        if not isinstance(label, str):
            raise self.error(call, f"{self.text(call)}: a block's name is a string: T.block(\"C\")")
        block = _Block(label, len(self.scopes) + 1)
        self.blocks.append(block)
        try:
            body = self.scoped(node.body)
        finally:
            self.blocks.pop()
        return self.make_block(block, body)

    def make_block(self, block: _Block, body):
        from kiln.ir.block import Block, BlockRealize
        from kiln.tir.schedule.access import infer_regions

        reads, writes = block.reads, block.writes
        if reads is None or writes is None:
            inferred = infer_regions(body, block.alloc_buffers)
            reads = inferred[0] if reads is None else reads
            writes = inferred[1] if writes is None else writes
        blk = Block(block.name, tuple(block.iter_vars), tuple(reads), tuple(writes), body, block.init,
                    tuple(block.alloc_buffers), block.annotations)
        pred = block.predicate if block.predicate is not None else E.const(True, E.BOOL_T)
        return BlockRealize(tuple(block.values), pred, blk)

    def block_decl(self, name: str, call) -> None:
        block = self.blocks[-1]
        if name == "where":
            block.predicate = self.expr(call.args[0])
            if not block.predicate.dtype.is_bool:
                raise self.error(call, f"{self.text(call)}: T.where needs a bool condition")
        elif name == "block_attr":
            attrs = self.ev(call.args[0]) if call.args else None
            if not isinstance(attrs, dict):
                raise self.error(call, f"{self.text(call)}: T.block_attr takes a dict")
            block.annotations.update(attrs)
        else:
            args = list(call.args)
            if len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)):
                args = list(args[0].elts)
            setattr(block, name, [self.buffer_region(a) for a in args])

    def buffer_region(self, node):
        """``A[vi, 0:4]`` (or a whole buffer ``A``) in T.reads/T.writes: a BufferRegion."""
        from kiln.ir.block import BufferRegion

        if isinstance(node, ast.Subscript):
            buf, idx = self.ev(node.value), node.slice
            items = list(idx.elts) if isinstance(idx, ast.Tuple) else [idx]
        else:
            buf, items = self.ev(node), None
        if not isinstance(buf, Buffer):
            raise self.error(node, f"{self.text(node)}: T.reads/T.writes take buffer regions such as A[vi, 0:4]")
        if items is None:
            return BufferRegion(buf, tuple(E.Range(E.const(0, d.dtype), d) for d in buf.shape))
        if len(items) != len(buf.shape):
            raise self.error(node, f"{self.text(node)}: {buf.name} has {len(buf.shape)} dimensions, the region {len(items)}")
        ranges = []
        for item, dim in zip(items, buf.shape):
            if isinstance(item, ast.Slice):
                if item.step is not None:
                    raise self.error(item, f"{self.text(node)}: a region has no step")
                lo = self.index_expr(self.ev(item.lower), item) if item.lower is not None else E.const(0, dim.dtype)
                hi = self.index_expr(self.ev(item.upper), item) if item.upper is not None else dim
                if isinstance(hi, E.Add) and structural_equal(hi.a, lo):
                    ext = hi.b
                else:
                    from kiln.tir.simplify import simplify

                    ext = simplify(hi - lo)
                ranges.append(E.Range(lo, ext))
            else:
                lo = self.index_expr(self.ev(item), item)
                ranges.append(E.Range(lo, E.const(1, lo.dtype)))
        return BufferRegion(buf, tuple(ranges))

    def with_binder(self, name: str, node, call):
        """``with T.allocate(...) as A:`` and friends: the binding holds for the indented body only."""
        target = node.items[0].optional_vars
        if name in ("allocate", "LetStmt", "launch_thread") and not isinstance(target, ast.Name):
            raise self.error(call, f"{self.text(call)}: write `with T.{name}(...) as name:`")
        if name == "allocate":
            alloc = self.allocate(target.id, call, "allocate")
            body = self.scoped(node.body, {target.id: alloc.buf})
            return Allocate(alloc.buf, alloc.extents, body, alloc.cond)
        if name == "LetStmt":
            value = self.expr(call.args[0])
            dt = self.dtype_arg(call.args[1]) if len(call.args) > 1 else value.dtype
            var = E.Var(target.id, dt)
            return LetStmt(var, value, self.scoped(node.body, {var.name: var}))
        if name == "launch_thread":
            return self.launch_thread(target.id, call, node.body)
        if name == "attr":
            return self.attr(call, node.body)
        msg = self.expr(call.args[1]) if len(call.args) > 1 else E.StringImm("assertion failed")
        return AssertStmt(self.expr(call.args[0]), msg, self.scoped(node.body))

    def axis(self, target, call, name):
        if not self.blocks:
            raise self.error(call, f"T.{name} is only valid inside a T.block")
        block = self.blocks[-1]
        kind = name.split(".", 1)[1]
        if kind == "remap":
            if len(call.args) != 2:
                raise self.error(call, f"{self.text(call)}: T.axis.remap(\"SSR\", [i, j, k])")
            kinds, values = self.ev(call.args[0]), self.ev(call.args[1])
            if not isinstance(kinds, str) or not isinstance(values, (list, tuple)):
                raise self.error(call, f"{self.text(call)}: T.axis.remap takes a string of kinds and a list of loop "
                                       "variables: T.axis.remap(\"SSR\", [i, j, k])")
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            if len(kinds) != len(values) or len(names) != len(values):
                raise self.error(call, f"{self.text(call)}: {len(kinds)} kinds, {len(values)} bindings, {len(names)} names")
            pairs = list(zip(names, kinds, values))
        elif kind in ("spatial", "reduce", "S", "R", "scan", "opaque"):
            kind = {"S": "spatial", "R": "reduce"}.get(kind, kind)
            if len(call.args) != 2:
                raise self.error(call, f"{self.text(call)}: T.axis.{kind}(dom, binding)")
            pairs = [(target, kind, self.ev(call.args[1]))]
        else:
            raise self.unknown_t(call.func, name)
        kinds = {"S": E.IterType.DATA_PAR, "R": E.IterType.COMM_REDUCE, "O": E.IterType.OPAQUE,
                 "spatial": E.IterType.DATA_PAR, "reduce": E.IterType.COMM_REDUCE, "scan": E.IterType.ORDERED,
                 "opaque": E.IterType.OPAQUE}
        for tnode, k, value in pairs:
            if not isinstance(tnode, ast.Name):
                raise self.error(tnode, "block variables must be names")
            if k not in kinds:
                raise self.error(call, f"{self.text(call)}: unknown axis kind {k!r}; use S (spatial), R (reduce) or O")
            expr = self.index_expr(value, call)
            if kind == "remap":
                dom = self.loop_ranges.get(id(expr)) if isinstance(expr, E.Var) else None
                if dom is None:
                    raise self.error(call, f"{self.text(call)}: T.axis.remap binds loop variables; write "
                                           f"{tnode.id} = T.axis.spatial(extent, value) for an expression")
            else:
                dom = self.axis_domain(call.args[0], expr)
            var = E.Var(tnode.id, expr.dtype)
            block.iter_vars.append(E.IterVar(dom, var, kinds[k]))
            block.values.append(expr)
            self.scopes[-1][tnode.id] = var
        return None

    def axis_domain(self, node, value) -> E.Range:
        dom = self.ev(node)
        if isinstance(dom, E.Range):
            return dom
        if isinstance(dom, (tuple, list)) and len(dom) == 2:
            lo, hi = (self.index_expr(x, node) for x in dom)
            from kiln.tir.simplify import simplify

            return E.Range(lo, simplify(hi - lo))
        if isinstance(dom, (tuple, list)):
            raise self.error(node, f"{self.text(node)}: a block axis domain is an extent, (begin, end) or T.Range")
        ext = self.index_expr(dom, node)
        return E.Range(E.const(0, ext.dtype), ext)

    def index_expr(self, value, node):
        """value as an integer expression, or a ScriptError naming node."""
        if isinstance(value, str) or isinstance(value, (tuple, list, dict)):
            raise self.error(node, f"{self.text(node)}: expected an integer expression")
        e = self.to_expr(value, node)
        if not e.dtype.is_integer or e.dtype.is_bool:
            raise self.error(node, f"{self.text(node)}: expected an integer expression, got {e.dtype}")
        return e


class _Bound:
    """A statement that took the rest of its block as its body."""

    def __init__(self, stmt):
        self.stmt = stmt


class _AllocLater:
    def __init__(self, buf, extents, cond):
        self.buf, self.extents, self.cond = buf, extents, cond


def call_kw(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


