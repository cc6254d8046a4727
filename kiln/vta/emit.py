"""Lowered TIR -> the accelerator's instruction stream, by walking the loops at compile time.

The statements a VTA schedule lowers to are recognised by what they move, not by their pragma
(a pragma on a loop of extent 1 disappears with the loop):

- a store into ``env.inp_scope``/``wgt_scope`` (or ``acc_scope``) reading an argument array,
  possibly under ``if_then_else(cond, x, 0)`` (padding): LOAD;
- a store into an argument array of ``acc_scope`` values cast to int8: STORE;
- a store into ``acc_scope`` computing min/max/+/>> of accumulators and constants: ALU;
- ``vta.gemm`` calls left by ``tensorize(axis, env.gemm)``: GEMM micro-ops.

Every loop has a constant extent, so nests are evaluated block by block (``exprs.py``), DMA
runs become 2-D LOADs/STOREs and micro-op sequences become GEMM/ALU loops (``dma.py``). SRAM
buffers get block addresses from a stack allocator per scope; a tile that does not fit is a
``CompileError`` naming the buffer. ``deps.py`` then adds the dependency tokens.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.functor import uses_var
from kiln.ir.stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, ForKind, IfThenElse,
                          LetStmt, SeqStmt)

from . import isa
from .dma import compress_uops, dma_insns
from .exprs import compile_expr, evaluate

MAX_KERNEL = 1024  # micro-ops per GEMM/ALU kernel (a kernel is loaded whole into the uop SRAM)
_ALU_OPS = {E.Min: isa.ALU_MIN, E.Max: isa.ALU_MAX, E.Add: isa.ALU_ADD}


@dataclass
class Op:
    """One instruction and the SRAM block ranges it reads and writes: (memory_type, lo, hi)."""

    insn: isa.Insn
    module: int  # 0 load, 1 compute, 2 store
    reads: list = field(default_factory=list)
    writes: list = field(default_factory=list)


@dataclass
class _Alloc:
    mem: int
    base: int
    blocks: int
    name: str


class Emitter:
    def __init__(self, func, env):
        self.env = env
        self.ops: list[Op] = []
        self.elems = {isa.MEM_INP: env.BATCH * env.BLOCK_IN, isa.MEM_WGT: env.BLOCK_OUT * env.BLOCK_IN,
                      isa.MEM_ACC: env.BATCH * env.BLOCK_OUT}
        self.depth = {isa.MEM_INP: env.INP_DEPTH, isa.MEM_WGT: env.WGT_DEPTH, isa.MEM_ACC: env.ACC_DEPTH}
        self.scopes = {env.inp_scope: isa.MEM_INP, env.wgt_scope: isa.MEM_WGT, env.acc_scope: isa.MEM_ACC}
        self.args = {}
        for k, p in enumerate(func.params):
            buf = func.buffer_map.get(p)
            if buf is not None:
                self.args[buf.data] = k
        if len(self.args) > isa.MAX_ARGS:
            raise CompileError(f"vta: {len(self.args)} array arguments; the DMA addresses at most {isa.MAX_ARGS}")
        self.allocs: dict = {}  # the SRAM buffers of the leaf being emitted
        self.top = {m: 0 for m in self.elems}
        self.peak = dict(self.top)
        self.pending: list = []  # GEMM micro-ops (reset, acc, inp, wgt) not yet emitted
        self.uop_words: list = []  # the module's micro-op array (DRAM segment 15)
        self.kernels: dict = {}  # kernel bytes -> offset in uop_words
        self.uop_cache: dict = {}  # kernel bytes -> base in the uop SRAM
        self.uop_top = 0

    # -- the walk ------------------------------------------------------------------------------
    # Virtual threads are injected before (kiln/tir/transform/inject_virtual_thread.py, "cthread"):
    # each thread's SRAM tiles are one allocation at the thread's offset, and each copy, ALU nest
    # or loop of GEMMs comes once per thread in turn, so one thread's loads overlap another's
    # GEMMs. A loop nest of GEMMs becomes its own GEMM instructions (flushed at its end), so a
    # thread's GEMMs wait only for that thread's loads.
    def run(self, body) -> None:
        self.walk(body, {})
        self.flush()

    def walk(self, s, consts) -> None:
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.walk(x, consts)
        elif isinstance(s, (AttrStmt, AssertStmt)):
            self.walk(s.body, consts)
        elif isinstance(s, LetStmt):
            self.walk(s.body, {**consts, s.var: evaluate(s.value, consts)})
        elif isinstance(s, Allocate):
            self.allocate(s, consts)
        elif isinstance(s, IfThenElse):
            if evaluate(s.condition, consts):
                self.walk(s.then_case, consts)
            elif s.else_case is not None:
                self.walk(s.else_case, consts)
        elif isinstance(s, For):
            self.loop(s, consts)
        elif isinstance(s, BufferStore):
            self.nest([], s, consts)
        elif isinstance(s, Evaluate):
            self.evaluate_call(s.value, consts)
        else:
            raise CompileError(f"vta: cannot run a {type(s).__name__} on the accelerator")

    def loop(self, s: For, consts) -> None:
        if s.kind == ForKind.THREAD_BINDING:
            tag = getattr(s.thread_binding, "thread_tag", "") or ""
            raise CompileError(f"vta: loop {s.loop_var.name} is bound to {tag!r}; the accelerator has no threads "
                               "but virtual ones: bind te.thread_axis('cthread')")
        loops, inner = [s], s.body
        while isinstance(inner, For):
            loops.append(inner)
            inner = inner.body
        if isinstance(inner, BufferStore):
            return self.nest(loops, inner, consts)
        if _only_gemm(s):
            self.gemm_loops(s, consts)
            return self.flush()
        lo, n = evaluate(s.min, consts), evaluate(s.extent, consts)
        for v in range(lo, lo + n):
            self.walk(s.body, {**consts, s.loop_var: v})

    def gemm_loops(self, s, consts) -> None:
        """A perfect loop nest around one vta.gemm call, its micro-ops computed with numpy."""
        loops, inner = [], s
        while isinstance(inner, For):
            loops.append(inner)
            inner = inner.body
        if not isinstance(inner, Evaluate) or any(uses_var(lp.extent, lambda v: True) for lp in loops):
            lo, n = evaluate(s.min, consts), evaluate(s.extent, consts)  # keep program order, slowly
            for v in range(lo, lo + n):
                self.walk(s.body, {**consts, s.loop_var: v})
            return
        call = inner.value
        if not (isinstance(call, E.Call) and call.op == "tir.vta.gemm"):
            return self.evaluate_call(call, consts)
        mode = evaluate(call.args[0], consts)
        vars_ = [lp.loop_var for lp in loops]
        grids = np.meshgrid(*[np.arange(evaluate(lp.min, consts), evaluate(lp.min, consts) + evaluate(lp.extent, consts),
                                        dtype=np.int64) for lp in loops], indexing="ij")
        flat = [g.reshape(-1) for g in grids]
        cols = []
        for ptr, mem in zip(call.args[1:4], (isa.MEM_ACC, isa.MEM_INP, isa.MEM_WGT)):
            if mode == 1 and mem != isa.MEM_ACC:
                cols.append(np.zeros_like(cols[0]))
                continue
            data, off = _pointer(ptr)
            alloc = self._sram(data, mem, "GEMM")
            offset = np.broadcast_to(np.asarray(compile_expr(off, vars_, consts)(*flat), dtype=np.int64),
                                     flat[0].shape if flat else ())
            offset = np.atleast_1d(offset)
            if (offset % self.elems[mem]).any():
                raise CompileError(f"vta: GEMM operand {alloc.name} is not block-aligned ({self.elems[mem]} "
                                   "elements); tensorize at the block axis")
            cols.append(alloc.base + offset // self.elems[mem])
        idx = np.stack(cols, 1)
        for flag in ((1,) if mode == 1 else (0,) if mode == 0 else (1, 0)):
            self.pending.extend((flag, *u) for u in idx.tolist())

    def allocate(self, s: Allocate, consts) -> None:
        scope = s.buffer.scope
        if scope not in self.scopes:
            raise CompileError(f"vta: buffer {s.buffer.name} is allocated in scope {scope!r}; intermediate "
                               f"tensors must live in {sorted(self.scopes)} (set_scope / cache_read)")
        mem = self.scopes[scope]
        n = 1
        for e in s.extents:
            n *= evaluate(e, consts)
        blocks = -(-n // self.elems[mem])
        base = self.top[mem]
        if base + blocks > self.depth[mem]:
            name = isa.MEM_NAMES[mem]
            raise CompileError(f"vta: buffer {s.buffer.name} needs {blocks} {name} blocks at block {base}; the "
                               f"{name} SRAM holds {self.depth[mem]} (LOG_{name.upper()}_BUFF_SIZE="
                               f"{getattr(self.env, f'LOG_{name.upper()}_BUFF_SIZE')}); use smaller tiles")
        self.top[mem] = base + blocks
        self.peak[mem] = max(self.peak[mem], self.top[mem])
        saved = self.allocs
        self.allocs = {**saved, s.buffer.data: _Alloc(mem, base, blocks, s.buffer.name)}
        self.walk(s.body, consts)
        self.allocs = saved
        self.top[mem] = base

    # -- GEMM ------------------------------------------------------------------------------------
    def evaluate_call(self, call, consts) -> None:
        if not (isinstance(call, E.Call) and call.op == "tir.vta.gemm"):
            raise CompileError(f"vta: the statement {call} has no accelerator instruction; only vta.gemm "
                               "calls (from tensorize(..., env.gemm)) are evaluated")
        mode = evaluate(call.args[0], consts)
        idx = []
        for ptr, mem in zip(call.args[1:4], (isa.MEM_ACC, isa.MEM_INP, isa.MEM_WGT)):
            if mode == 1 and mem != isa.MEM_ACC:  # a reset reads nothing: its inp/wgt operands may
                idx.append(0)                     # lie outside their buffers' scope
                continue
            data, off = _pointer(ptr)
            alloc = self._sram(data, mem, "GEMM")
            offset = evaluate(off, consts)
            if offset % self.elems[mem]:
                raise CompileError(f"vta: GEMM operand {alloc.name} at element {offset} is not block-aligned "
                                   f"({self.elems[mem]} elements); tensorize at the block axis")
            idx.append(alloc.base + offset // self.elems[mem])
        if mode in (1, 2):
            self.pending.append((1, *idx))
        if mode in (0, 2):
            self.pending.append((0, *idx))

    def _sram(self, data, mem, what):
        alloc = self.allocs.get(data)
        if alloc is None or alloc.mem != mem:
            raise CompileError(f"vta: {what} operand {getattr(data, 'name', data)} is not in the "
                               f"{isa.MEM_NAMES[mem]} SRAM scope")
        return alloc

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for reset, group in itertools.groupby(pending, key=lambda u: u[0]):
            uops = np.array([u[1:] for u in group], dtype=np.int64)
            for kernel, a, b, fo, fi in compress_uops(uops, MAX_KERNEL):
                words = isa.encode_uops([tuple(int(x) for x in u) for u in kernel], self.env, isa.GEMM)
                bgn = self._uop_kernel(words)
                insn = isa.Insn(isa.GEMM, reset=reset, uop_bgn=bgn, uop_end=bgn + len(kernel), iter_out=a,
                                iter_in=b, dst_factor_out=int(fo[0]), dst_factor_in=int(fi[0]),
                                src_factor_out=int(fo[1]), src_factor_in=int(fi[1]),
                                wgt_factor_out=int(fo[2]), wgt_factor_in=int(fi[2]))
                rng = [_span(kernel[:, k], a, b, fo[k], fi[k]) for k in range(3)]
                reads = [] if reset else [(isa.MEM_INP, *rng[1]), (isa.MEM_WGT, *rng[2])]
                self.ops.append(Op(insn, 1, reads, [(isa.MEM_ACC, *rng[0])]))

    def _uop_kernel(self, words: np.ndarray) -> int:
        """The kernel's base in the uop SRAM, loading it (LOAD uop) when it is not there."""
        key = words.tobytes()
        if key in self.uop_cache:
            return self.uop_cache[key]
        if key not in self.kernels:
            self.kernels[key] = len(self.uop_words)
            self.uop_words.extend(words.tolist())
        if self.uop_top + len(words) > self.env.UOP_DEPTH:
            self.uop_cache.clear()  # the compute module runs in order: reuse from the start
            self.uop_top = 0
        base = self.uop_top
        self.uop_top += len(words)
        self.uop_cache[key] = base
        insn = isa.Insn(isa.LOAD, memory_type=isa.MEM_UOP, sram_base=base, dram_seg=isa.UOP_SEGMENT,
                        dram_base=self.kernels[key], y_size=1, x_size=len(words), x_stride=len(words))
        self.ops.append(Op(insn, 1))
        return base

    # -- copy and ALU nests ----------------------------------------------------------------------
    def nest(self, loops, store: BufferStore, consts) -> None:
        self.flush()
        dst = store.buffer.data
        value = _strip_cast(store.value)
        if dst in self.args:
            return self.store_nest(loops, store, value, consts)
        alloc = self.allocs.get(dst)
        if alloc is None:
            raise CompileError(f"vta: store into {store.buffer.name}, which is neither an argument nor an "
                               "SRAM buffer")
        load, cond = _load_of(value)
        if load is not None and load.buffer.data in self.args:
            return self.load_nest(loops, store, alloc, load, cond, consts)
        if alloc.mem != isa.MEM_ACC:
            raise CompileError(f"vta: {store.buffer.name} ({isa.MEM_NAMES[alloc.mem]} SRAM) must be filled by a "
                               f"DMA copy of an argument, not by {type(value).__name__}")
        self.alu_nest(loops, store, alloc, value, consts)

    def _runs(self, loops, consts, indices, cond, elems, what):
        """Per outer iteration: the first element of each index and the condition; and the
        number of blocks the inner dense loops cover."""
        vars_ = [lp.loop_var for lp in loops]
        exts = [evaluate(lp.extent, consts) for lp in loops]
        mins = [evaluate(lp.min, consts) for lp in loops]
        consts = dict(consts)
        fns = [compile_expr(_shift(e, vars_, mins), vars_, consts) for e in indices]
        cf = compile_expr(_shift(cond, vars_, mins), vars_, consts) if cond is not None else None
        zero = [0] * len(vars_)
        base = [f(*zero) for f in fns]
        k, span = len(vars_), 1
        while k > 0 and span % elems:
            j = k - 1
            if cond is not None and uses_var(cond, lambda v, t=vars_[j]: v is t):
                break
            pt = list(zero)
            pt[j] = exts[j] - 1
            if exts[j] > 1 and not all(f(*pt) - b == span * (exts[j] - 1) for f, b in zip(fns, base)):
                break
            pt[j] = 1 if exts[j] > 1 else 0
            if exts[j] > 1 and not all(f(*pt) - b == span for f, b in zip(fns, base)):
                break
            span *= exts[j]
            k -= 1
        if span % elems:
            raise CompileError(f"vta: {what}: the innermost loops cover {span} contiguous elements, not whole "
                               f"blocks of {elems}; keep the block axes (BATCH, BLOCK) innermost and unsplit")
        out = []
        tail = [0] * (len(vars_) - k)
        for pt in itertools.product(*[range(e) for e in exts[:k]]):
            full = list(pt) + tail
            idx = [f(*full) for f in fns]
            for x in idx:
                if x % elems:
                    raise CompileError(f"vta: {what}: a copy starts at element {x}, inside a block of {elems}")
            out.append(([x // elems for x in idx], True if cf is None else bool(cf(*full))))
        return out, span // elems

    def load_nest(self, loops, store, alloc, load, cond, consts) -> None:
        mem = alloc.mem
        if store.buffer.dtype != load.buffer.dtype:
            raise CompileError(f"vta: DMA into {store.buffer.name} converts {load.buffer.dtype} to "
                               f"{store.buffer.dtype}; the DMA copies bytes, cast on the CPU")
        blocks, count = self._runs(loops, consts, [store.indices[0], load.indices[0]], cond, self.elems[mem],
                                   f"copy into {store.buffer.name}")
        runs = [(alloc.base + d, s if ok else None, count) for (d, s), ok in blocks]
        _check_range(runs, alloc)
        seg = self.args[load.buffer.data]
        for insn in dma_insns(runs, mem, seg, store=False):
            rows = insn["y_pad_0"] + insn["y_size"] + insn["y_pad_1"]
            width = insn["x_pad_0"] + insn["x_size"] + insn["x_pad_1"]
            span = (mem, insn["sram_base"], insn["sram_base"] + rows * width)
            module = 1 if mem == isa.MEM_ACC else 0
            self.ops.append(Op(insn, module, [], [span]))

    def store_nest(self, loops, store, value, consts) -> None:
        if not isinstance(value, E.BufferLoad) or value.buffer.data not in self.allocs or \
                self.allocs[value.buffer.data].mem != isa.MEM_ACC:
            raise CompileError(f"vta: {store.buffer.name} (an argument) must be written from the accumulator "
                               f"SRAM cast to {self.env.out_dtype}, got {value}")
        if str(store.buffer.dtype) != self.env.out_dtype:
            raise CompileError(f"vta: output {store.buffer.name} is {store.buffer.dtype}; STORE writes "
                               f"{self.env.out_dtype} (the low 8 bits of each accumulator)")
        alloc = self.allocs[value.buffer.data]
        blocks, count = self._runs(loops, consts, [value.indices[0], store.indices[0]], None,
                                   self.elems[isa.MEM_ACC], f"store into {store.buffer.name}")
        runs = [(alloc.base + s, d, count) for (s, d), _ in blocks]
        _check_range(runs, alloc)
        seg = self.args[store.buffer.data]
        for insn in dma_insns(runs, isa.MEM_ACC, seg, store=True):
            lo = insn["sram_base"]
            self.ops.append(Op(insn, 2, [(isa.MEM_ACC, lo, lo + insn["y_size"] * insn["x_size"])], []))

    def alu_nest(self, loops, store, alloc, value, consts) -> None:
        chain = []  # min(max(x >> 8, 0), 127): the innermost op runs first, then the others in place
        while True:
            step = _imm_step(value)
            if step is None:
                break
            value, op_imm = step
            chain.append(op_imm)
        if chain and isinstance(value, E.BufferLoad):
            op, imm = chain.pop()
            x, y = value, None
        else:  # e.g. (conv + bias) >> 8: the two-operand op first, then the chain in place
            op, x, y, imm = _alu_pattern(value, store.buffer.name)
        srcs = [x] + ([y] if y is not None else [])
        for ld in srcs:
            self._sram(ld.buffer.data, isa.MEM_ACC, f"ALU ({store.buffer.name})")
        blocks, count = self._runs(loops, consts, [store.indices[0]] + [ld.indices[0] for ld in srcs], None,
                                   self.elems[isa.MEM_ACC], f"ALU into {store.buffer.name}")
        bases = [alloc.base] + [self.allocs[ld.buffer.data].base for ld in srcs]
        uops = []
        for idx, _ in blocks:
            for j in range(count):
                uops.append([b + i + j for b, i in zip(bases, idx)])
        uops = np.array(uops, dtype=np.int64)
        dst, sx = uops[:, 0], uops[:, 1]
        if y is None:
            self._alu(np.stack([dst, sx], 1), op, imm)
            for op, imm in reversed(chain):
                self._alu(np.stack([dst, dst], 1), op, imm)
            return
        sy = uops[:, 2]
        if (dst == sx).all():
            self._alu(np.stack([dst, sy], 1), op, None)
        elif (dst == sy).all():
            self._alu(np.stack([dst, sx], 1), op, None)
        else:  # dst = x first (x + 0), then dst = op(dst, y)
            self._alu(np.stack([dst, sx], 1), isa.ALU_ADD, 0)
            self._alu(np.stack([dst, sy], 1), op, None)
        for op, imm in reversed(chain):
            self._alu(np.stack([dst, dst], 1), op, imm)

    def _alu(self, uops, op, imm) -> None:
        for kernel, a, b, fo, fi in compress_uops(uops, MAX_KERNEL):
            words = isa.encode_uops([tuple(int(v) for v in u) for u in kernel], self.env, isa.ALU)
            bgn = self._uop_kernel(words)
            insn = isa.Insn(isa.ALU, uop_bgn=bgn, uop_end=bgn + len(kernel), iter_out=a, iter_in=b,
                            dst_factor_out=int(fo[0]), dst_factor_in=int(fi[0]), src_factor_out=int(fo[1]),
                            src_factor_in=int(fi[1]), alu_opcode=op, use_imm=int(imm is not None),
                            imm=0 if imm is None else imm)
            d = _span(kernel[:, 0], a, b, fo[0], fi[0])
            s = _span(kernel[:, 1], a, b, fo[1], fi[1])
            self.ops.append(Op(insn, 1, [(isa.MEM_ACC, *s), (isa.MEM_ACC, *d)], [(isa.MEM_ACC, *d)]))


def _pointer(ptr):
    """(data Var, element offset) of a GEMM operand: ``buffer.access_ptr(...)``."""
    if not (isinstance(ptr, E.Call) and ptr.op == "tir.tvm_access_ptr"):
        raise CompileError(f"vta: GEMM operand {ptr} is not a buffer.access_ptr(...) pointer; declare the intrinsic "
                           "with kiln/vta/intrin.py")
    return ptr.args[1], ptr.args[2]


def _only_gemm(s) -> bool:
    """Whether s is loops around GEMM calls only (no copies, ALU nests or allocations)."""
    while isinstance(s, For):
        s = s.body
    if isinstance(s, SeqStmt):
        return all(_only_gemm(x) for x in s.seq)
    return isinstance(s, Evaluate)


def _span(col, a, b, fo, fi):
    lo = int(col.min())
    return lo, int(col.max()) + (a - 1) * int(fo) + (b - 1) * int(fi) + 1


def _check_range(runs, alloc) -> None:
    for s, _, n in runs:
        if not (alloc.base <= s and s + n <= alloc.base + alloc.blocks):
            raise CompileError(f"vta: a copy reaches past buffer {alloc.name} ({alloc.blocks} blocks)")


def _shift(e, vars_, mins):
    """e with loop variable v replaced by v + min (loops are walked from 0)."""
    if e is None or not any(mins):
        return e
    from kiln.ir.functor import substitute
    return substitute(e, {v: v + m for v, m in zip(vars_, mins) if m})


def _strip_cast(v):
    while isinstance(v, E.Cast):
        v = v.value
    return v


def _load_of(value):
    """(load, condition) when value is a load, maybe padded: if_then_else(cond, load, 0)."""
    if isinstance(value, E.BufferLoad):
        return value, None
    if isinstance(value, E.Call) and value.op == "tir.if_then_else":
        cond, t, f = value.args
    elif isinstance(value, E.Select):
        cond, t, f = value.condition, value.true_value, value.false_value
    else:
        return None, None
    t, f = _strip_cast(t), _strip_cast(f)
    if isinstance(t, E.BufferLoad) and isinstance(f, E.IntImm) and f.value == 0:
        return t, cond
    return None, None


def _imm_step(value):
    """(inner expression, (alu opcode, immediate)) when value is op(inner, constant), else None."""
    value = _strip_cast(value)
    if isinstance(value, E.Call) and value.op in ("tir.shift_right", "tir.shift_left"):
        a, b = (_strip_cast(x) for x in value.args)
        if isinstance(b, E.IntImm):
            return a, (isa.ALU_SHR, int(b.value) if value.op == "tir.shift_right" else -int(b.value))
        return None
    if isinstance(value, E.Sub):
        a, b = _strip_cast(value.a), _strip_cast(value.b)
        return (a, (isa.ALU_ADD, -int(b.value))) if isinstance(b, E.IntImm) else None
    op = _ALU_OPS.get(type(value))
    if op is None:
        return None
    a, b = _strip_cast(value.a), _strip_cast(value.b)
    if isinstance(a, E.IntImm):
        a, b = b, a
    return (a, (op, int(b.value))) if isinstance(b, E.IntImm) and not isinstance(a, E.IntImm) else None


def _alu_pattern(value, name):
    """(alu opcode, load x, load y or None, immediate or None)."""
    if isinstance(value, E.BufferLoad):
        return isa.ALU_ADD, value, None, 0
    if isinstance(value, E.Call) and value.op == "tir.shift_right":
        a, b = (_strip_cast(x) for x in value.args)
        if isinstance(a, E.BufferLoad) and isinstance(b, E.IntImm):
            return isa.ALU_SHR, a, None, int(b.value)
    if isinstance(value, E.Call) and value.op == "tir.shift_left":
        a, b = (_strip_cast(x) for x in value.args)
        if isinstance(a, E.BufferLoad) and isinstance(b, E.IntImm):
            return isa.ALU_SHR, a, None, -int(b.value)
    if isinstance(value, E.Sub):
        a, b = _strip_cast(value.a), _strip_cast(value.b)
        if isinstance(a, E.BufferLoad) and isinstance(b, E.IntImm):
            return isa.ALU_ADD, a, None, -int(b.value)
    op = _ALU_OPS.get(type(value))
    if op is not None:
        a, b = _strip_cast(value.a), _strip_cast(value.b)
        if isinstance(b, E.BufferLoad) and isinstance(a, E.IntImm):
            a, b = b, a
        if isinstance(a, E.BufferLoad) and isinstance(b, E.IntImm):
            return op, a, None, int(b.value)
        if isinstance(a, E.BufferLoad) and isinstance(b, E.BufferLoad):
            return op, a, b, None
    raise CompileError(f"vta: {name} = {value} is not an ALU operation; the ALU does min, max, +, - and >> "
                       "of accumulators and constants (no multiply: requantize with power-of-two shifts)")
