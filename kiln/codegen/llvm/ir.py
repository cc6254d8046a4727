"""A small writer of LLVM IR text.

kiln emits textual IR and lets LLVM parse it: writing strings is several times faster in
Python than building llvmlite.ir objects, and text gives direct access to everything LLVM
accepts (loop metadata, noalias, atomics, fast-math flags). This module knows LLVM syntax
and nothing about kiln's IR; expr.py / stmt.py translate the IR onto it.
"""

from __future__ import annotations

import struct

from ...ir.dtype import DType


def scalar_type(dt: DType, memory: bool = False) -> str:
    """LLVM type of one lane. bool is i1 in registers and one byte (i8) in memory."""
    if dt.kind == "float":
        return {16: "half", 32: "float", 64: "double"}[dt.bits]
    if dt.kind == "bfloat":
        return "i16"  # its bits: LLVM's bfloat type would turn phis and selects into libcalls
    if dt.kind == "bool":
        return "i8" if memory else "i1"
    if dt.kind == "handle":
        return "ptr"
    return f"i{dt.bits}"


def mangle(dt: DType) -> str:
    """Overload suffix of an LLVM intrinsic: f32, v16f32, i64, v8i32."""
    base = {"half": "f16", "float": "f32", "double": "f64"}.get(scalar_type(dt)) or scalar_type(dt)
    return base if dt.lanes == 1 else f"v{dt.lanes}{base}"


def llvm_type(dt: DType, memory: bool = False) -> str:
    base = scalar_type(dt, memory)
    return base if dt.lanes == 1 else f"<{dt.lanes} x {base}>"


def float_literal(value: float, dt: DType) -> str:
    """An exact LLVM literal: doubles as 0x + 16 hex digits, float rounded to float first,
    bfloat16 (its bits, an i16) rounded to nearest even."""
    if dt.kind == "bfloat":
        from .bf16 import bfloat16_bits

        bits = bfloat16_bits(value)
        return str(bits - 65536 if bits >= 32768 else bits)
    if dt.bits == 16:
        (bits,) = struct.unpack("<H", struct.pack("<e", value))
        return f"0xH{bits:04X}"
    if dt.bits == 32:
        value = struct.unpack("<f", struct.pack("<f", value))[0] if value == value else value
    (bits,) = struct.unpack("<Q", struct.pack("<d", value))
    return f"0x{bits:016X}"


def string_literal(data: bytes) -> str:
    """c"..." with non-printable bytes escaped."""
    out = []
    for b in data:
        if 32 <= b < 127 and b not in (34, 92):
            out.append(chr(b))
        else:
            out.append(f"\\{b:02X}")
    return 'c"' + "".join(out) + '"'


class ModuleWriter:
    """Globals, declarations, function bodies and metadata of one LLVM module."""

    def __init__(self, triple: str, datalayout: str):
        self.header = [f'target triple = "{triple}"', f'target datalayout = "{datalayout}"']
        self.globals: list[str] = []
        self.functions: list[str] = []
        self.declared: dict[str, str] = {}
        self.metadata: list[str] = []
        self._strings: dict[bytes, str] = {}
        self._names: set[str] = set()

    def declare(self, name: str, signature: str) -> None:
        """signature: 'declare float @expf(float)'; declared once per name."""
        if name not in self.declared:
            self.declared[name] = signature

    def string(self, text: str) -> str:
        """A private NUL-terminated constant; returns its @name."""
        data = text.encode("utf-8") + b"\0"
        name = self._strings.get(data)
        if name is None:
            name = f"@.str.{len(self._strings)}"
            self._strings[data] = name
            self.globals.append(f"{name} = private unnamed_addr constant [{len(data)} x i8] "
                                f"{string_literal(data)}, align 1")
        return name

    def unique(self, base: str) -> str:
        name, k = base, 0
        while name in self._names:
            k += 1
            name = f"{base}.{k}"
        self._names.add(name)
        return name

    def add_metadata(self, body: str, distinct: bool = False) -> str:
        idx = len(self.metadata)
        self.metadata.append(f"!{idx} = {'distinct ' if distinct else ''}{body}")
        return f"!{idx}"

    def loop_metadata(self, *properties: str) -> str:
        """A loop ID with the given properties, e.g. '!{!"llvm.loop.unroll.full"}'."""
        props = [self.add_metadata(p) for p in properties]
        idx = len(self.metadata)
        ref = f"!{idx}"
        self.metadata.append(f"{ref} = distinct !{{{', '.join([ref, *props])}}}")
        return ref

    def text(self) -> str:
        parts = self.header + [""] + self.globals + [""] + list(self.declared.values()) + [""]
        parts += self.functions + self.metadata
        return "\n".join(parts) + "\n"


class FunctionWriter:
    """Instructions of one function. Values are operand strings ('%t3', '1', '0x...')."""

    def __init__(self, module: ModuleWriter, header: str):
        self.module = module
        self.header = header
        self.allocas: list[str] = []
        self.body: list[str] = []
        self._n = 0
        self.block = "entry"
        self.terminated = False

    def tmp(self, hint: str = "t") -> str:
        self._n += 1
        return f"%{hint}{self._n}"

    def label(self, hint: str) -> str:
        self._n += 1
        return f"{hint}{self._n}"

    def emit(self, instr: str, hint: str = "t") -> str:
        """Append 'name = instr' and return the name."""
        name = self.tmp(hint)
        self.body.append(f"  {name} = {instr}")
        return name

    def emit_void(self, instr: str) -> None:
        self.body.append(f"  {instr}")

    def start_block(self, label: str) -> None:
        self.body.append(f"{label}:")
        self.block = label
        self.terminated = False

    def br(self, label: str, meta: str = "") -> None:
        self.body.append(f"  br label %{label}{meta}")
        self.terminated = True

    def cond_br(self, cond: str, then: str, other: str, meta: str = "") -> None:
        self.body.append(f"  br i1 {cond}, label %{then}, label %{other}{meta}")
        self.terminated = True

    def ret(self, value: str) -> None:
        self.body.append(f"  ret i32 {value}")
        self.terminated = True

    def alloca(self, ty: str, count: int, align: int) -> str:
        """Stack memory in the entry block, so loops around the use do not grow the stack."""
        self._n += 1
        name = f"%a{self._n}"
        self.allocas.append(f"  {name} = alloca {ty}, i64 {count}, align {align}")
        return name

    def text(self) -> str:
        return "\n".join([self.header + " {", "entry:", *self.allocas, *self.body, "}", ""])
