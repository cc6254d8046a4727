"""Which machine a shared object or a target triple is for, compared with this one.

Loaders check this before ``dlopen`` so that a module built for another board fails with
"built for aarch64; this machine is x86_64" rather than a loader message about ELF classes.
"""

from __future__ import annotations

import platform
import struct

from ..errors import FileFormatError, KilnError

# ELF e_machine -> our architecture name; 32- and 64-bit variants of a family share a code.
_E_MACHINE = {3: "i386", 62: "x86_64", 40: "arm", 183: "aarch64", 243: "riscv", 8: "mips",
              20: "ppc", 21: "ppc64", 22: "s390x"}

# Spellings in triples and platform.machine() -> (architecture name, pointer bits).
_ARCH_ALIASES = {
    "x86_64": ("x86_64", 64), "amd64": ("x86_64", 64),
    "i386": ("i386", 32), "i486": ("i386", 32), "i586": ("i386", 32), "i686": ("i386", 32),
    "x86": ("i386", 32),
    "aarch64": ("aarch64", 64), "arm64": ("aarch64", 64), "aarch64_be": ("aarch64", 64),
    "riscv64": ("riscv", 64), "riscv32": ("riscv", 32),
    "ppc64le": ("ppc64", 64), "ppc64": ("ppc64", 64), "s390x": ("s390x", 64),
}


def normalize_arch(name: str) -> tuple[str, int]:
    """('aarch64', 64) for 'aarch64-linux-gnu', 'arm64'; ('arm', 32) for 'armv7l', 'thumbv7'."""
    arch = name.split("-")[0].lower()
    if arch in _ARCH_ALIASES:
        return _ARCH_ALIASES[arch]
    if arch.startswith(("arm", "thumb")):
        return ("arm", 32)
    return (arch, 64)


def host_arch() -> tuple[str, int]:
    """This process's architecture: a 32-bit Python on a 64-bit kernel counts as 32-bit."""
    arch, _ = normalize_arch(platform.machine() or "unknown")
    bits = struct.calcsize("P") * 8
    if bits == 32:
        arch = {"x86_64": "i386", "aarch64": "arm"}.get(arch, arch)
    return arch, bits


def is_host_triple(triple: str) -> bool:
    """Whether code for ``triple`` runs here (same architecture, not an Android libc)."""
    return normalize_arch(triple) == host_arch() and "android" not in triple


_NATURAL_BITS = {"x86_64": 64, "aarch64": 64, "i386": 32, "arm": 32}


def describe(arch: tuple[str, int]) -> str:
    """'aarch64', 'riscv64'; an ELF class that is not the machine's own is said ('x86_64 (32-bit ELF)')."""
    name, bits = arch
    if not bits:
        return name
    if name not in _NATURAL_BITS:
        return f"{name}{bits}"
    return name if _NATURAL_BITS[name] == bits else f"{name} ({bits}-bit ELF)"


def elf_arch(path: str) -> tuple[str, int]:
    """The (architecture, bits) an ELF file is built for, from its first 20 bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except FileNotFoundError:
        raise KilnError(f"module file {path} does not exist") from None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        raise FileFormatError(f"{path} is not an ELF shared object (it starts with {head[:8]!r}); "
                        "load a .so made by export_library or a .tar")
    bits = {1: 32, 2: 64}.get(head[4], 0)  # 0: an invalid class, refused by integrity.py
    order = "<" if head[5] == 1 else ">"
    (machine,) = struct.unpack(order + "H", head[18:20])
    return _E_MACHINE.get(machine, f"e_machine={machine}"), bits


def check_loadable(path: str) -> None:
    """Raise a KilnError saying what to do when ``path`` was built for another machine, or a
    FileFormatError when it is truncated or damaged (integrity.py) — before dlopen sees it."""
    built, here = elf_arch(path), host_arch()
    if built != here and built != (here[0], 0):  # an invalid class for this machine is damage: below
        name = path.rsplit("/", 1)[-1]
        raise KilnError(
            f"{name} was built for {describe(built)}; this machine is {describe(here)}. "
            f"Rebuild with target 'llvm -mtriple={describe(here)}-linux-gnu' or load it on a "
            "matching device (upload it through RPC)")
    from .integrity import check_intact
    check_intact(path)
