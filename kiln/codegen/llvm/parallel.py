"""Outlining PARALLEL loops into tasks for the module's thread pool (thread_pool.py).

``for i in parallel(lo, lo + n): body`` becomes

    closure = {captured values...}
    rc = __kiln_parallel_for(@task, &closure, n)      ; error -> return -1
    task(begin, end, closure): for j in [begin, end): i = lo + j; body

The task unpacks the closure and calls a body function whose pointer parameters are
``noalias`` (the same function shape the entry point uses), so LLVM keeps the aliasing facts
it would have had without outlining. Inside a task, parallel loops run serially.
"""

from __future__ import annotations

from ...ir import expr as E
from ...ir.dtype import INT64 as _I64
from ...ir.functor import Visitor
from .ir import llvm_type


class _FreeVars(Visitor):
    """Vars a statement reads that it does not define itself, in first-use order."""

    def __init__(self):
        super().__init__()
        self.used: dict = {}
        self.defined: set = set()

    def _use(self, v) -> None:
        if v not in self.defined and v not in self.used:
            self.used[v] = None

    def visit_Var(self, v) -> None:
        self._use(v)

    visit_SizeVar = visit_Var

    def visit_BufferLoad(self, node) -> None:
        self._use(node.buffer.data)
        self.generic_visit(node)

    def visit_BufferStore(self, node) -> None:
        self._use(node.buffer.data)
        self.generic_visit(node)

    def _define(self, v, node) -> None:
        self.defined.add(v)
        self.generic_visit(node)

    def visit_For(self, s) -> None:
        self._define(s.loop_var, s)

    def visit_LetStmt(self, s) -> None:
        self.visit(s.value)
        self.defined.add(s.var)
        self.visit(s.body)

    def visit_Let(self, e) -> None:
        self.visit(e.value)
        self.defined.add(e.var)
        self.visit(e.body)

    def visit_Allocate(self, s) -> None:
        self._define(s.buffer.data, s)


def free_vars(stmt, exclude=()) -> list:
    finder = _FreeVars()
    finder.defined.update(exclude)
    finder.visit(stmt)
    return [v for v in finder.used if v not in finder.defined]


class ParallelCodegen:
    """Mixin: outlines parallel loops. Needs the function codegen's state and `outline`."""

    def parallel_for(self, s) -> None:
        fw, mw = self.fw, self.mw
        var = s.loop_var
        lo_var = E.Var(f"{var.name}.lo", var.dtype)
        captures = [lo_var] + free_vars(s.body, exclude=(var,))
        values = {lo_var: self.expr(s.min)}
        for v in captures[1:]:
            values[v] = self.expr(v)
        task = mw.unique(f"{self.symbol}.par.{var.name}")
        self.emit_task(task, captures, var, lo_var, s.body)
        # Pack the closure in the caller's frame (alive until the launch returns).
        struct = "{ " + ", ".join(self._capture_type(v) for v in captures) + " }"
        closure = fw.alloca(struct, 1, 16)
        for k, v in enumerate(captures):
            slot = fw.emit(f"getelementptr inbounds {struct}, ptr {closure}, i32 0, i32 {k}", "p")
            fw.emit_void(f"store {self._capture_type(v)} {values[v]}, ptr {slot}")
        total = self.cast(self.expr(s.extent), s.extent.dtype, _I64)
        rc = fw.emit(f"call i32 @__kiln_parallel_for(ptr @{task}, ptr {closure}, i64 {total})")
        self.fail_if(fw.emit(f"icmp ne i32 {rc}, 0"), None)

    def _capture_type(self, v) -> str:
        return llvm_type(v.dtype)

    def emit_task(self, task: str, captures: list, var, lo_var, body) -> None:
        """The task function: unpack the closure, then call the outlined body function."""
        body_name = self.mw.unique(task + ".body")
        begin, end = E.Var("begin", _I64), E.Var("end", _I64)
        # a function writer like this one (the FunctionCodegen this class is mixed into)
        inner = type(self)(self.mw, body_name, self.symbol, self.target_info, in_parallel=True)
        aligns = {v: self.align[v] for v in captures if v in self.align}

        def loop(cg):
            cg.serial_loop(_J, cg.vars[begin], cg.vars[end], lambda: _bind_and_run(cg, var, lo_var, body), None)

        inner.outline([begin, end] + captures, aligns, loop)
        struct = "{ " + ", ".join(self._capture_type(v) for v in captures) + " }"
        lines = [f"define internal i32 @{task}(i64 %begin, i64 %end, ptr %closure) nounwind {{", "entry:"]
        args = ["i64 %begin", "i64 %end"]
        for k, v in enumerate(captures):
            ty = self._capture_type(v)
            lines.append(f"  %p{k} = getelementptr inbounds {struct}, ptr %closure, i32 0, i32 {k}")
            lines.append(f"  %c{k} = load {ty}, ptr %p{k}")
            args.append(f"{ty} %c{k}")
        lines.append(f"  %rc = call i32 @{body_name}({', '.join(args)})")
        lines += ["  ret i32 %rc", "}", ""]
        self.mw.functions.append("\n".join(lines))


_J = E.Var("j", _I64)


def _bind_and_run(cg, var, lo_var, body) -> None:
    """Inside the task loop: var = lo + j (in var's dtype), then the loop body."""
    j = cg.vars[_J]
    jv = cg.cast(j, _I64, var.dtype)
    cg.vars[var] = cg.binary("add", cg.vars[lo_var], jv, var.dtype, "nsw" if var.dtype.is_int else "")
    cg.stmt(body)
