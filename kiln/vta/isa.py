"""The instruction set: 128-bit instructions and 32-bit micro-ops, as data.

Five instructions, each led by ``opcode`` and four dependency flags (pop/push to the previous
and next module of the load -> compute -> store pipeline):

- LOAD / STORE (module load for inp/wgt, compute for uop/acc; store for STORE): a 2-D DMA of
  ``y_size`` rows of ``x_size`` blocks, source rows ``x_stride`` blocks apart in DRAM, written
  densely to SRAM from ``sram_base`` with ``x_pad_*``/``y_pad_*`` zero blocks around each row
  and the tile (the padding of a conv). DRAM addresses are ``(dram_seg, dram_base)``: segment
  k < 15 is the k-th argument array of the call, segment 15 the module's micro-op array; the
  base counts blocks of the memory type. STORE narrows accumulators to int8 (the low 8 bits).
- GEMM: for i_out < iter_out, i_in < iter_in, for each micro-op u in [uop_bgn, uop_end):
  acc[u.acc + i_out*dst_factor_out + i_in*dst_factor_in] (+)= inp[...] x wgt[...]^T, the
  indices of inp and wgt advanced by src_/wgt_factor_* the same way; ``reset`` writes zeros.
- ALU: the same two loops over micro-ops (dst, src): acc[dst] = op(acc[src], imm) with
  ``use_imm``, else acc[dst] = op(acc[dst], acc[src]); op is MIN, MAX, ADD or SHR (arithmetic;
  a negative shift shifts left). No multiply.
- FINISH: the end of the stream.

Field widths of the index fields follow the configuration (``layout(env)``); the C
simulators read the same layout (src/vta/vta_sim.h).
"""

from __future__ import annotations

import numpy as np

from .environment import ITER_BITS, Environment, VTAConfigError

LOAD, STORE, GEMM, FINISH, ALU = 0, 1, 2, 3, 4
OPCODE_NAMES = {LOAD: "LOAD", STORE: "STORE", GEMM: "GEMM", FINISH: "FINISH", ALU: "ALU"}
MEM_UOP, MEM_WGT, MEM_INP, MEM_ACC = 0, 1, 2, 3
MEM_NAMES = {MEM_UOP: "uop", MEM_WGT: "wgt", MEM_INP: "inp", MEM_ACC: "acc"}
ALU_MIN, ALU_MAX, ALU_ADD, ALU_SHR = 0, 1, 2, 3
ALU_NAMES = {ALU_MIN: "min", ALU_MAX: "max", ALU_ADD: "add", ALU_SHR: "shr"}
UOP_SEGMENT = 15  # dram_seg of the module's own micro-op array
MAX_ARGS = 15
SRAM_BASE_BITS = 16
DRAM_BASE_BITS = 32

_COMMON = (("opcode", 3), ("pop_prev", 1), ("pop_next", 1), ("push_prev", 1), ("push_next", 1))
_MEM = (("memory_type", 2), ("sram_base", SRAM_BASE_BITS), ("dram_seg", 4), ("dram_base", DRAM_BASE_BITS),
        ("y_size", 16), ("x_size", 16), ("x_stride", 16), ("y_pad_0", 4), ("y_pad_1", 4),
        ("x_pad_0", 4), ("x_pad_1", 4))


def layout(env: Environment) -> dict:
    """opcode -> ((field, bits), ...) from the least significant bit of the 128-bit word."""
    w = env.field_bits
    loops = (("reset", 1), ("uop_bgn", w["uop"]), ("uop_end", w["uop"]), ("iter_out", ITER_BITS),
             ("iter_in", ITER_BITS), ("dst_factor_out", w["acc"]), ("dst_factor_in", w["acc"]))
    gemm = loops + (("src_factor_out", w["inp"]), ("src_factor_in", w["inp"]),
                    ("wgt_factor_out", w["wgt"]), ("wgt_factor_in", w["wgt"]))
    alu = loops + (("src_factor_out", w["acc"]), ("src_factor_in", w["acc"]), ("alu_opcode", 3),
                   ("use_imm", 1), ("imm", 16))
    return {LOAD: _COMMON + _MEM, STORE: _COMMON + _MEM, GEMM: _COMMON + gemm, ALU: _COMMON + alu,
            FINISH: _COMMON}


def layout_bits(env: Environment) -> dict:
    for name in ("INP", "WGT", "ACC", "UOP"):
        if getattr(env, f"{name}_DEPTH") > 1 << SRAM_BASE_BITS:
            raise VTAConfigError(f"vta config: LOG_{name}_BUFF_SIZE={getattr(env, f'LOG_{name}_BUFF_SIZE')} gives "
                                 f"{getattr(env, f'{name}_DEPTH')} blocks, more than the {SRAM_BASE_BITS}-bit sram_base "
                                 "of LOAD/STORE addresses")
    return {OPCODE_NAMES[op]: sum(b for _, b in fields) for op, fields in layout(env).items()}


class Insn:
    """One instruction: ``Insn(GEMM, reset=0, uop_bgn=0, uop_end=4, ...)``; unset fields are 0."""

    __slots__ = ("opcode", "fields")

    def __init__(self, opcode: int, **fields):
        self.opcode = opcode
        self.fields = fields

    def __getitem__(self, name):
        return self.fields.get(name, 0)

    def __setitem__(self, name, value):
        self.fields[name] = value

    def __eq__(self, other):
        return isinstance(other, Insn) and self.opcode == other.opcode and \
            {k: v for k, v in self.fields.items() if v} == {k: v for k, v in other.fields.items() if v}

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={v}" for k, v in self.fields.items() if v)
        return f"{OPCODE_NAMES.get(self.opcode, self.opcode)}({items})"


def encode(insns, env: Environment) -> np.ndarray:
    """Instructions -> uint64 array of shape (n, 2): low word first, fields from bit 0 up."""
    lay = layout(env)
    out = np.zeros((len(insns), 2), dtype=np.uint64)
    for n, insn in enumerate(insns):
        word, shift = 0, 0
        for name, bits in lay[insn.opcode]:
            value = insn.opcode if name == "opcode" else insn.fields.get(name, 0)
            if name == "imm":
                if not -(1 << 15) <= value < 1 << 15:
                    raise VTAConfigError(f"ALU immediate {value} does not fit the signed 16-bit imm field")
                value &= 0xFFFF
            elif not 0 <= value < 1 << bits:
                raise VTAConfigError(f"{OPCODE_NAMES[insn.opcode]} field {name}={value} does not fit its {bits} "
                                     f"bits in configuration {env.model}")
            word |= value << shift
            shift += bits
        out[n, 0] = word & 0xFFFFFFFFFFFFFFFF
        out[n, 1] = word >> 64
    return out


def decode(words: np.ndarray, env: Environment) -> list[Insn]:
    """The inverse of encode."""
    lay = layout(env)
    out = []
    for lo, hi in np.asarray(words, dtype=np.uint64).reshape(-1, 2):
        word = int(lo) | int(hi) << 64
        opcode = word & 7
        if opcode not in lay:
            raise VTAConfigError(f"undefined opcode {opcode} in instruction word {word:#034x}")
        fields, shift = {}, 0
        for name, bits in lay[opcode]:
            value = (word >> shift) & ((1 << bits) - 1)
            shift += bits
            if name == "imm" and value >= 1 << 15:
                value -= 1 << 16
            if name != "opcode":
                fields[name] = value
        out.append(Insn(opcode, **fields))
    return out


def encode_uops(uops, env: Environment, kind: int) -> np.ndarray:
    """Micro-ops -> uint32: GEMM (acc, inp, wgt) packed acc | inp | wgt; ALU (dst, src) dst | src."""
    w = env.field_bits
    a, i = w["acc"], w["inp"]
    out = np.zeros(len(uops), dtype=np.uint32)
    for n, u in enumerate(uops):
        if kind == GEMM:
            acc, inp, wgt = u
            if not (0 <= acc < env.ACC_DEPTH and 0 <= inp < env.INP_DEPTH and 0 <= wgt < env.WGT_DEPTH):
                raise VTAConfigError(f"GEMM micro-op {u} indexes past the SRAMs (acc {env.ACC_DEPTH}, inp "
                                     f"{env.INP_DEPTH}, wgt {env.WGT_DEPTH} blocks)")
            out[n] = acc | inp << a | wgt << (a + i)
        else:
            dst, src = u
            if not (0 <= dst < env.ACC_DEPTH and 0 <= src < env.ACC_DEPTH):
                raise VTAConfigError(f"ALU micro-op {u} indexes past the {env.ACC_DEPTH}-block accumulator SRAM")
            out[n] = dst | src << a
    return out


def decode_uops(words: np.ndarray, env: Environment, kind: int) -> list[tuple]:
    w = env.field_bits
    a, i, g = w["acc"], w["inp"], w["wgt"]
    out = []
    for x in np.asarray(words, dtype=np.uint32).tolist():
        if kind == GEMM:
            out.append((x & ((1 << a) - 1), (x >> a) & ((1 << i) - 1), (x >> (a + i)) & ((1 << g) - 1)))
        else:
            out.append((x & ((1 << a) - 1), (x >> a) & ((1 << a) - 1)))
    return out
