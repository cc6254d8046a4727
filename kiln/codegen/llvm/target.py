"""LLVM machinery: target machines (cached), optimization and object emission.

Everything expensive to set up (target registration, TargetMachine, pipeline tuning options)
is created once per (triple, cpu, features) and reused, so a warm build of a small kernel is
dominated by LLVM's own parse/optimize/emit time.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

from ...errors import CompileError, InternalError, TargetError

LOCK = threading.Lock()  # LLVM's pass builder and target machines are not thread safe: hold it to use them


@dataclass(frozen=True)
class TargetInfo:
    triple: str
    cpu: str
    features: str
    datalayout: str
    intptr: str  # "i64" or "i32"
    arch: str  # "x86_64", "aarch64", "arm", ...
    android: bool
    opt_level: int


@functools.cache
def binding():
    """llvmlite.binding with every backend initialized (loaded once)."""
    import llvmlite.binding as llvm

    # Every backend, not only the host's: cross triples (aarch64, armv7, android) must work.
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm


@functools.cache
def host() -> tuple[str, str, str]:
    """(triple, CPU name, feature string) of this machine, as LLVM names them."""
    llvm = binding()
    return llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def arch_of(triple: str) -> str:
    """The architecture family of ``triple``: "x86_64", "aarch64", "arm", or its first part."""
    arch = triple.split("-")[0]
    if arch in ("x86_64", "amd64"):
        return "x86_64"
    if arch in ("aarch64", "arm64"):
        return "aarch64"
    if arch.startswith(("arm", "thumb")):
        return "arm"
    return arch


def target_info(target) -> TargetInfo:
    """Triple, CPU, features and data layout for an llvm Target (defaults: this machine)."""
    host_triple, host_cpu, host_features = host()
    triple = normalize_triple(target.mtriple or host_triple)
    cpu, features = target.mcpu, ",".join(target.mattr)
    is_host = triple == normalize_triple(host_triple) or arch_of(triple) == arch_of(host_triple) and "android" not in triple
    if cpu == "native" or (not cpu and is_host and not features):
        # Plain "llvm" means "this machine": use all of its vector units (AVX-512 here).
        cpu, features = host_cpu, ",".join(f for f in (host_features, features) if f)
    opt = int(target.attrs.get("opt-level", 3))
    tm = target_machine(triple, cpu, features, opt)
    layout = str(tm.target_data)
    intptr = "i32" if _pointer_bits(layout) == 32 else "i64"
    return TargetInfo(triple, cpu, features, layout, intptr, arch_of(triple), "android" in triple, opt)


_OS_NAMES = ("linux", "android", "darwin", "macos", "ios", "windows", "freebsd", "netbsd", "openbsd",
             "none", "unknown", "fuchsia", "wasi")


def normalize_triple(triple: str) -> str:
    """arch-vendor-os-env. LLVM reads "armv7l-linux-gnueabihf" positionally as vendor "linux",
    OS "gnueabihf": it would then miss the hard-float ABI (and Android's environment)."""
    parts = triple.split("-")
    if len(parts) >= 2 and parts[1] in _OS_NAMES:
        parts.insert(1, "unknown")
    if len(parts) == 3 and parts[2] == "linux":
        parts.append("gnu")
    return "-".join(parts)


def _pointer_bits(layout: str) -> int:
    for part in layout.split("-"):
        if part.startswith("p:") or part.startswith("p0:"):
            return int(part.split(":")[1])
    return 64


@functools.lru_cache(maxsize=32)
def target_machine(triple: str, cpu: str, features: str, opt: int):
    llvm = binding()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as err:
        raise TargetError(f"LLVM cannot generate code for triple {triple!r}: {err}. "
                          "Use e.g. x86_64-linux-gnu, aarch64-linux-gnu, armv7l-linux-gnueabihf") from None
    return target.create_target_machine(cpu=cpu, features=features, opt=min(opt, 3), reloc="pic",
                                        codemodel="default")


@functools.lru_cache(maxsize=32)
def _tuning(opt: int):
    llvm = binding()
    pto = llvm.create_pipeline_tuning_options(speed_level=min(opt, 3))
    pto.loop_vectorization = opt >= 2
    pto.slp_vectorization = opt >= 2
    pto.loop_unrolling = opt >= 1
    pto.loop_interleaving = opt >= 2
    return pto


@dataclass
class Compiled:
    obj: bytes
    asm: str
    ll: str


def compile_ir(text: str, info: TargetInfo, names: list[str], want_asm: bool = True) -> Compiled:
    """Parse, verify, optimize and emit one module; errors name the kiln functions inside."""
    llvm = binding()
    with LOCK:
        try:
            mod = llvm.parse_assembly(text)
            mod.verify()
        except RuntimeError as err:
            raise InternalError(f"kiln generated invalid LLVM IR for {', '.join(names)}: {err}\n"
                                "(a bug in kiln's LLVM backend; KILN_DEBUG=1 prints the IR)") from None
        mod.triple = info.triple
        tm = target_machine(info.triple, info.cpu, info.features, info.opt_level)
        try:
            if info.opt_level > 0:
                pb = llvm.create_pass_builder(tm, _tuning(info.opt_level))
                pb.getModulePassManager().run(mod, pb)
            obj = tm.emit_object(mod)
            asm = tm.emit_assembly(mod) if want_asm else ""
        except RuntimeError as err:
            raise CompileError(f"LLVM failed to compile {', '.join(names)} for {info.triple}: {err}") from None
        return Compiled(obj, asm, str(mod))


def assembly_of(optimized_ir: str, info: TargetInfo) -> str:
    """Assembly text for already optimized IR (parsed again: no module is kept alive for it)."""
    llvm = binding()
    with LOCK:
        mod = llvm.parse_assembly(optimized_ir)
        return target_machine(info.triple, info.cpu, info.features, info.opt_level).emit_assembly(mod)
