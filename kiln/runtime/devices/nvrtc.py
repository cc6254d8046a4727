"""NVRTC on the runtime side: CUDA C -> PTX or cubin, with no GPU needed.

The compiler (kiln/codegen/cuda.py) uses it to put PTX in every CUDA module it builds; the
runtime uses it only for a module that carries no image for the device (source only, or a
cubin for another arch): it compiles the source for the device's exact arch before the first
launch. Everything here imports ``cuda.bindings.nvrtc`` on first use, so the runtime imports
without it.
"""

from __future__ import annotations

import functools

from ...errors import CompileError

DEFAULT_ARCH = "sm_80"  # when nothing names one and no GPU is present (runs on sm_80 and newer)
INSTALL = "pip install 'kiln[runtime-cuda]' (cuda-bindings, nvidia-cuda-nvrtc)"


def nvrtc():
    """cuda.bindings.nvrtc, or a CompileError saying how to install it."""
    try:
        from cuda.bindings import nvrtc as mod
    except ImportError:
        raise CompileError(f"compiling CUDA needs NVRTC: {INSTALL}") from None
    return mod


def have_nvrtc() -> bool:
    try:
        nvrtc().nvrtcVersion()
    except Exception:  # noqa: BLE001 - no module, or the library cannot be found
        return False
    return True


def _ok(err, what: str) -> None:
    if int(err) != 0:
        raise CompileError(f"NVRTC {what} failed: {getattr(err, 'name', err)}")


@functools.lru_cache(maxsize=64)
def compile_source(source: str, arch: str, fmt: str = "ptx", name: str = "kiln_kernels.cu") -> bytes:
    """The kernels compiled by NVRTC for arch ("sm_90"): PTX text, or a cubin with fmt="cubin"."""
    if fmt not in ("ptx", "cubin"):
        raise CompileError(f"NVRTC makes 'ptx' or 'cubin', not {fmt!r}")
    lib = nvrtc()
    arch = normalize_arch(arch)
    err, prog = lib.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _ok(err, "create program")
    try:
        # PTX for a virtual arch (compute_XX) runs on that arch and newer; a cubin is for one chip.
        gpu = arch.replace("sm_", "compute_") if fmt == "ptx" else arch
        # No --use_fast_math: division and sqrt stay IEEE-exact, as the CPU backends compute them.
        opts = [f"--gpu-architecture={gpu}".encode(), b"--std=c++17", b"-default-device"]
        (err,) = lib.nvrtcCompileProgram(prog, len(opts), opts)
        if int(err) != 0:
            size = lib.nvrtcGetProgramLogSize(prog)[1]
            log = b" " * size
            lib.nvrtcGetProgramLog(prog, log)
            text = log.decode(errors="replace").rstrip("\x00").strip()
            raise CompileError(f"NVRTC could not compile the CUDA kernels for {arch}:\n{text}")
        get_size, get = ((lib.nvrtcGetPTXSize, lib.nvrtcGetPTX) if fmt == "ptx"
                         else (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN))
        err, size = get_size(prog)
        _ok(err, f"{fmt} size")
        out = b" " * size
        _ok(get(prog, out)[0], f"get {fmt}")
        return bytes(out)
    finally:
        lib.nvrtcDestroyProgram(prog)


def normalize_arch(arch: str) -> str:
    """"sm_90", "90", "9.0", "compute_90" -> "sm_90"; "sm_90a" (arch-specific features: Hopper's
    wgmma, setmaxnreg) and "sm_100f" (family) keep their suffix."""
    text = str(arch).strip().lower()
    for prefix in ("sm_", "compute_"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if "." in text:
        major, _, minor = text.partition(".")
        text = major + minor
    digits = text[:-1] if text[-1:] in ("a", "f") else text
    if not (digits.isdigit() and len(digits) >= 2):
        raise CompileError(f"CUDA arch {arch!r} is not like 'sm_90' or 'sm_90a'")
    return "sm_" + text


def arch_number(arch: str) -> int:
    """The compute capability as a number: "sm_90a" -> 90, "8.6" -> 86."""
    text = normalize_arch(arch)[3:]
    return int(text.rstrip("af"))


def arch_specific(arch: str) -> bool:
    """Whether arch names the chip's own features ("sm_90a"), which run on that chip only."""
    return normalize_arch(arch).endswith("a")


def ptx_of(device_code: dict) -> str:
    """The module's PTX: carried since the build, else compiled now (and kept)."""
    if "ptx" not in device_code:
        device_code["ptx"] = compile_source(device_code["source"], device_code.get("arch", DEFAULT_ARCH),
                                            "ptx").rstrip(b"\x00").decode()
    return device_code["ptx"]


def source_of(device_code: dict, fmt: str = "") -> str:
    """The CUDA C ("", "cu", "cuda") or PTX ("ptx") of a module's device code."""
    if fmt in ("", "cu", "cuda"):
        return device_code["source"]
    if fmt == "ptx":
        return ptx_of(device_code)
    raise CompileError(f"a cuda module has its source as 'cu' or 'ptx', not {fmt!r}")
