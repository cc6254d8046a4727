"""Buffer loads, stores and scratch allocations.

Storage is identified by ``buffer.data`` (a handle Var bound to an LLVM pointer). Indices are
flat, in elements of ``buffer.dtype``. A stride-1 Ramp index (or a scalar index with a wider
dtype, as ``vload`` makes) is one vector load/store. A load whose index is a Ramp of small
constant stride (pooling and strided convolutions read their input so) is one contiguous load
from its first to its last lane plus a shufflevector that picks the lanes: it touches no memory
outside the span the per-lane loads would read. Any other vector index is split into per-lane
accesses, which LLVM may turn back into gathers where the CPU has them.

Alignment: argument tensors may come from numpy, so only element alignment is assumed for
them; scratch memory kiln allocates is 64-byte aligned, and an access whose index is a known
multiple of a power of two gets the matching alignment (aligned vector moves).
"""

from __future__ import annotations

import math

from ...errors import CompileError, InternalError
from ...ir import expr as E
from ...ir.dtype import DType
from .expr import int_literal
from .ir import llvm_type

# Constant-size scratch up to this many bytes lives on the stack (per-thread stacks are at
# least 1 MiB on Android, 8 MiB on Linux); larger or symbolic sizes go to the heap.
STACK_LIMIT = 64 * 1024
SCRATCH_ALIGN = 64
# Strided loads up to this stride read their whole span at once (larger strides would read
# mostly unused elements).
MAX_WIDE_STRIDE = 4


def known_multiple(e) -> int:
    """A positive integer that e is certainly a multiple of (1 if nothing is known)."""
    match e:
        case E.IntImm(value=v):
            return abs(v) or 1 << 30
        case E.Mul(a=a, b=b):
            return known_multiple(a) * known_multiple(b)
        case E.Add(a=a, b=b) | E.Sub(a=a, b=b):
            return math.gcd(known_multiple(a), known_multiple(b))
        case E.Ramp(base=base):
            return known_multiple(base)
        case E.Broadcast(value=v):
            return known_multiple(v)
    return 1


class MemoryCodegen:
    """Mixin: needs self.fw, self.mw, self.vars, self.align (data Var -> bytes), self.intptr."""

    def _base(self, buf) -> str:
        ptr = self.vars.get(buf.data)
        if ptr is None:
            raise CompileError(f"{self.func_name}: buffer {buf.name!r} is accessed outside the "
                               "Allocate or parameter that provides its storage")
        return ptr

    def _index(self, node) -> E.PrimExpr:
        if len(node.indices) != 1:
            raise InternalError(f"{self.func_name}: access to {node.buffer.name!r} has "
                                f"{len(node.indices)} indices; buffers must be flattened before codegen")
        return node.indices[0]

    def _alignment(self, buf, index, elem_bytes: int) -> int:
        base = self.align.get(buf.data, elem_bytes)
        offset = known_multiple(index) * elem_bytes
        return max(min(base, offset & -offset), 1)

    def _address(self, buf, index) -> str:
        """Pointer to element index (a scalar expression) of buf."""
        elem = llvm_type(buf.dtype, memory=True)
        i = self.expr(index)
        return self.fw.emit(f"getelementptr inbounds {elem}, ptr {self._base(buf)}, "
                            f"{llvm_type(index.dtype)} {i}", "p")

    def _contiguous(self, index, lanes: int, buf) -> E.PrimExpr | None:
        """The start index when the access is one contiguous run of `lanes` lanes."""
        if index.dtype.lanes == 1:
            return index
        if isinstance(index, E.Ramp) and isinstance(index.stride, E.IntImm) and index.stride.value == 1 \
                and buf.dtype.lanes == 1:
            return index.base
        return None

    def load(self, node) -> str:
        buf, index, out = node.buffer, self._index(node), node.dtype
        elem_bytes = buf.dtype.bytes
        start = self._contiguous(index, out.lanes, buf)
        if start is not None:
            mem = llvm_type(out, memory=True)
            align = self._alignment(buf, start, elem_bytes)
            value = self.fw.emit(f"load {mem}, ptr {self._address(buf, start)}, align {align}")
        elif self._strided(index, buf, out):
            value = self._strided_load(buf, index, out)
        else:
            value = self._gather(buf, index, out)
        if out.is_bool:
            value = self.fw.emit(f"icmp ne {llvm_type(out, memory=True)} {value}, {self._mem_zero(out)}")
        return value

    @staticmethod
    def _strided(index, buf, out: DType) -> bool:
        return isinstance(index, E.Ramp) and isinstance(index.stride, E.IntImm) \
            and 2 <= index.stride.value <= MAX_WIDE_STRIDE and buf.dtype.lanes == 1 \
            and index.dtype.lanes == out.lanes and not out.is_bool

    def _strided_load(self, buf, index, out: DType) -> str:
        stride, lanes = index.stride.value, out.lanes
        span = (lanes - 1) * stride + 1
        scalar = llvm_type(buf.dtype, memory=True)
        wide = f"<{span} x {scalar}>"
        align = self._alignment(buf, index.base, buf.dtype.bytes)
        block = self.fw.emit(f"load {wide}, ptr {self._address(buf, index.base)}, align {align}")
        mask = ", ".join(f"i32 {lane * stride}" for lane in range(lanes))
        return self.fw.emit(f"shufflevector {wide} {block}, {wide} poison, <{lanes} x i32> <{mask}>")

    def _gather(self, buf, index, out: DType) -> str:
        if buf.dtype.lanes != 1 or index.dtype.lanes != out.lanes:
            raise CompileError(f"{self.func_name}: load of {out} from {buf.name!r} ({buf.dtype}) with a "
                               f"{index.dtype} index is not supported")
        idx = self.expr(index)
        mem, scalar = llvm_type(out, memory=True), llvm_type(buf.dtype, memory=True)
        vec = "poison"
        align = buf.dtype.bytes
        for lane in range(out.lanes):
            i = self.extract(idx, index.dtype, lane)
            p = self.fw.emit(f"getelementptr inbounds {scalar}, ptr {self._base(buf)}, "
                             f"{llvm_type(index.dtype.element_of())} {i}", "p")
            v = self.fw.emit(f"load {scalar}, ptr {p}, align {align}")
            vec = self.fw.emit(f"insertelement {mem} {vec}, {scalar} {v}, i32 {lane}")
        return vec

    def _mem_zero(self, dt: DType) -> str:
        if dt.lanes == 1:
            return "0"
        return "zeroinitializer"

    def stmt_BufferStore(self, s) -> None:
        buf, index = s.buffer, self._index(s)
        value, vdt = self.expr(s.value), s.value.dtype
        mem = llvm_type(vdt, memory=True)
        if vdt.is_bool:
            value = self.fw.emit(f"zext {llvm_type(vdt)} {value} to {mem}")
        start = self._contiguous(index, vdt.lanes, buf)
        if start is not None:
            align = self._alignment(buf, start, buf.dtype.bytes)
            self.fw.emit_void(f"store {mem} {value}, ptr {self._address(buf, start)}, align {align}")
            return
        if buf.dtype.lanes != 1 or index.dtype.lanes != vdt.lanes:
            raise CompileError(f"{self.func_name}: store of {vdt} into {buf.name!r} ({buf.dtype}) with a "
                               f"{index.dtype} index is not supported")
        idx = self.expr(index)
        scalar = llvm_type(buf.dtype, memory=True)
        for lane in range(vdt.lanes):
            i = self.extract(idx, index.dtype, lane)
            v = self.fw.emit(f"extractelement {mem} {value}, i32 {lane}")
            p = self.fw.emit(f"getelementptr inbounds {scalar}, ptr {self._base(buf)}, "
                             f"{llvm_type(index.dtype.element_of())} {i}", "p")
            self.fw.emit_void(f"store {scalar} {v}, ptr {p}, align {buf.dtype.bytes}")

    # Scratch memory -------------------------------------------------------------------------
    def stmt_Allocate(self, s) -> None:
        buf = s.buffer
        elem_bytes = buf.dtype.bytes * buf.dtype.lanes
        count = 1
        for extent in s.extents:
            count = count * extent.value if isinstance(extent, E.IntImm) and isinstance(count, int) else None
            if count is None:
                break
        mem = llvm_type(buf.dtype, memory=True)
        if count is not None and count * elem_bytes <= STACK_LIMIT:
            ptr = self.fw.alloca(mem, max(count, 1), SCRATCH_ALIGN)
            self._with_storage(buf, ptr, s.body)
            return
        size = self._byte_size(s.extents, elem_bytes)
        ptr = self._heap_alloc(size, buf.name)
        self._with_storage(buf, ptr, s.body)
        if not self.fw.terminated:
            self.mw.declare("free", "declare void @free(ptr)")
            self.fw.emit_void(f"call void @free(ptr {ptr})")

    def _with_storage(self, buf, ptr: str, body) -> None:
        self.vars[buf.data] = ptr
        self.align[buf.data] = SCRATCH_ALIGN
        self.stmt(body)

    def _byte_size(self, extents, elem_bytes: int) -> str:
        ip = self.intptr
        size = int_literal(elem_bytes, DType("int", 64))
        for extent in extents:
            v = self.cast(self.expr(extent), extent.dtype, DType("int", 64))
            size = self.fw.emit(f"mul i64 {size}, {v}")
        if ip != "i64":
            size = self.fw.emit(f"trunc i64 {size} to {ip}")
        return size

    def _heap_alloc(self, size: str, name: str) -> str:
        """64-byte aligned heap memory; failure returns -1 with a message naming the buffer."""
        ip = self.intptr
        self.mw.declare("posix_memalign", f"declare i32 @posix_memalign(ptr, {ip}, {ip})")
        slot = self.fw.alloca("ptr", 1, 8)
        # posix_memalign wants a nonzero size to promise a unique pointer; ask for one byte more.
        padded = self.fw.emit(f"add {ip} {size}, 1")
        rc = self.fw.emit(f"call i32 @posix_memalign(ptr {slot}, {ip} {SCRATCH_ALIGN}, {ip} {padded})")
        failed = self.fw.emit(f"icmp ne i32 {rc}, 0")
        self.fail_if(failed, f"{self.func_name}: out of memory allocating scratch buffer {name!r}")
        return self.fw.emit(f"load ptr, ptr {slot}, align 8")
