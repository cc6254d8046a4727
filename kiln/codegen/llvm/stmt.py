"""Statements of the loop IR as LLVM control flow.

Loops are emitted in the plain header/body/latch form (LLVM rotates them). Loop kinds map to
loop metadata: UNROLLED asks for full unrolling, VECTORIZED for vectorization; PARALLEL is
outlined into a task for the module's thread pool (llvm/parallel.py), or runs serially when
it is already inside a parallel task. Errors (AssertStmt, failed allocations) write the
message into ``__kiln_last_error`` and return -1.
"""

from __future__ import annotations

from ...errors import CompileError
from ...ir import expr as E
from ...ir.stmt import ForKind
from .ir import llvm_type


class StmtCodegen:
    """Mixin: needs self.fw, self.mw, self.vars, self.func_name, self.in_parallel."""

    def stmt(self, s) -> None:
        method = self._stmt_table.get(type(s))
        if method is None:
            method = getattr(type(self), "stmt_" + type(s).__name__, None)
            if method is None:
                raise CompileError(f"{self.func_name}: the LLVM backend cannot compile "
                                   f"{type(s).__name__} statements; lower them first")
            self._stmt_table[type(s)] = method
        if self.fw.terminated:  # code after an unconditional return is unreachable
            self.fw.start_block(self.fw.label("dead"))
        method(self, s)

    def stmt_SeqStmt(self, s) -> None:
        for part in s.seq:
            self.stmt(part)

    def stmt_Evaluate(self, s) -> None:
        if not isinstance(s.value, (E.IntImm, E.FloatImm, E.StringImm)):
            self.expr(s.value)

    def stmt_LetStmt(self, s) -> None:
        self.vars[s.var] = self.expr(s.value)
        self.stmt(s.body)

    def stmt_AttrStmt(self, s) -> None:
        if s.attr_key in ("thread_extent", "virtual_thread"):
            raise CompileError(f"{self.func_name}: loop bound to a GPU thread axis ({s.attr_key} "
                               f"{s.node}) cannot run on an llvm (CPU) target; remove the bind() "
                               "or build for 'cuda'/'opencl'")
        if s.attr_key == "pragma_auto_unroll_max_step" and isinstance(s.value, E.IntImm):
            saved = self.unroll_max_step
            self.unroll_max_step = s.value.value
            self.stmt(s.body)
            self.unroll_max_step = saved
            return
        self.stmt(s.body)  # pragmas and storage hints need no code

    def stmt_AssertStmt(self, s) -> None:
        cond = self.expr(s.condition)
        failed = self.fw.emit(f"xor i1 {cond}, true")
        msg = s.message.value if isinstance(s.message, E.StringImm) else str(s.message)
        self.fail_if(failed, msg)
        self.stmt(s.body)

    def fail_if(self, failed: str, message: str | None) -> None:
        """Branch to an error return when `failed` (i1) holds; message None keeps the current one."""
        fw = self.fw
        bad, ok = fw.label("fail"), fw.label("ok")
        fw.cond_br(failed, bad, ok, ", !prof !{!\"branch_weights\", i32 1, i32 1048576}")
        fw.start_block(bad)
        if message is not None:
            fw.emit_void(f"call void @__kiln_set_error(ptr {self.mw.string(message[:511])})")
        fw.ret("-1")
        fw.start_block(ok)

    def stmt_IfThenElse(self, s) -> None:
        if isinstance(s.condition, E.IntImm):
            branch = s.then_case if s.condition.value else s.else_case
            if branch is not None:
                self.stmt(branch)
            return
        fw = self.fw
        cond = self.expr(s.condition)
        then_l, end_l = fw.label("then"), fw.label("endif")
        else_l = fw.label("else") if s.else_case is not None else end_l
        fw.cond_br(cond, then_l, else_l)
        fw.start_block(then_l)
        self.stmt(s.then_case)
        if not fw.terminated:
            fw.br(end_l)
        if s.else_case is not None:
            fw.start_block(else_l)
            self.stmt(s.else_case)
            if not fw.terminated:
                fw.br(end_l)
        fw.start_block(end_l)

    def stmt_While(self, s) -> None:
        fw = self.fw
        head, body, end = fw.label("while.cond"), fw.label("while.body"), fw.label("while.end")
        fw.br(head)
        fw.start_block(head)
        fw.cond_br(self.expr(s.condition), body, end)
        fw.start_block(body)
        self.stmt(s.body)
        if not fw.terminated:
            fw.br(head)
        fw.start_block(end)

    # Loops ------------------------------------------------------------------------------------
    def stmt_For(self, s) -> None:
        if s.kind == ForKind.THREAD_BINDING:
            raise CompileError(f"{self.func_name}: loop {s.loop_var.name!r} is bound to a GPU thread "
                               "axis; llvm (CPU) targets cannot run it. Remove the bind() or build for cuda")
        if s.kind == ForKind.PARALLEL and not self.in_parallel:
            self.parallel_for(s)
            return
        meta = None
        if s.kind == ForKind.UNROLLED and isinstance(s.extent, E.IntImm):
            meta = self.mw.loop_metadata('!{!"llvm.loop.unroll.full"}')
        # An UNROLLED loop whose extent is not a constant (loop partitioning leaves e.g.
        # min(37 - 8 * i, 8) iterations) cannot be fully unrolled; asking LLVM to would only make
        # it warn "loop not unrolled". Such loops get the serial loop's metadata instead.
        elif s.kind == ForKind.VECTORIZED:
            meta = self.mw.loop_metadata('!{!"llvm.loop.vectorize.enable", i1 true}')
        elif self.unroll_max_step and isinstance(s.extent, E.IntImm) and s.extent.value <= self.unroll_max_step:
            meta = self.mw.loop_metadata('!{!"llvm.loop.unroll.full"}')
        elif self._has_vectors(s):
            # The body is already vector code: re-vectorizing it only makes remainder loops.
            meta = self.mw.loop_metadata('!{!"llvm.loop.vectorize.width", i32 1}',
                                         '!{!"llvm.loop.interleave.count", i32 1}')
        lo = self.expr(s.min)
        end = self.binary("add", lo, self.expr(s.extent), s.loop_var.dtype, "nsw") \
            if not _is_zero(s.min) else self.expr(s.extent)
        self.serial_loop(s.loop_var, lo, end, lambda: self.stmt(s.body), meta)

    def serial_loop(self, var, lo: str, end: str, body, meta: str | None) -> None:
        """for var in [lo, end): body(), with var bound to the induction value."""
        fw = self.fw
        ty = llvm_type(var.dtype)
        pre = fw.block
        head, loop, done = fw.label("for.head"), fw.label("for.body"), fw.label("for.end")
        fw.br(head)
        fw.start_block(head)
        iv = fw.tmp(var.name.replace(".", "_") + ".")
        phi_at = len(fw.body)
        fw.body.append("")  # the phi, filled in once the latch block is known
        more = fw.emit(f"icmp slt {ty} {iv}, {end}")
        fw.cond_br(more, loop, done)
        fw.start_block(loop)
        saved = self.vars.get(var)
        self.vars[var] = iv
        body()
        if saved is not None:
            self.vars[var] = saved
        nxt = fw.emit(f"add nsw {ty} {iv}, 1")
        latch = fw.block
        fw.br(head, f", !llvm.loop {meta}" if meta else "")
        fw.body[phi_at] = f"  {iv} = phi {ty} [ {lo}, %{pre} ], [ {nxt}, %{latch} ]"
        fw.start_block(done)

    def _has_vectors(self, s) -> bool:
        found = self._vector_cache.get(id(s))
        if found is None:
            from ...ir.functor import post_order_visit
            hits = []
            post_order_visit(s, lambda n: hits.append(1) if isinstance(n, (E.Ramp, E.Broadcast)) else None)
            found = self._vector_cache[id(s)] = bool(hits)
        return found


def _is_zero(e) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0
