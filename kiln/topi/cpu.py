"""What the CPU target offers a schedule: the float32 vector width of the current target."""

from __future__ import annotations

import functools


def _current_target():
    from kiln.target import Target

    return Target.current(allow_none=True)


@functools.lru_cache(maxsize=1)
def _host_flags() -> frozenset:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def vector_lanes(dtype_bits: int = 32, target=None) -> int:
    """Lanes of one vector register for the target (host when no target is active)."""
    target = target or _current_target()
    text = str(target) if target is not None else ""
    triple = getattr(target, "mtriple", "") if target is not None else ""
    mattr = ",".join(getattr(target, "mattr", ()) or ()) if target is not None else ""
    mcpu = getattr(target, "mcpu", "") if target is not None else ""
    if "arm" in text or "aarch64" in triple or "arm" in triple:
        return 128 // dtype_bits  # NEON
    bits = 128
    if mcpu in ("", "native") and not triple and not mattr:
        flags = _host_flags()
        bits = 512 if "avx512f" in flags else 256 if "avx2" in flags else 128
    elif "avx512" in mattr or any(c in mcpu for c in ("skylake-avx512", "cascadelake", "icelake", "sapphire", "znver4", "znver5")):
        bits = 512
    elif "avx2" in mattr or any(c in mcpu for c in ("haswell", "skylake", "znver")):
        bits = 256
    return max(1, bits // dtype_bits)


def vector_registers(target=None) -> int:
    """Architectural vector registers: 32 with AVX-512 or AArch64 NEON, else 16."""
    target = target or _current_target()
    triple = getattr(target, "mtriple", "") if target is not None else ""
    if "aarch64" in triple or "arm64" in triple:
        return 32
    if "arm" in triple or "arm" in (str(target) if target is not None else ""):
        return 16
    return 32 if vector_lanes(32, target) >= 16 else 16
