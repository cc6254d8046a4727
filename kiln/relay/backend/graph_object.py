"""An ELF object holding the graph JSON and parameters, linked into the exported library.

``lib.export_library("deploy.so")`` must give a file that ``load_module`` can run on its own,
so the graph and the weights travel inside it as three read-only data symbols:

    __kiln_graph_name    NUL-terminated module name ("default": the factory function's name)
    __kiln_graph_json    NUL-terminated graph JSON (docs/graph.md)
    __kiln_graph_params  u64 little-endian byte count, then the parameter blob (runtime/params.py)

LLVM could emit them, but a 45 MB array literal costs seconds of IR parsing and llvmlite has
no assembler for ``.incbin``; a relocatable object with one data section is simple to write
directly. Class, byte order, machine and ABI flags are copied from a kernel object of the same
module, so the linker sees matching objects for any triple (x86_64, aarch64, armv7 hard-float).
"""

from __future__ import annotations

import struct

from kiln.errors import CompileError

_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB = 1, 2, 3
_SHF_ALLOC = 2
_STB_GLOBAL, _STT_OBJECT = 1, 1
_SECTION = ".rodata.kiln_graph"


def graph_symbols(name: str, graph_json: str, params_blob: bytes) -> list:
    """The (symbol, data, alignment) triples of the graph object."""
    return [("__kiln_graph_name", name.encode() + b"\0", 1),
            ("__kiln_graph_json", graph_json.encode() + b"\0", 8),
            ("__kiln_graph_params", struct.pack("<Q", len(params_blob)) + params_blob, 64)]


def data_object(template: bytes, symbols: list) -> bytes:
    """A relocatable ELF object like ``template`` (class, byte order, machine, flags) that
    defines each (name, data, align) of ``symbols`` as a global read-only object."""
    if template[:4] != b"\x7fELF":
        raise CompileError("graph object: the kernel object is not ELF; cannot embed the graph next to it")
    is64 = template[4] == 2
    end = "<" if template[5] == 1 else ">"
    machine = struct.unpack_from(end + "H", template, 18)[0]
    flags = struct.unpack_from(end + "I", template, 48 if is64 else 36)[0]

    # .rodata contents, each symbol at its alignment
    data = bytearray()
    placed = []
    for sym, blob, align in symbols:
        data += b"\0" * (-len(data) % align)
        placed.append((sym, len(data), len(blob)))
        data += blob

    strtab = bytearray(b"\0")
    syms = [_sym(is64, end, 0, 0, 0, 0, 0)]
    for sym, offset, size in placed:
        syms.append(_sym(is64, end, len(strtab), (_STB_GLOBAL << 4) | _STT_OBJECT, 1, offset, size))
        strtab += sym.encode() + b"\0"
    symtab = b"".join(syms)

    names = [b"", _SECTION.encode(), b".symtab", b".strtab", b".shstrtab", b".note.GNU-stack"]
    shstrtab = bytearray()
    name_off = []
    for n in names:
        name_off.append(len(shstrtab))
        shstrtab += n + b"\0"

    ehsize, shentsize = (64, 64) if is64 else (52, 40)
    out = bytearray(ehsize)
    layout = {}
    for key, blob, align in ((1, data, 64), (2, symtab, 8), (3, strtab, 1), (4, shstrtab, 1)):
        out += b"\0" * (-len(out) % align)
        layout[key] = (len(out), len(blob), align)
        out += blob
    out += b"\0" * (-len(out) % 8)
    shoff = len(out)
    sym_size = 24 if is64 else 16
    headers = [(0, 0, 0, 0, 0, 0, 0, 0, 0),
               (name_off[1], _SHT_PROGBITS, _SHF_ALLOC, *layout[1][:2], 0, 0, 64, 0),
               (name_off[2], _SHT_SYMTAB, 0, *layout[2][:2], 3, 1, 8, sym_size),  # link: .strtab; info: first global
               (name_off[3], _SHT_STRTAB, 0, *layout[3][:2], 0, 0, 1, 0),
               (name_off[4], _SHT_STRTAB, 0, *layout[4][:2], 0, 0, 1, 0),
               (name_off[5], _SHT_PROGBITS, 0, len(out), 0, 0, 0, 1, 0)]  # no executable stack
    for h in headers:
        out += _shdr(is64, end, *h)
    header = bytes(template[:16]) + (
        struct.pack(end + "HHIQQQIHHHHHH", 1, machine, 1, 0, 0, shoff, flags, ehsize, 0, 0, shentsize,
                    len(headers), 4) if is64 else
        struct.pack(end + "HHIIIIIHHHHHH", 1, machine, 1, 0, 0, shoff, flags, ehsize, 0, 0, shentsize,
                    len(headers), 4))
    out[:ehsize] = header
    return bytes(out)


def _sym(is64, end, name, info, shndx, value, size) -> bytes:
    if is64:
        return struct.pack(end + "IBBHQQ", name, info, 0, shndx, value, size)
    return struct.pack(end + "IIIBBH", name, value, size, info, 0, shndx)


def _shdr(is64, end, name, kind, flags, offset, size, link, info, align, entsize) -> bytes:
    fmt = "IIQQQQIIQQ" if is64 else "IIIIIIIIII"
    return struct.pack(end + fmt, name, kind, flags, 0, offset, size, link, info, align, entsize)
