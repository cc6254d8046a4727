"""Split a GPU PrimFunc into a host function and device kernels.

Every outermost loop bound to a GPU thread axis starts a kernel: the loop nest below it
becomes a kernel PrimFunc, and the host function launches it in its place with
``tir.kiln_launch(kernel_id, gx, gy, gz, bx, by, bz, dyn_shared_bytes, *args)``. Inside the
kernel the bound loops are gone: each loop variable is bound (LetStmt) to its thread index
``blockIdx.x`` ... ``threadIdx.z`` (Vars named by their tag), and a loop that uses fewer
threads of an axis than the kernel launches is guarded. ``vthread`` loops are serial loops
(unrolled) inside the kernel.

Kernel PrimFunc: params are the data handles of the global buffers it touches (buffer_map
gives each one's Buffer) then the scalar Vars it reads; attrs are ``global_symbol``
("<func>_kernel<k>"), ``calling_conv`` "kernel", ``kernel_id`` (index in the module),
``thread_extent`` ({tag: extent PrimExpr}, blockIdx.* then threadIdx.*), ``thread_tags``,
``thread_vars`` ({tag: the Var standing for that index}), ``shape_vars`` (the scalar params
that are tensor dimensions, hence >= 0: a frozenset of those Vars) and ``host_symbol``.
"""

from __future__ import annotations

from dataclasses import replace

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.dtype import BOOL_T, INT32
from kiln.ir.functor import Mutator, Visitor, post_order_visit
from kiln.ir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, LetStmt, PrimFunc
from kiln.ir.structural import structural_equal
from kiln.tir.simplify import simplify

LAUNCH_OP = "tir.kiln_launch"
TAG_ORDER = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


def is_thread_loop(s) -> bool:
    return isinstance(s, For) and s.kind == ForKind.THREAD_BINDING and not _tag(s).startswith("vthread")


def _tag(s: For) -> str:
    return getattr(s.thread_binding, "thread_tag", "") or ""


def split_host_device(func: PrimFunc, first_kernel_id: int = 0) -> tuple[PrimFunc, list[PrimFunc]]:
    """(host PrimFunc, kernel PrimFuncs) of func; kernel ids count from first_kernel_id."""
    symbol = func.attrs.get("global_symbol", "main")
    splitter = _Splitter(symbol, first_kernel_id)
    # Kernel buffer parameters follow the function's argument order (then its other buffers).
    splitter.order = {id(b.data): k for k, b in enumerate(func.buffer_map.values())}
    # Vars that are dimensions of the function's tensors are never negative (the printer uses
    # plain / and % on them).
    splitter.shape_vars = {id(d) for b in func.buffer_map.values() for d in b.shape if isinstance(d, E.Var)}
    # Buffers reached only through pointers (tensor-core loads/stores: tir.tvm_access_ptr), by data Var.
    splitter.by_data = {id(b.data): b for b in func.buffer_map.values()}
    post_order_visit(func.body, lambda n: splitter.by_data.setdefault(id(n.buffer.data), n.buffer)
                     if isinstance(n, Allocate) else None)
    body = splitter.visit(func.body)
    host = replace(func, body=body, attrs={**func.attrs, "kiln.kernels": [k.attrs["global_symbol"] for k in splitter.kernels]})
    return host, splitter.kernels


class _Splitter(Mutator):
    def __init__(self, symbol: str, first_id: int):
        super().__init__()
        self.symbol = symbol
        self.first_id = first_id
        self.kernels: list[PrimFunc] = []
        self.order: dict = {}
        self.shape_vars: set = set()
        self.by_data: dict = {}

    def visit_For(self, op):
        if is_thread_loop(op):
            return self._kernel(op)
        if op.kind == ForKind.THREAD_BINDING:  # a vthread loop outside every kernel
            raise CompileError(f"{self.symbol}: loop {op.loop_var.name} is bound to {_tag(op)} outside any "
                               "blockIdx/threadIdx loop; bind the outer axes to blockIdx/threadIdx first")
        return self.generic_visit(op)

    def _kernel(self, region: For):
        extents = _thread_extents(region, self.symbol)
        idx_vars = {tag: E.Var(tag, INT32) for tag in extents}
        body = _Threads(extents, idx_vars, self.symbol).visit(region)
        bufs, scalars = _free(body, {id(v) for v in idx_vars.values()}, self.by_data)
        bufs.sort(key=lambda b: self.order.get(id(b.data), len(self.order)))
        kid = self.first_id + len(self.kernels)
        name = f"{self.symbol}_kernel{kid - self.first_id}"
        params = tuple([b.data for b in bufs] + scalars)
        tags = [t for t in TAG_ORDER if t in extents]
        kernel = PrimFunc(params, body, None, {b.data: b for b in bufs}, {
            "global_symbol": name, "calling_conv": "kernel", "kernel_id": kid, "host_symbol": self.symbol,
            "thread_extent": {t: extents[t] for t in tags}, "thread_tags": tags,
            "thread_vars": {t: idx_vars[t] for t in tags},
            "shape_vars": frozenset(v for v in scalars if id(v) in self.shape_vars),
        })
        self.kernels.append(kernel)
        one = E.const(1)
        launch = [extents.get(t, one) for t in TAG_ORDER]
        args = (E.const(kid), *launch, E.const(0),
                *[b.data for b in bufs], *scalars)
        return Evaluate(E.Call(INT32, LAUNCH_OP, args))


def _thread_extents(region, symbol: str) -> dict:
    """Launch extent of every thread tag used in the region: the largest of its loops'."""
    found: dict = {}

    class _Collect(Visitor):
        def visit_For(self, op):
            if is_thread_loop(op):
                found.setdefault(_tag(op), []).append(simplify(op.extent))
            self.visit(op.body)

    _Collect().visit(region)
    out = {}
    for tag, exts in found.items():
        consts = [e.value for e in exts if isinstance(e, E.IntImm)]
        if len(consts) == len(exts):
            out[tag] = E.const(max(consts))
            continue
        first = exts[0]
        if not all(structural_equal(first, e) for e in exts[1:]):
            raise CompileError(f"{symbol}: {tag} is bound to loops of different extents "
                               f"({', '.join(map(str, exts))}) in one kernel; give them the same extent")
        out[tag] = first
    return out


class _Threads(Mutator):
    """Bound loops -> LetStmt(loop_var, thread index), guarded when the loop is shorter."""

    def __init__(self, extents: dict, idx_vars: dict, symbol: str):
        super().__init__()
        self.extents, self.idx_vars, self.symbol = extents, idx_vars, symbol

    def visit_For(self, op):
        body = self.visit(op.body)
        if op.kind != ForKind.THREAD_BINDING:
            return op if body is op.body else replace(op, body=body)
        tag = _tag(op)
        if tag.startswith("vthread"):
            return replace(op, kind=ForKind.UNROLLED, thread_binding=None, body=body)
        idx = self.idx_vars[tag]
        ext = simplify(op.extent)
        full = self.extents[tag]
        same = (ext.value == full.value) if isinstance(ext, E.IntImm) and isinstance(full, E.IntImm) \
            else structural_equal(ext, full)
        if not same:
            if _has_barrier(body):
                raise CompileError(f"{self.symbol}: a loop bound to {tag} runs {ext} threads where the kernel "
                                   f"launches {full}, and it waits at a barrier that the other threads "
                                   f"would not reach; bind it with the kernel's extent ({full})")
            body = IfThenElse(E.LT(idx, E.cast(ext, INT32), BOOL_T), body)
        value = idx if op.loop_var.dtype == INT32 else E.cast(idx, op.loop_var.dtype)
        return LetStmt(op.loop_var, value, body)


def _has_barrier(stmt) -> bool:
    found = []

    class _Find(Visitor):
        def visit_Call(self, op):
            if op.op == "tir.tvm_storage_sync":
                found.append(op)
            self.generic_visit(op)

    _Find().visit(stmt)
    return bool(found)


def _free(body, thread_vars: set, by_data: dict | None = None):
    """Global buffers (by first use) and scalar Vars a kernel body uses but does not define."""
    bufs: list = []
    scalars: list = []
    seen_buf: set = set()
    defined: set = set()
    seen_var: set = set()

    class _Uses(Visitor):
        def visit_Allocate(self, op):
            defined.add(id(op.buffer.data))
            self.generic_visit(op)

        def visit_LetStmt(self, op):
            defined.add(id(op.var))
            self.generic_visit(op)

        def visit_Let(self, op):
            defined.add(id(op.var))
            self.generic_visit(op)

        def visit_For(self, op):
            defined.add(id(op.loop_var))
            self.generic_visit(op)

        def _buffer(self, buf):
            if id(buf.data) not in seen_buf:
                seen_buf.add(id(buf.data))
                bufs.append(buf)

        def visit_BufferLoad(self, op):
            self._buffer(op.buffer)
            self.generic_visit(op)

        def visit_BufferStore(self, op):
            self._buffer(op.buffer)
            self.generic_visit(op)

        def visit_Call(self, op):
            if op.op == "tir.tvm_access_ptr" and by_data and id(op.args[1]) in by_data:
                self._buffer(by_data[id(op.args[1])])
            self.generic_visit(op)

        def visit_Var(self, op):
            if id(op) not in seen_var:
                seen_var.add(id(op))
                scalars.append(op)

    _Uses().visit(body)
    bufs = [b for b in bufs if id(b.data) not in defined]
    buf_data = {id(b.data) for b in bufs}
    scalars = [v for v in scalars if id(v) not in defined and id(v) not in buf_data
               and id(v) not in thread_vars and not v.dtype.is_handle]
    return bufs, scalars



def split_module(mod, caps=None):
    """GPU pipeline step tir.SplitHostDevice: each PrimFunc becomes its host function (same key)
    followed by its kernels (keyed by symbol, kernel ids counting across the module). Kernels
    take the texture layouts (attr "texture", tir.TextureLayouts) of their own parameters."""
    from kiln.ir.module import IRModule

    out, count = {}, 0
    for key, func in mod.items():
        if not isinstance(func, PrimFunc):
            raise CompileError(f"function {key!r} is a {type(func).__name__}, not a lowered PrimFunc")
        host, kernels = split_host_device(func, count)
        count += len(kernels)
        textures = func.attrs.get("texture")
        if textures:
            kernels = [_with_textures(k, textures) for k in kernels]
        out[key] = host
        for k in kernels:
            out[k.attrs["global_symbol"]] = k
    return IRModule(out)


def _with_textures(kernel: PrimFunc, textures: dict) -> PrimFunc:
    mine = {var: t for var, t in textures.items() if any(p is var for p in kernel.params)}
    attrs = {k: v for k, v in kernel.attrs.items() if k != "texture"}
    return replace(kernel, attrs={**attrs, "texture": mine} if mine else attrs)
