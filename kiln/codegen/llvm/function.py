"""One PrimFunc as LLVM functions: the packed-argument entry point and its body function.

    i32 @name(ptr args, ptr type_codes, i32 num_args)     ; docs/abi.md
        unpacks DLTensor data pointers (+ byte_offset), symbolic dims and scalars, then
    i32 @name.body(ptr noalias A, ptr noalias B, i32 n, ...)
        runs the loop nest.

Splitting them lets the body see its buffers as ``noalias`` parameters (kiln buffers never
overlap), which is what allows LLVM to vectorize and reorder memory accesses freely.
"""

from __future__ import annotations

from ...ir.dtype import INT64, DType
from .. import packed
from .bf16 import promote_bfloat16
from .expr import ExprCodegen
from .ir import FunctionWriter, llvm_type
from .memory import MemoryCodegen
from .parallel import ParallelCodegen
from .stmt import StmtCodegen

DLTENSOR_TYPE = "%DLTensor = type { ptr, { i32, i32 }, i32, { i8, i8, i16 }, ptr, ptr, i64 }"
_F64 = DType("float", 64)


class FunctionCodegen(ExprCodegen, MemoryCodegen, StmtCodegen, ParallelCodegen):
    """Emits one LLVM function (`name`) for the PrimFunc whose symbol is `symbol`."""

    def __init__(self, mw, name: str, symbol: str, target_info, in_parallel: bool = False):
        self.mw = mw
        self.name = name
        self.symbol = symbol
        self.func_name = symbol
        self.target_info = target_info
        self.intptr = target_info.intptr
        self.in_parallel = in_parallel
        self.unroll_max_step = 0
        self.vars: dict = {}
        self.align: dict = {}
        self._expr_table: dict = {}
        self._stmt_table: dict = {}
        self._vector_cache: dict = {}
        self.fw = None

    def outline(self, params: list, aligns: dict, emit_body) -> None:
        """define internal i32 @name(params), pointers noalias; emit_body(self) fills it."""
        sig = []
        for k, v in enumerate(params):
            name = f"%arg{k}"
            sig.append(f"{llvm_type(v.dtype)}{' noalias' if v.dtype.is_handle else ''} {name}")
            self.vars[v] = name
        self.align.update(aligns)
        self.fw = FunctionWriter(self.mw, f"define internal i32 @{self.name}({', '.join(sig)}) nounwind")
        emit_body(self)
        if not self.fw.terminated:
            self.fw.ret("0")
        self.mw.functions.append(self.fw.text())


def emit_prim_func(mw, func, symbol: str, target_info) -> None:
    """Both functions of one PrimFunc into the module writer."""
    func = promote_bfloat16(func)
    entry = FunctionCodegen(mw, symbol, symbol, target_info)
    fw = entry.fw = FunctionWriter(
        mw, f"define protected i32 @{symbol}(ptr noalias %args, ptr noalias %codes, i32 %num_args) nounwind")
    for arg in packed.arguments(func, symbol):
        _unpack(entry, arg)
    params = list(entry.vars)
    body_name = mw.unique(symbol + ".body")
    args = ", ".join(f"{llvm_type(v.dtype)} {entry.vars[v]}" for v in params)
    rc = fw.emit(f"call i32 @{body_name}({args})")
    fw.ret(rc)
    mw.functions.append(fw.text())
    FunctionCodegen(mw, body_name, symbol, target_info).outline(params, {}, lambda cg: cg.stmt(func.body))


def _unpack(cg, arg) -> None:
    """LLVM IR for one step of the packed convention (codegen/packed.py)."""
    fw = cg.fw
    slot = fw.emit(f"getelementptr inbounds i8, ptr %args, i64 {packed.VALUE_BYTES * arg.index}", "p")
    if isinstance(arg, packed.TensorArg):
        _unpack_tensor(cg, slot, arg)
    elif isinstance(arg, packed.HandleArg):
        cg.vars[arg.var] = fw.emit(f"load ptr, ptr {slot}, align 8")
    else:
        _unpack_scalar(cg, slot, arg)


def _unpack_tensor(cg, slot: str, arg) -> None:
    fw, buf = cg.fw, arg.buffer
    handle = fw.emit(f"load ptr, ptr {slot}, align 8", "h")
    data = fw.emit(f"load ptr, ptr {handle}, align 8")  # field DLTENSOR_DATA (0)
    off_p = fw.emit(f"getelementptr inbounds %DLTensor, ptr {handle}, i32 0, i32 {packed.DLTENSOR_BYTE_OFFSET}", "p")
    offset = fw.emit(f"load i64, ptr {off_p}, align 8")
    cg.vars[buf.data] = fw.emit(f"getelementptr inbounds i8, ptr {data}, i64 {offset}", buf.name.replace(".", "_") + ".")
    if arg.dims:
        sp = fw.emit(f"getelementptr inbounds %DLTensor, ptr {handle}, i32 0, i32 {packed.DLTENSOR_SHAPE}", "p")
        shape_p = fw.emit(f"load ptr, ptr {sp}, align 8")
    for k, dim in arg.dims:
        dp = fw.emit(f"getelementptr inbounds i64, ptr {shape_p}, i64 {k}", "p")
        value = fw.emit(f"load i64, ptr {dp}, align 8", dim.name.replace(".", "_") + ".")
        cg.vars[dim] = cg.cast(value, INT64, dim.dtype)
    if arg.strides:  # compact row-major: the product of the extents after dimension k
        wanted = dict(arg.strides)
        stride = "1"
        for k in range(len(buf.shape) - 1, min(wanted) - 1, -1):
            if k in wanted:
                cg.vars[wanted[k]] = cg.cast(stride, INT64, wanted[k].dtype)
            dim = buf.shape[k]
            stride = fw.emit(f"mul i64 {stride}, {cg.cast(cg.expr(dim), dim.dtype, INT64)}")


def _unpack_scalar(cg, slot: str, arg) -> None:
    """A scalar from its KilnValue, converting when the caller passed the other kind."""
    fw, dt = cg.fw, arg.var.dtype
    code_p = fw.emit(f"getelementptr inbounds i32, ptr %codes, i64 {arg.index}", "p")
    code = fw.emit(f"load i32, ptr {code_p}, align 4")
    as_int = fw.emit(f"load i64, ptr {slot}, align 8")
    as_float = fw.emit(f"load double, ptr {slot}, align 8")
    other = fw.emit(f"icmp eq i32 {code}, {arg.other_code}")
    if dt.is_float:
        converted = fw.emit(f"sitofp i64 {as_int} to double")
        value = fw.emit(f"select i1 {other}, double {converted}, double {as_float}")
        cg.vars[arg.var] = cg.cast(value, _F64, dt)
    else:
        converted = fw.emit(f"fptosi double {as_float} to i64")
        value = fw.emit(f"select i1 {other}, i64 {converted}, i64 {as_int}")
        cg.vars[arg.var] = cg.cast(value, INT64, dt)


SUPPORT_IR = r"""
@__kiln_last_error = protected global [512 x i8] zeroinitializer, align 8

; Call `count` kernels in order, each entry {function, args, type codes, num_args}, stopping at
; the first that fails: returns its result and stores its index in *failed (docs/abi.md). The
; graph executor runs a whole model with one call into it instead of one per kernel.
define protected i32 @__kiln_run_list(ptr %calls, i32 %count, ptr %failed) nounwind {
entry:
  %none = icmp sle i32 %count, 0
  br i1 %none, label %done, label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %next, %ok ]
  %entry.p = getelementptr inbounds { ptr, ptr, ptr, i32 }, ptr %calls, i32 %i
  %fn = load ptr, ptr %entry.p
  %args.p = getelementptr inbounds { ptr, ptr, ptr, i32 }, ptr %entry.p, i32 0, i32 1
  %args = load ptr, ptr %args.p
  %codes.p = getelementptr inbounds { ptr, ptr, ptr, i32 }, ptr %entry.p, i32 0, i32 2
  %codes = load ptr, ptr %codes.p
  %n.p = getelementptr inbounds { ptr, ptr, ptr, i32 }, ptr %entry.p, i32 0, i32 3
  %n = load i32, ptr %n.p, align 4
  %rc = call i32 %fn(ptr %args, ptr %codes, i32 %n)
  %bad = icmp ne i32 %rc, 0
  br i1 %bad, label %fail, label %ok
ok:
  %next = add i32 %i, 1
  %more = icmp slt i32 %next, %count
  br i1 %more, label %loop, label %done
fail:
  store i32 %i, ptr %failed, align 4
  ret i32 %rc
done:
  ret i32 0
}

; Copy a NUL-terminated message into __kiln_last_error (at most 511 bytes).
define internal void @__kiln_set_error(ptr %msg) cold noinline nounwind {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %n, %next ]
  %src = getelementptr inbounds i8, ptr %msg, i32 %i
  %c = load i8, ptr %src, align 1
  %dst = getelementptr inbounds [512 x i8], ptr @__kiln_last_error, i32 0, i32 %i
  store i8 %c, ptr %dst, align 1
  %end = icmp eq i8 %c, 0
  br i1 %end, label %out, label %next
next:
  %n = add i32 %i, 1
  %full = icmp eq i32 %n, 511
  br i1 %full, label %cut, label %loop
cut:
  store i8 0, ptr getelementptr inbounds ([512 x i8], ptr @__kiln_last_error, i32 0, i32 511), align 1
  ret void
out:
  ret void
}
"""
