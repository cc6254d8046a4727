"""Tensor cores in CUDA kernels: wmma fragments and the four warp-wide matrix calls.

Tensor intrinsics (kiln/topi/cuda/tensor_intrin.py) lower to calls on buffers in the scopes
``wmma.matrix_a``, ``wmma.matrix_b`` and ``wmma.accumulator``; each such buffer is an array of
fragments, one per tile (kiln/te/tensorize.py numbers them):

    tir.tvm_fill_fragment(frag, m, n, k, index, value)
    tir.tvm_load_matrix_sync(frag, m, n, k, index, ptr, stride, "row_major" | "col_major")
    tir.tvm_mma_sync(d, d_index, a, a_index, b, b_index, c, c_index)
    tir.tvm_store_matrix_sync(frag, m, n, k, index, ptr, stride, "row_major" | "col_major")

NVRTC's pip wheel has no ``mma.h`` (nvcuda::wmma), so the kernels carry small functions of their
own around the PTX ``wmma.load`` / ``wmma.mma`` / ``wmma.store`` instructions, emitted only for the
shapes, layouts and types a kernel uses. A fragment is a struct of the registers PTX names:
8 f16x2 for A and B, 8 floats for a float32 accumulator, 4 f16x2 for a float16 one (the same
for the shapes m16n16k16, m32n8k16 and m8n32k16).
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import expr as E
from ..ir.functor import Visitor, post_order_visit
from ..ir.stmt import Allocate
from . import cuda_mma

OPS = ("tvm_fill_fragment", "tvm_load_matrix_sync", "tvm_mma_sync", "tvm_store_matrix_sync")
SHAPES = {(16, 16, 16), (32, 8, 16), (8, 32, 16)}
_LAYOUT = {"row_major": "row", "col_major": "col"}

STRUCTS = """struct kiln_frag_ab { unsigned x[8]; };   // wmma A or B fragment: 8 x f16x2
struct kiln_frag_bf { unsigned x[4]; };   // bfloat16 A or B fragment (m16n16k16): 4 x bf16x2
struct kiln_frag_f32 { float x[8]; };     // float32 accumulator
struct kiln_frag_f16 { unsigned x[4]; };  // float16 accumulator: 4 x f16x2
__device__ __forceinline__ void kiln_wmma_fill(kiln_frag_f32& f, float v) { for (int i = 0; i < 8; ++i) f.x[i] = v; }
__device__ __forceinline__ void kiln_wmma_fill(kiln_frag_f16& f, half v) {
  unsigned h = v.x; for (int i = 0; i < 4; ++i) f.x[i] = h | (h << 16);
}
"""


class Fragment:
    """What a kernel's fragment buffer holds: scope, element dtype, shape, layout (A/B only)."""

    def __init__(self, buf):
        self.buf = buf
        self.scope = buf.scope
        self.shape = None
        self.layout = None

    @property
    def struct(self) -> str:
        if self.scope != "wmma.accumulator":
            return "kiln_frag_bf" if self.buf.dtype.is_bfloat else "kiln_frag_ab"
        return "kiln_frag_f32" if self.buf.dtype.bits == 32 else "kiln_frag_f16"

    @property
    def tile(self) -> int:
        m, n, k = self.shape
        return {"wmma.matrix_a": m * k, "wmma.matrix_b": k * n, "wmma.accumulator": m * n}[self.scope]


def fragments(kernel) -> dict:
    """{id(data Var): Fragment} for the kernel's wmma buffers, shapes and layouts read off the calls."""
    frags: dict = {}

    class _Find(Visitor):
        def visit_Allocate(self, op):
            if op.buffer.scope.startswith("wmma."):
                frags[id(op.buffer.data)] = Fragment(op.buffer)
            self.generic_visit(op)

    _Find().visit(kernel.body)
    calls = []

    class _Calls(Visitor):
        def visit_Call(self, op):
            if _name(op) in ("tvm_fill_fragment", "tvm_load_matrix_sync", "tvm_store_matrix_sync"):
                calls.append(op)
            self.generic_visit(op)

    _Calls().visit(kernel.body)
    for c in calls:
        f = frags.get(id(c.args[0]))
        if f is None:
            raise CompileError(f"{_name(c)} on {c.args[0]}, which is not a wmma.* buffer of this kernel")
        shape = tuple(_int(a) for a in c.args[1:4])
        if shape not in SHAPES:
            raise CompileError(f"wmma shape m{shape[0]}n{shape[1]}k{shape[2]} is not supported; use "
                               "m16n16k16, m32n8k16 or m8n32k16")
        if f.shape is not None and f.shape != shape:
            raise CompileError(f"fragment {f.buf.name} is used with shapes {f.shape} and {shape}")
        f.shape = shape
        if _name(c) == "tvm_load_matrix_sync" and f.scope != "wmma.accumulator":
            f.layout = _layout(c.args[7])
    for f in frags.values():
        if f.shape is None:
            raise CompileError(f"fragment {f.buf.name} ({f.scope}) is never filled, loaded or stored")
        if f.scope != "wmma.accumulator" and f.buf.dtype.bits != 16:
            raise CompileError(f"fragment {f.buf.name} is {f.buf.dtype}; tensor-core inputs are float16 or bfloat16")
        if f.scope != "wmma.accumulator" and f.buf.dtype.is_bfloat and f.shape != (16, 16, 16):
            raise CompileError(f"fragment {f.buf.name}: bfloat16 tiles are m16n16k16 here, not {f.shape}")
    return frags


def shared_handles(kernel) -> set:
    """ids of the data Vars of the kernel's shared-memory buffers."""
    found = set()
    post_order_visit(kernel.body, lambda n: found.add(id(n.buffer.data))
                     if isinstance(n, Allocate) and n.buffer.scope == "shared" else None)
    return found


def _name(call) -> str:
    return call.op[4:] if call.op.startswith("tir.") else call.op


def _int(e) -> int:
    if not isinstance(e, E.IntImm):
        raise CompileError(f"wmma shapes and layouts must be constants, got {e}")
    return e.value


def _layout(e) -> str:
    text = e.value if isinstance(e, E.StringImm) else None
    if text not in _LAYOUT:
        raise CompileError(f"wmma layout must be 'row_major' or 'col_major', got {e}")
    return _LAYOUT[text]


def _regs(n: int, first: int = 0) -> str:
    return "{" + ",".join(f"%{first + i}" for i in range(n)) + "}"


def _outs(n: int, kind: str, field: str = "f") -> str:
    return ", ".join(f'"={kind}"({field}.x[{i}])' for i in range(n))


def _ins(n: int, kind: str, field: str) -> str:
    return ", ".join(f'"{kind}"({field}.x[{i}])' for i in range(n))


def _acc(dtype_bits: int) -> tuple:
    """(PTX type, register count, asm constraint, struct, C element type) of an accumulator."""
    return ("f32", 8, "f", "kiln_frag_f32", "float") if dtype_bits == 32 else ("f16", 4, "r", "kiln_frag_f16", "half")


def load_helper(f: Fragment, layout: str, shared: bool = False) -> tuple[str, str]:
    """(function name, definition) of a load into fragment f from memory in layout ("row"/"col").
    From shared memory the load names its state space (a 32-bit shared address), so ptxas can use
    the shared-memory matrix loads (LDSM) instead of generic ones."""
    m, n, k = f.shape
    shape = f"m{m}n{n}k{k}"
    if f.scope == "wmma.accumulator":
        ptx, nreg, kind, struct, ctype = _acc(f.buf.dtype.bits)
        which = "c"
    else:
        ptx, nreg, kind, struct, ctype = (("bf16", 4, "r", "kiln_frag_bf", "kiln_bf16") if f.buf.dtype.is_bfloat
                                          else ("f16", 8, "r", "kiln_frag_ab", "half"))
        which = "a" if f.scope == "wmma.matrix_a" else "b"
    space, addr = (".shared", '"r"((unsigned)__cvta_generic_to_shared(p))') if shared else ("", '"l"(p)')
    name = f"kiln_wmma_load_{which}_{layout}_{shape}_{ptx}{'_shared' if shared else ''}"
    text = (f"__device__ __forceinline__ void {name}({struct}& f, const {ctype}* p, int ld) {{\n"
            f'  asm volatile("wmma.load.{which}.sync.aligned.{layout}.{shape}{space}.{ptx} {_regs(nreg)}, [%{nreg}], '
            f'%{nreg + 1};"\n'
            f'      : {_outs(nreg, kind)} : {addr}, "r"(ld) : "memory");\n}}\n')
    return name, text


def store_helper(f: Fragment, layout: str) -> tuple[str, str]:
    m, n, k = f.shape
    shape = f"m{m}n{n}k{k}"
    ptx, nreg, kind, struct, ctype = _acc(f.buf.dtype.bits)
    name = f"kiln_wmma_store_{layout}_{shape}_{ptx}"
    text = (f"__device__ __forceinline__ void {name}({ctype}* p, const {struct}& f, int ld) {{\n"
            f'  asm volatile("wmma.store.d.sync.aligned.{layout}.{shape}.{ptx} [%0], {_regs(nreg, 1)}, %{nreg + 1};"\n'
            f'      :: "l"(p), {_ins(nreg, kind, "f")}, "r"(ld) : "memory");\n}}\n')
    return name, text


def mma_helper(d: Fragment, a: Fragment, b: Fragment, c: Fragment) -> tuple[str, str]:
    m, n, k = a.shape
    shape = f"m{m}n{n}k{k}"
    if a.layout is None or b.layout is None:
        raise CompileError(f"mma_sync on fragments {a.buf.name}/{b.buf.name} that are never loaded: layout unknown")
    dptx, dn, dk, dstruct, _ = _acc(d.buf.dtype.bits)
    cptx, cn, ck, cstruct, _ = _acc(c.buf.dtype.bits)
    if a.buf.dtype.is_bfloat:  # bfloat16: 4 registers per input fragment, float32 accumulators only
        if dptx != "f32" or cptx != "f32":
            raise CompileError(f"bfloat16 products on tensor cores accumulate in float32, not {d.buf.dtype}")
        nab, types, struct = 4, f"{dptx}.bf16.bf16.{cptx}", "kiln_frag_bf"
    else:
        nab, types, struct = 8, f"{dptx}.{cptx}", "kiln_frag_ab"
    name = f"kiln_wmma_mma_{a.layout}_{b.layout}_{shape}_{types.replace('.', '_')}"
    ops = f"{_regs(dn)}, {_regs(nab, dn)}, {_regs(nab, dn + nab)}, {_regs(cn, dn + 2 * nab)}"
    text = (f"__device__ __forceinline__ void {name}({dstruct}& d, const {struct}& a, const {struct}& b, "
            f"const {cstruct}& c) {{\n"
            f'  asm volatile("wmma.mma.sync.aligned.{a.layout}.{b.layout}.{shape}.{types} {ops};"\n'
            f'      : {_outs(dn, dk, "d")} : {_ins(nab, "r", "a")}, {_ins(nab, "r", "b")}, {_ins(cn, ck, "c")});\n}}\n')
    return name, text


class WmmaPrinter:
    """The CUDA printer's wmma part: fragment declarations and calls; helpers collects what to emit."""

    def __init__(self, printer, kernel):
        self.p = printer
        self.frags = fragments(kernel)
        self.shared = shared_handles(kernel)
        self.helpers: dict[str, str] = {}
        # ldmatrix + mma.sync instead of wmma where the schedule asks and the kernel allows (sm_80+)
        self.mma = bool(self.frags) and getattr(printer, "async_copies", False) and cuda_mma.wanted(kernel) \
            and cuda_mma.usable(kernel, self.frags, self.shared)

    def _helper(self, fn: str, text: str) -> str:
        if self.mma:
            self.helpers.setdefault("kiln_lane", cuda_mma.LANE)
        self.helpers[fn] = text
        return fn

    def declare(self, s) -> None:
        f = self.frags[id(s.buffer.data)]
        total = 1
        for x in s.extents:
            total *= _int(x)
        count = max(1, total // f.tile)
        name, old = self.p.declare(s.buffer.data)
        self.p.emit(f"{f.struct} {name}[{count}];")
        self.p.stmt(s.body)
        self.p.restore(s.buffer.data, old)

    def frag(self, var, index) -> tuple:
        f = self.frags.get(id(var))
        if f is None:
            raise CompileError(f"{var} is not a wmma fragment buffer of this kernel")
        return f, f"{self.p.name(var)}[{self.p.expr(index)}]"

    def call(self, e) -> str:
        name, a = _name(e), e.args
        if name == "tvm_fill_fragment":
            f, ref = self.frag(a[0], a[4])
            ctype = "float" if f.struct == "kiln_frag_f32" else "half"
            return f"kiln_wmma_fill({ref}, ({ctype})({self.p.expr(a[5])}))"
        if name in ("tvm_load_matrix_sync", "tvm_store_matrix_sync"):
            f, ref = self.frag(a[0], a[4])
            layout = _layout(a[7])
            ptr, stride = self.p.expr(a[5]), self.p.expr(a[6])
            if self.mma:
                fn = self._helper(*(cuda_mma.load(f.scope) if name == "tvm_load_matrix_sync"
                                    else cuda_mma.store(f.buf.dtype.bits)))
                return f"{fn}({ref}, {ptr}, {stride})" if name == "tvm_load_matrix_sync" else f"{fn}({ptr}, {ref}, {stride})"
            if name == "tvm_load_matrix_sync":
                ptr = a[5]
                from_shared = isinstance(ptr, E.Call) and ptr.op == "tir.tvm_access_ptr" and id(ptr.args[1]) in self.shared
                fn, text = load_helper(f, layout, from_shared)
            else:
                fn, text = store_helper(f, layout)
            self.helpers[fn] = text
            ptr, stride = self.p.expr(a[5]), self.p.expr(a[6])
            return f"{fn}({ref}, {ptr}, {stride})" if name == "tvm_load_matrix_sync" else f"{fn}({ptr}, {ref}, {stride})"
        if name == "tvm_mma_sync":
            (d, dref), (fa, aref), (fb, bref), (c, cref) = (self.frag(a[i], a[i + 1]) for i in (0, 2, 4, 6))
            fn, text = cuda_mma.mma(d.buf.dtype.bits, c.buf.dtype.bits) if self.mma else mma_helper(d, fa, fb, c)
            self.helpers[fn] = text
            return f"{fn}({dref}, {aref}, {bref}, {cref})"
        raise CompileError(f"unknown wmma call {e.op}")


def access_ptr(printer, e) -> str:
    """tir.tvm_access_ptr(type, data, offset, extent, mask) -> (data + offset)."""
    _, data, offset, _, _ = e.args
    return f"({printer.name(data)} + {printer.expr(offset)})"
