"""Link module objects into shared libraries: the host C compiler, cross compilers, ld.lld.

Each linker here has the ``fcompile`` signature ``f(output, objects, options=None)`` that
``Module.export_library(path, fcompile=f)`` calls.
"""

from __future__ import annotations

import shutil
import subprocess

from ..errors import KilnError

# Modules need only libc, libm and pthread (docs/abi.md); naming them records DT_NEEDED so a
# loader without Python (the C runtime) resolves them too.
_SYSTEM_LIBS = ["-lm", "-lpthread"]


def default_cc() -> str:
    from .. import config
    return config.get().cc or "cc"


def create_shared(output: str, objects, options=None, cc: str | None = None) -> None:
    """Link ``objects`` into the shared library ``output`` with ``cc -shared``.

    >>> cc.create_shared("lib.so", ["lib0.o", "lib1.o"])
    """
    objects = [objects] if isinstance(objects, str) else list(objects)
    compiler = cc or default_cc()
    cmd = [compiler, "-shared", "-fPIC", "-o", output, *objects, *(options or []), *_SYSTEM_LIBS]
    _run(cmd, f"install a C compiler (apt-get install -y gcc) or set KILN_CC; tried {compiler!r}")


create_shared.output_format = "so"


def cross_compiler(compile_func, options=None, output_format: str = "so",
                   get_target_triple=None, add_files=None):
    """An ``fcompile`` that links with another compiler or adds options.

    ``compile_func`` is a compiler path (``"aarch64-linux-gnu-gcc"``) or another fcompile.

    >>> lib.export_library("lib.so", fcompile=cc.cross_compiler("aarch64-linux-gnu-gcc"))
    """
    base_options = list(options or [])
    extra_files = list(add_files or [])

    if isinstance(compile_func, str):
        compiler = compile_func

        def link(output, objects, options=None, cc=None):
            create_shared(output, objects, options, cc=compiler)
        compile_func = link

    def fcompile(output, objects, options=None, **kwargs):
        objects = [objects] if isinstance(objects, str) else list(objects)
        compile_func(output, objects + extra_files, options=base_options + list(options or []),
                     **kwargs)

    fcompile.output_format = output_format
    fcompile.get_target_triple = get_target_triple
    return fcompile


def find_lld() -> str | None:
    """Path of an ``ld.lld`` (also versioned names like ``ld.lld-18``), or None."""
    for name in ["ld.lld", *(f"ld.lld-{v}" for v in range(22, 10, -1))]:
        path = shutil.which(name)
        if path:
            return path
    return None


def lld_link(output: str, objects, triple: str, options=None) -> None:
    """Link objects for any ``triple`` into a shared library with ``ld.lld``.

    No cross toolchain is needed: libc symbols stay undefined and resolve when the device
    loads the library.
    """
    from ..runtime.elf import describe, elf_arch, normalize_arch

    lld = find_lld()
    if lld is None:
        raise KilnError(f"linking for {triple} needs ld.lld, which is not installed: install "
                        "the Debian package 'lld' (apt-get install -y lld), or pass "
                        "fcompile=cc.cross_compiler('<triple>-gcc') to export_library")
    objects = [objects] if isinstance(objects, str) else list(objects)
    cmd = [lld, "-shared", "--allow-shlib-undefined", "-o", output, *objects, *(options or [])]
    _run(cmd, "install the Debian package 'lld'")
    built, wanted = elf_arch(output), normalize_arch(triple)
    if built != wanted:
        raise KilnError(f"lld_link: the objects are for {describe(built)} but the target triple "
                        f"is {triple}; build the module with target 'llvm -mtriple={triple}'")


lld_link.output_format = "so"


def _run(cmd: list[str], install_hint: str) -> None:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise KilnError(f"linker {cmd[0]!r} not found: {install_hint}") from None
    if result.returncode != 0:
        raise KilnError(f"linking failed (exit {result.returncode}): {' '.join(cmd)}\n"
                        f"{result.stderr.strip() or result.stdout.strip()}")
