"""What a CPU target's vector unit offers, as LLVM compiles for it: vector width per dtype, FMA,
the number of vector registers, the ISA extensions schedules care about.

Nothing here is guessed from CPU names. The target is resolved to the (triple, cpu, features)
that kiln's LLVM backend will compile for (``kiln.codegen.llvm.target.target_info``: plain
``llvm`` is this machine), and a few tiny probe functions are compiled for it; the emitted
assembly says what the instruction selector did:

- width: a 512-bit ``fadd`` / ``add`` (float, i32, i16) — the destination register of the add
  instruction (zmm / ymm / xmm; NEON q / v.4s; scalar otherwise) is the widest legal vector;
- FMA: ``llvm.fma.v4f32`` — without a fused multiply-add instruction LLVM calls ``fmaf``;
- registers: 28 vectors loaded (volatile, so they cannot be re-loaded later) and then stored
  in reverse, so all are live at once: the register allocator reaches for register 16 and up
  only where it exists (a spill count would mislead: AArch64 saves its callee-saved d8-d15).

So ``-mcpu=x86-64-v3``, ``-mcpu=znver3`` and ``-mcpu=skylake-avx512 -mattr=-avx512f`` all get
what LLVM would emit for them. Results are cached per (triple, cpu, features); a probe costs a
few milliseconds.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..errors import TargetError

_DTYPE_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64, "int8": 8, "uint8": 8,
               "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64, "uint64": 64}


@dataclass(frozen=True)
class CPUFacts:
    """The vector unit of one CPU target.

    ``float_bits`` / ``int32_bits`` / ``int16_bits``: widest vector register LLVM uses for float,
    32-bit and 16/8-bit integer adds (32 when only scalars); ``has_fma``; ``vector_registers``;
    ``features``: ISA extensions found (x86: sse2 avx avx2 fma avx512f avx512bw f16c avx512fp16
    avx512bf16 amx-bf16, the int8 ones, and sse4a, AMD's extension that LLVM uses for some
    shuffles, so code for an AMD CPU is not taken to run on an Intel one;
    ARM: neon fma fp16 fullfp16), where f16c / fp16 are vector float16 conversions and
    avx512fp16 / fullfp16 native half arithmetic;
    ``triple``/``cpu``/``llvm_features``: what LLVM compiles for.
    """

    triple: str
    cpu: str
    llvm_features: str
    arch: str
    float_bits: int
    int32_bits: int
    int16_bits: int
    has_fma: bool
    vector_registers: int
    features: frozenset

    def lanes(self, dtype="float32") -> int:
        """Elements of ``dtype`` (a name or a DType) in one vector register (1 without SIMD)."""
        name = str(dtype)
        bits = _DTYPE_BITS.get(name)
        if bits is None:
            raise TargetError(f"cpu_facts: no vector width known for dtype {name!r}; "
                              f"use one of {', '.join(_DTYPE_BITS)}")
        if name.startswith(("float", "bfloat")) and bits >= 32:
            width = self.float_bits
        elif bits >= 32:
            width = self.int32_bits
        else:
            width = self.int16_bits
        return max(1, width // bits)

    @property
    def vector_bits(self) -> int:
        return self.float_bits

    @property
    def full_width_avx512(self) -> bool:
        """AVX-512 code for a CPU without AMD's sse4a: Intel's AVX-512 cores run a 512-bit FMA
        whole (two such ports on Xeons), where AMD's Zen 4 splits it into two 256-bit halves.
        The x86 conv defaults differ on it: Intel runs out of load slots before FMA slots, so its
        register tiles share each load among more FMAs (docs/mixed-precision.md)."""
        return "avx512f" in self.features and "sse4a" not in self.features


def cpu_facts(target=None) -> CPUFacts:
    """Facts of ``target`` (a Target or a string; default: the current target, else this machine).

    A GPU target answers for its host (or this machine): the host code is what runs on the CPU.

    >>> cpu_facts("llvm -mcpu=haswell").lanes("float32")
    8
    """
    from .target import Target

    if target is None:
        target = Target.current(allow_none=True)
    if isinstance(target, str):
        target = Target(target)
    if target is not None and target.kind.name not in ("llvm", "c"):
        target = target.host
    if target is not None and target.kind.name == "c":
        return _facts_of(_c_as_llvm(target))
    return _facts_of(str(target) if target is not None else "llvm")


def _c_as_llvm(target) -> str:
    """The LLVM target whose facts a C target has: its -mcpu's board (Cortex-M), else this machine."""
    mcpu = str(target.attrs.get("mcpu", "") or "")
    if mcpu.startswith("cortex-m"):
        arch = {"cortex-m0": "thumbv6m", "cortex-m0plus": "thumbv6m", "cortex-m3": "thumbv7m",
                "cortex-m55": "thumbv8.1m.main", "cortex-m85": "thumbv8.1m.main",
                "cortex-m33": "thumbv8m.main"}.get(mcpu, "thumbv7em")
        return f"llvm -mtriple={arch}-none-eabi -mcpu={mcpu}"
    return "llvm"


@functools.lru_cache(maxsize=64)
def _facts_of(text: str) -> CPUFacts:
    from ..codegen.llvm.target import target_info  # lazily: it loads llvmlite
    from .target import Target

    info = target_info(Target(text))
    return _probe(info.triple, info.cpu, info.features)


def why_host_cannot_run(target) -> str:
    """'' when this machine can execute code compiled for ``target``, else why not (another
    architecture, or extensions the target's code may use that this CPU lacks, e.g. AMD's SSE4A
    in code for -mcpu=znver3 on an Intel CPU)."""
    host, want = cpu_facts("llvm"), cpu_facts(target)
    if host.arch != want.arch:
        return f"this machine is {host.arch}, the code {want.arch}"
    missing = sorted(want.features - host.features)
    return f"this machine ({host.cpu}) lacks {', '.join(missing)}" if missing else ""


def host_cpu() -> tuple[str, str]:
    """(LLVM's name for this machine's CPU, its feature string)."""
    from ..codegen.llvm.target import host

    _, cpu, features = host()
    return cpu, features


# ---------------------------------------------------------------------------------------------
_WIDTH_IR = """
define void @w_f32(ptr %p) {
  %q = getelementptr i8, ptr %p, i64 64
  %a = load <16 x float>, ptr %p, align 4
  %b = load <16 x float>, ptr %q, align 4
  %r = fadd <16 x float> %a, %b
  store <16 x float> %r, ptr %p, align 4
  ret void
}
define void @w_i32(ptr %p) {
  %q = getelementptr i8, ptr %p, i64 64
  %a = load <16 x i32>, ptr %p, align 4
  %b = load <16 x i32>, ptr %q, align 4
  %r = add <16 x i32> %a, %b
  store <16 x i32> %r, ptr %p, align 4
  ret void
}
define void @w_i16(ptr %p) {
  %q = getelementptr i8, ptr %p, i64 64
  %a = load <32 x i16>, ptr %p, align 2
  %b = load <32 x i16>, ptr %q, align 2
  %r = add <32 x i16> %a, %b
  store <32 x i16> %r, ptr %p, align 2
  ret void
}
define void @h_add(ptr %p) {
  %q = getelementptr i8, ptr %p, i64 16
  %a = load <8 x half>, ptr %p, align 2
  %b = load <8 x half>, ptr %q, align 2
  %r = fadd <8 x half> %a, %b
  store <8 x half> %r, ptr %p, align 2
  ret void
}
define void @h_ext(ptr %p, ptr %o) {
  %a = load <8 x half>, ptr %p, align 2
  %r = fpext <8 x half> %a to <8 x float>
  store <8 x float> %r, ptr %o, align 4
  ret void
}
define <8 x i16> @sse4a(<8 x i16> %a, <8 x i16> %b) {
  %r = shufflevector <8 x i16> %a, <8 x i16> %b, <8 x i32> <i32 0, i32 8, i32 2, i32 3, i32 undef, i32 undef, i32 undef, i32 undef>
  ret <8 x i16> %r
}
declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)
define void @fma(ptr %p) {
  %q = getelementptr i8, ptr %p, i64 16
  %s = getelementptr i8, ptr %p, i64 32
  %a = load <4 x float>, ptr %p, align 4
  %b = load <4 x float>, ptr %q, align 4
  %c = load <4 x float>, ptr %s, align 4
  %r = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %b, <4 x float> %c)
  store <4 x float> %r, ptr %p, align 4
  ret void
}
"""

# The destination (last) register of the add: x86 AT&T syntax, AArch64, ARMv7 NEON/VFP.
_ADD_X86 = re.compile(r"^\s*v?(?:addps|paddd|paddw)\b.*%([xyz])mm\d+\s*$", re.M)
_ADD_A64 = re.compile(r"^\s*(?:fadd|add)\s+(v\d+\.\d+[shb]|[sqdwxh]\d+)", re.M)
_ADD_ARM = re.compile(r"^\s*v?add(?:\.[a-z]+\d+)?\s+([qds])\d+", re.M)


def _width(asm: str, arch: str, bits_if_scalar: int) -> int:
    if arch == "x86_64" or arch.startswith("i") and arch.endswith("86"):
        regs = set(_ADD_X86.findall(asm))
        return 512 if "z" in regs else 256 if "y" in regs else 128 if "x" in regs else bits_if_scalar
    if arch == "aarch64":
        regs = _ADD_A64.findall(asm)
        return 128 if any(r.startswith(("v", "q")) for r in regs) else bits_if_scalar
    if arch == "arm":
        regs = set(_ADD_ARM.findall(asm))
        return 128 if "q" in regs else 64 if "d" in regs else bits_if_scalar
    return bits_if_scalar


def _functions(asm: str) -> dict:
    """Assembly text of each probe function, by name."""
    out, name, lines = {}, None, []
    for line in asm.splitlines():
        m = re.match(r"^_?([A-Za-z_][\w.]*):", line)  # Mach-O prefixes an underscore
        if m and m.group(1) in ("w_f32", "w_i32", "w_i16", "h_add", "h_ext", "sse4a", "fma", "live28"):
            if name:
                out[name] = "\n".join(lines)
            name, lines = m.group(1), []
        elif name:
            lines.append(line)
    if name:
        out[name] = "\n".join(lines)
    return out


def _pressure_ir(vec: str, count: int) -> str:
    loads = "\n".join(f"  %p{i} = getelementptr {vec}, ptr %p, i64 {i}\n"
                      f"  %v{i} = load volatile {vec}, ptr %p{i}" for i in range(count))
    stores = "\n".join(f"  store volatile {vec} %v{i}, ptr %p{count - 1 - i}" for i in range(count))
    return f"define void @live{count}(ptr %p) {{\n{loads}\n{stores}\n  ret void\n}}\n"


def _emit(llvm, tm, text: str) -> str:
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
        return tm.emit_assembly(mod)
    except RuntimeError as err:
        raise TargetError(f"cpu_facts: LLVM cannot compile a vector probe for this target: {err}. "
                          "Check -mtriple/-mcpu/-mattr") from None


@functools.lru_cache(maxsize=64)
def _probe(triple: str, cpu: str, features: str) -> CPUFacts:
    from ..codegen.llvm.target import LOCK, arch_of, binding

    llvm = binding()
    arch = arch_of(triple)
    with LOCK:
        # A private machine: verbose assembly (spill comments) must not leak into kiln's own.
        tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=2,
                                                                   reloc="pic")
        tm.set_asm_verbosity(True)
        body = _functions(_emit(llvm, tm, _WIDTH_IR))
        float_bits = _width(body["w_f32"], arch, 32)
        int32_bits = _width(body["w_i32"], arch, 32)
        int16_bits = _width(body["w_i16"], arch, 16)
        has_fma = "fmaf" not in body["fma"]
        half = _half_support(body["h_add"], body["h_ext"], arch)
        # A word inserted into the low quadword: one insertq where SSE4A exists (AMD's CPUs)
        half |= {"sse4a"} if re.search(r"\binsertq\b", body["sse4a"]) else set()
        vec = f"<{max(1, float_bits // 32)} x float>"
        live = _functions(_emit(llvm, tm, _pressure_ir(vec, 28)))["live28"]
    highest = max(_register_numbers(live, arch), default=0)
    registers = 32 if highest >= 16 else 16 if highest >= 8 else 8
    with LOCK:
        int8 = _int8_features(llvm, tm, arch, triple, cpu, features)
        bf16 = _bf16_features(llvm, tm, arch, triple, cpu, features)
    return CPUFacts(triple, cpu, features, arch, float_bits, int32_bits, int16_bits, has_fma, registers,
                    _feature_names(arch, float_bits, int32_bits, int16_bits, has_fma) | half | int8 | bf16)


def _register_numbers(asm: str, arch: str):
    """Numbers of the vector registers named in ``asm``, in units of one full vector register."""
    if arch == "aarch64":
        return [int(n) for n in re.findall(r"\b[qv](\d+)\b", asm)]
    if arch == "arm":  # q<n> is d<2n>, d<2n+1>
        return [int(n) for n in re.findall(r"\bq(\d+)\b", asm)] + \
            [int(n) // 2 for n in re.findall(r"\bd(\d+)\b", asm)]
    return [int(n) for n in re.findall(r"%[xyz]mm(\d+)", asm)]


# float16 instructions, by the names LLVM gives the extensions: vector conversions to and from
# float (x86 F16C vcvtph2ps, ARM fcvtl / vcvt.f32.f16) and native half arithmetic (AVX512-FP16
# vaddph, ARMv8.2 fadd .8h / vadd.f16).
_HALF_ADD = {"x86": r"\bvaddph\b", "aarch64": r"\bfadd\s+v\d+\.8h", "arm": r"\bvadd\.f16\b"}
_HALF_EXT = {"x86": r"\bvcvtph2psx?\b", "aarch64": r"\bfcvtl2?\s+v\d+\.4s", "arm": r"\bvcvt\.f32\.f16\b"}
_HALF_NAMES = {"x86": ("f16c", "avx512fp16"), "aarch64": ("fp16", "fullfp16"), "arm": ("fp16", "fullfp16")}


def _half_support(add_asm: str, ext_asm: str, arch: str) -> frozenset:
    family = "x86" if arch == "x86_64" or arch.startswith("i") and arch.endswith("86") else arch
    if family not in _HALF_NAMES:
        return frozenset()
    convert, native = _HALF_NAMES[family]
    names = {convert} if re.search(_HALF_EXT[family], ext_asm) else set()
    return frozenset(names | ({native} if re.search(_HALF_ADD[family], add_asm) else set()))


def _feature_names(arch, float_bits, int32_bits, int16_bits, has_fma) -> frozenset:
    names = set()
    if arch == "x86_64" or arch.endswith("86"):
        names |= {"sse2"} if float_bits >= 128 else set()
        names |= {"avx"} if float_bits >= 256 else set()
        names |= {"avx2"} if int32_bits >= 256 else set()
        names |= {"avx512f"} if float_bits >= 512 else set()
        names |= {"avx512bw"} if int16_bits >= 512 else set()
    elif arch in ("aarch64", "arm") and float_bits >= 128:
        names.add("neon")
    if has_fma:
        names.add("fma")
    return frozenset(names)


# 8-bit dot products, as the instruction selector uses them: a u8 x s8 (x86) / s8 x s8 (ARM)
# multiply-and-sum of 64 bytes becomes vpdpbusd on a zmm (AVX-512 VNNI) or, VEX-encoded, a ymm
# (AVX-VNNI); sdot/udot on AArch64 with the dot-product extension. An intrinsic LLVM cannot
# select would abort the process, so these are generic IR patterns. AMX has no such pattern:
# it is read from the feature string (the host's, or -mattr), else asked of LLVM in a child
# process (compile tdpbusd; an abort there only fails the probe).
_DOT_IR = """
declare i32 @llvm.vector.reduce.add.v64i32(<64 x i32>)
define i32 @dot8(ptr %p, ptr %q) {
  %a = load <64 x i8>, ptr %p, align 1
  %b = load <64 x i8>, ptr %q, align 1
  %az = EXT_A <64 x i8> %a to <64 x i32>
  %bs = sext <64 x i8> %b to <64 x i32>
  %m = mul <64 x i32> %az, %bs
  %r = call i32 @llvm.vector.reduce.add.v64i32(<64 x i32> %m)
  ret i32 %r
}
"""

_AMX_IR = """
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.tdpbusd.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
define void @amx(ptr %a, ptr %b, ptr %c) {
  %ta = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %a, i64 64)
  %tb = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %b, i64 64)
  %tc = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %c, i64 64)
  %r = call x86_amx @llvm.x86.tdpbusd.internal(i16 16, i16 64, i16 64, x86_amx %tc, x86_amx %ta, x86_amx %tb)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c, i64 64, x86_amx %r)
  ret void
}
"""


def _int8_features(llvm, tm, arch, triple, cpu, features) -> frozenset:
    names = set()
    if arch == "x86_64" or arch.startswith("i") and arch.endswith("86"):
        asm = _emit(llvm, tm, _DOT_IR.replace("EXT_A", "zext"))
        if re.search(r"^\s*vpdpbusd\s.*%zmm", asm, re.M):
            names.add("avx512vnni")
        if re.search(r"\{vex\}\s*vpdpbusd", asm):
            names.add("avxvnni")
        # a CPU with both (Sapphire Rapids) picks the zmm form; the feature string says the rest
        names |= {f[1:] for f in (features or "").split(",") if f in ("+avxvnni", "+avx512vnni")}
        if arch == "x86_64" and _has_amx(triple, cpu, features):
            names.add("amx-int8")
    elif arch == "aarch64":
        asm = _emit(llvm, tm, _DOT_IR.replace("EXT_A", "sext"))
        if re.search(r"^\s*sdot\s", asm, re.M):
            names.add("dotprod")
    return frozenset(names)


def _has_amx(triple: str, cpu: str, features: str) -> bool:
    flags = features.split(",") if features else []
    if "+amx-int8" in flags:
        return True
    if "-amx-int8" in flags or "-amx-tile" in flags:
        return False
    return _child_compiles(_AMX_IR, triple, cpu, features)


@functools.lru_cache(maxsize=32)
def _child_compiles(ir: str, triple: str, cpu: str, features: str) -> bool:
    """Whether LLVM compiles ``ir`` for the target, asked in a child Python (an abort stays there)."""
    import subprocess
    import sys

    code = ("import sys, llvmlite.binding as l\n"
            "l.initialize_all_targets(); l.initialize_all_asmprinters()\n"
            "m = l.parse_assembly(sys.stdin.read()); m.verify()\n"
            "tm = l.Target.from_triple(sys.argv[1]).create_target_machine(cpu=sys.argv[2], features=sys.argv[3])\n"
            "tm.emit_assembly(m)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code, triple, cpu, features], input=ir, text=True,
                              capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


# bfloat16: a float32 -> bfloat16 conversion of a zmm becomes vcvtneps2bf16 where the CPU has
# AVX512-BF16 (and with it vdpbf16ps); elsewhere LLVM calls __truncsfbf2. AMX-BF16 (tdpbf16ps)
# is read from the feature string, else asked of LLVM in a child process, as AMX-INT8 is.
_BF16_IR = """
define void @bf16(ptr %p, ptr %o) {
  %a = load <16 x float>, ptr %p, align 4
  %b = fadd <16 x float> %a, %a
  %r = fptrunc <16 x float> %b to <16 x bfloat>
  store <16 x bfloat> %r, ptr %o, align 2
  ret void
}
"""

_AMX_BF16_IR = _AMX_IR.replace("tdpbusd", "tdpbf16ps")


def _bf16_features(llvm, tm, arch, triple, cpu, features) -> frozenset:
    if arch != "x86_64":
        return frozenset()
    names = set()
    if re.search(r"^\s*vcvtneps2bf16\s+%zmm", _emit(llvm, tm, _BF16_IR), re.M):
        names.add("avx512bf16")
    flags = features.split(",") if features else []
    if "+amx-bf16" in flags or ("-amx-bf16" not in flags and "-amx-tile" not in flags
                                and _child_compiles(_AMX_BF16_IR, triple, cpu, features)):
        names.add("amx-bf16")
    return frozenset(names)
