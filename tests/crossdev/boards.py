"""qemu "boards": kiln_rpc cross-built for aarch64 / armv7, run under qemu-user on 127.0.0.1.

A board is a real kiln_rpc process (the C server) emulated by ``qemu-<arch> -L <sysroot>``,
registered with a Python tracker under its key. Its "device compiler" for .tar modules is the
host's cross gcc, passed with ``--cc``: qemu-user runs host binaries a guest execs natively.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "rpc"))
import rpc_services as svc  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUNTIME_SRC = os.path.join(ROOT, "src", "runtime")


@dataclasses.dataclass(frozen=True)
class Arch:
    name: str        # what kiln_rpc calls the device ("built for ..., this device is <name>")
    cross: str       # gcc prefix
    qemu: str
    target: str      # the kiln target that builds modules for it

    @property
    def sysroot(self) -> str:
        return f"/usr/{self.cross.rstrip('-')}"

    @property
    def key(self) -> str:
        return f"qemu-{self.name}"

    def missing(self) -> str | None:
        """What is not installed for this board, or None."""
        need = [self.qemu, f"{self.cross}gcc", "ld.lld", "make"]
        absent = [t for t in need if shutil.which(t) is None]
        if not os.path.isdir(self.sysroot):
            absent.append(self.sysroot)
        if absent:
            return (f"needs {', '.join(absent)}: apt-get install -y qemu-user lld make "
                    f"gcc-{self.cross.rstrip('-').replace('_', '-')}")
        return None


ARCHES = {
    "aarch64": Arch("aarch64", "aarch64-linux-gnu-", "qemu-aarch64", "llvm -mtriple=aarch64-linux-gnu"),
    "armv7": Arch("armv7", "arm-linux-gnueabihf-", "qemu-arm",
                  "llvm -mtriple=armv7l-linux-gnueabihf -mattr=+neon"),
}


def build_runtime(out_dir: str, cross: str = "", extra: tuple[str, ...] = ()) -> str:
    """``make -C src/runtime CROSS=...`` into out_dir; returns out_dir."""
    result = subprocess.run(["make", "-s", "-j2", "-C", RUNTIME_SRC, f"CROSS={cross}", f"OUT={out_dir}", *extra],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return out_dir


class Board(svc.Service):
    """kiln_rpc under qemu (or natively with ``arch=None``), logging to a file."""

    def __init__(self, binary: str, arch: Arch | None, *args: str, env: dict | None = None):
        self.arch = arch
        prefix = [arch.qemu, "-L", arch.sysroot] if arch else []
        self.log_path = f"/tmp/kiln-test-board-{os.getpid()}-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen([*prefix, binary, *args], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **(env or {})))
        m = self.wait_log(r"bind to [\d.]+:(\d+)|serving through the proxy", timeout=30)
        self.port = int(m.group(1)) if m.group(1) else None


def start_board(binary: str, arch: Arch | None, tracker_port: int | None = None, key: str = "",
                extra: tuple[str, ...] = ()) -> Board:
    args = ["--host", svc.HOST, "--port", str(svc.free_port())]
    if tracker_port:
        args += ["--tracker", f"{svc.HOST}:{tracker_port}", "--key", key]
    if arch:
        args += ["--cc", f"{arch.cross}gcc"]
    board = Board(binary, arch, *args, *extra)
    if tracker_port:
        board.wait_log(r"registered with the tracker", timeout=30)
    return board


def module_files(directory: str, name: str, module) -> dict[str, str]:
    """The module exported both ways: {"so": path, "tar": path}."""
    paths = {}
    for fmt in ("so", "tar"):
        paths[fmt] = os.path.join(directory, f"{name}.{fmt}")
        module.export_library(paths[fmt])
    return paths


def log_has(board: svc.Service, pattern: str) -> bool:
    return re.search(pattern, board.text()) is not None
