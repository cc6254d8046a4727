"""Which schedule family (topi package) a target's kernels come from: "x86", "arm_cpu", "gpu",
"mali" or "adreno". Asked by the TE compiler (op_impl.PACKAGES), the qnn passes and the layout
passes; it reads only the target, so it sits below all of them."""

from __future__ import annotations


def target_family(target) -> str:
    """"arm_cpu" for ARM targets (by key or triple), "gpu" for GPU targets ("mali" for
    ``opencl -device=mali``), else "x86" (the generic CPU schedules)."""
    keys = getattr(target, "keys", ()) or ()
    if "gpu" in keys:
        return "adreno" if "adreno" in keys else "mali" if "mali" in keys else "gpu"
    triple = (getattr(target, "mtriple", "") or "").lower()
    if "arm_cpu" in target.keys or triple.startswith(("aarch64", "arm64", "arm", "thumb")):
        return "arm_cpu"
    return "x86"
