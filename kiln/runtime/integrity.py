"""Whether a shared object file is whole before ``dlopen`` maps it: ELF structure and kiln's seal.

``dlopen`` trusts the file: a truncated library or a flipped bit in its program headers or
dynamic section kills the process (SIGBUS, SIGSEGV) inside the loader. No check makes loading
arbitrary bytes safe (a ``.so`` is code: docs/security.md), so the bar is:

- **Structure.** The ELF header, every program header's file range, the dynamic section (each
  address it holds must fall in a loaded segment; string offsets inside its string table) and
  the section header table are checked against the file's size: any truncation and most damage
  to what the loader reads is refused with one line naming the file and the field.
- **Seal.** ``export_library`` appends 48 bytes after the ELF content: ``KILNSEAL``, a version,
  and HMAC-SHA256 (a fixed, public key: a domain-separated hash, not a secret) of everything
  before it. A loader recomputes it, so any changed byte is refused. The linker also writes a
  build id starting with ``kilnseal`` (``seal_build_id``): a file carrying it must end in its
  seal, so cutting the seal off is refused too. Libraries from other tools have neither and are
  checked for structure only. ``src/runtime/elf.c`` implements the same rules for the C runtime.
"""

from __future__ import annotations

import hmac
import os
import struct

from ..errors import FileFormatError

SEAL_MAGIC = b"KILNSEAL"
SEAL_VERSION = 1
SEAL_BYTES = 48
SEAL_KEY = b"kiln export_library seal v1"
BUILD_ID_PREFIX = b"kilnseal"

_PT_LOAD, _PT_DYNAMIC, _PT_NOTE = 1, 2, 4
_SHT_NOBITS = 8
_NT_GNU_BUILD_ID = 3
# Dynamic tags holding an address the loader reads from: it must lie in a loaded segment.
_DT_ADDRESS = {3: "DT_PLTGOT", 4: "DT_HASH", 5: "DT_STRTAB", 6: "DT_SYMTAB", 7: "DT_RELA", 12: "DT_INIT",
               13: "DT_FINI", 17: "DT_REL", 23: "DT_JMPREL", 25: "DT_INIT_ARRAY", 26: "DT_FINI_ARRAY",
               0x6FFFFEF5: "DT_GNU_HASH", 0x6FFFFFF0: "DT_VERSYM", 0x6FFFFFFC: "DT_VERDEF",
               0x6FFFFFFE: "DT_VERNEED"}
# (address tag, size tag): tables the loader reads whole; they must lie in a segment's file bytes.
_DT_TABLES = [(5, 10, "DT_STRTAB"), (7, 8, "DT_RELA"), (17, 18, "DT_REL"), (23, 2, "DT_JMPREL"),
              (25, 27, "DT_INIT_ARRAY"), (26, 28, "DT_FINI_ARRAY")]
_DT_STRINGS = {1: "DT_NEEDED", 14: "DT_SONAME", 15: "DT_RPATH", 29: "DT_RUNPATH"}
_DT_STRSZ = 10
_MAX_DYNAMIC = 1 << 16  # entries; real libraries have a few dozen


def seal_build_id() -> str:
    """The ``--build-id=`` value export_library links with: it marks the file as sealed."""
    return "0x" + (BUILD_ID_PREFIX + os.urandom(8)).hex()


def seal(path: str) -> None:
    """Append the seal to the freshly linked library ``path``."""
    digest = _digest(path, os.path.getsize(path))
    with open(path, "ab") as f:
        f.write(SEAL_MAGIC + struct.pack("<II", SEAL_VERSION, 0) + digest)


def check_intact(path: str) -> None:
    """Raise FileFormatError (one line: the file, the field, what to do) unless ``path`` is whole."""
    name = os.path.basename(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        elf = _Elf(f, size, name)
        end = elf.check()
        marked = elf.has_seal_build_id()
        tail = size - end
        if tail == 0:
            if marked:
                raise _damaged(name, "its kiln seal (the last 48 bytes export_library wrote) is missing: the file "
                               "was cut short")
            return
        f.seek(end)
        trailer = f.read(SEAL_BYTES)
    if tail != SEAL_BYTES or trailer[:8] != SEAL_MAGIC:
        raise _damaged(name, f"it has {tail} bytes after its ELF content that are not a kiln seal (the file was "
                       "cut short or changed)")
    version, _ = struct.unpack_from("<II", trailer, 8)
    if version != SEAL_VERSION:
        raise _damaged(name, f"its kiln seal has version {version}; this runtime knows version {SEAL_VERSION}")
    if not hmac.compare_digest(_digest(path, end), trailer[16:]):
        raise _damaged(name, "its content does not match its kiln seal (bytes changed after export_library "
                       "wrote it)")


def _digest(path: str, n: int) -> bytes:
    h = hmac.new(SEAL_KEY, digestmod="sha256")
    with open(path, "rb") as f:
        while n > 0:
            chunk = f.read(min(n, 1 << 20))
            if not chunk:
                break
            h.update(chunk)
            n -= len(chunk)
    return h.digest()


def _damaged(name: str, problem: str) -> FileFormatError:
    return FileFormatError(f"{name} is damaged: {problem}; export it again with export_library, or copy it "
                           "again from where it was built")


class _Elf:
    """The parts of an ELF file the loader reads, each checked against the file's size."""

    def __init__(self, f, size: int, name: str):
        self.f, self.size, self.name = f, size, name
        head = self._read(0, 64 if size >= 64 else size)
        if head[:4] == b"\x7fELF" and len(head) < 52:
            raise _damaged(name, f"it has {size} bytes, fewer than an ELF header (the file was cut short)")
        if len(head) < 52 or head[:4] != b"\x7fELF":
            raise FileFormatError(f"{name} is not an ELF shared object (it starts with {head[:8]!r}); load a .so "
                                  "made by export_library or a .tar")
        if head[4] not in (1, 2) or head[5] not in (1, 2) or head[6] != 1:
            raise _damaged(name, f"its ELF identification bytes (class {head[4]}, data {head[5]}, version "
                           f"{head[6]}) are invalid")
        self.is64, self.end = head[4] == 2, "<" if head[5] == 1 else ">"
        if self.is64 and size < 64:
            raise _damaged(name, f"it has {size} bytes, fewer than a 64-bit ELF header")
        fmt = "HHIQQQIHHHHHH" if self.is64 else "HHIIIIIHHHHHH"
        (self.type, _, self.version, _, self.phoff, self.shoff, _, self.ehsize, self.phentsize, self.phnum,
         self.shentsize, self.shnum, self.shstrndx) = struct.unpack_from(self.end + fmt, head, 16)

    def _read(self, offset: int, n: int) -> bytes:
        self.f.seek(offset)
        return self.f.read(n)

    def _within(self, offset: int, n: int, what: str) -> int:
        if offset > self.size or n > self.size - offset:
            raise _damaged(self.name, f"{what} covers bytes {offset}..{offset + n} but the file has {self.size} "
                           "(truncated, or a damaged offset)")
        return offset + n

    def check(self) -> int:
        """Checks everything the loader reads; returns where the ELF content ends."""
        if self.type != 3:
            raise _damaged(self.name, f"its ELF type is {self.type}, not a shared object (3)")
        if self.version != 1 or self.ehsize != (64 if self.is64 else 52):
            raise _damaged(self.name, f"its ELF header has version {self.version} and size {self.ehsize}")
        end = self.ehsize
        if self.phentsize != (56 if self.is64 else 32) or self.phnum == 0:
            raise _damaged(self.name, f"its program header table has {self.phnum} entries of {self.phentsize} bytes")
        end = max(end, self._within(self.phoff, self.phnum * self.phentsize, "the program header table"))
        table = self._read(self.phoff, self.phnum * self.phentsize)
        fmt = "IIQQQQQQ" if self.is64 else "IIIIIIII"
        self.segments, dynamic = [], None
        for i in range(self.phnum):
            raw = struct.unpack_from(self.end + fmt, table, i * self.phentsize)
            if self.is64:
                ptype, _, offset, vaddr, _, filesz, memsz, align = raw
            else:
                ptype, offset, vaddr, _, filesz, memsz, _, align = raw
            what = f"program header {i} (type {ptype})"
            if filesz:
                end = max(end, self._within(offset, filesz, what))
            if ptype == _PT_LOAD:
                if filesz > memsz or (align > 1 and (align & (align - 1) or (vaddr - offset) % align)):
                    raise _damaged(self.name, f"{what}: file size {filesz}, memory size {memsz}, alignment {align} "
                                   "are inconsistent")
                self.segments.append((vaddr, memsz, filesz, offset))
            elif ptype == _PT_DYNAMIC:
                dynamic = (offset, filesz)
        if not self.segments:
            raise _damaged(self.name, "it has no loadable segment")
        if dynamic is None:
            raise _damaged(self.name, "it has no dynamic section (PT_DYNAMIC)")
        self._check_dynamic(*dynamic)
        if self.shnum or self.shoff:
            if self.shentsize != (64 if self.is64 else 40) or self.shstrndx >= max(self.shnum, 1):
                raise _damaged(self.name, f"its section header table has {self.shnum} entries of {self.shentsize} "
                               f"bytes and names in entry {self.shstrndx}")
            end = max(end, self._within(self.shoff, self.shnum * self.shentsize, "the section header table"))
            sections = self._read(self.shoff, self.shnum * self.shentsize)
            fmt = "IIQQQQIIQQ" if self.is64 else "IIIIIIIIII"
            for i in range(self.shnum):
                _, stype, _, _, offset, size, *_ = struct.unpack_from(self.end + fmt, sections, i * self.shentsize)
                if stype != _SHT_NOBITS and size:
                    end = max(end, self._within(offset, size, f"section {i}"))
        return end

    def _segment(self, address: int, n: int = 1, file_backed: bool = False):
        for vaddr, memsz, filesz, offset in self.segments:
            limit = filesz if file_backed else memsz
            if vaddr <= address and address - vaddr + n <= limit:
                return offset + (address - vaddr)
        return None

    def _check_dynamic(self, offset: int, filesz: int) -> None:
        entsize = 16 if self.is64 else 8
        if filesz < entsize or self._segment_of_file(offset, filesz) is None:
            raise _damaged(self.name, f"its dynamic section (bytes {offset}..{offset + filesz}) is not inside a "
                           "loaded segment")
        data = self._read(offset, min(filesz, _MAX_DYNAMIC * entsize))
        fmt = self.end + ("qQ" if self.is64 else "iI")
        tags: dict = {}
        for i in range(len(data) // entsize):
            tag, value = struct.unpack_from(fmt, data, i * entsize)
            if tag == 0:
                break
            tags.setdefault(tag, []).append(value)
        else:
            raise _damaged(self.name, "its dynamic section has no terminating DT_NULL entry")
        for tag, label in _DT_ADDRESS.items():
            for value in tags.get(tag, []):
                if self._segment(value) is None:
                    raise _damaged(self.name, f"its dynamic entry {label} points to 0x{value:x}, outside every "
                                   "loaded segment")
        for tag, size_tag, label in _DT_TABLES:
            if tag in tags and self._segment(tags[tag][0], tags.get(size_tag, [0])[0], file_backed=True) is None:
                raise _damaged(self.name, f"its dynamic entry {label} (0x{tags[tag][0]:x}, "
                               f"{tags.get(size_tag, [0])[0]} bytes) is not inside a loaded segment's file bytes")
        strsz = tags.get(_DT_STRSZ, [0])[0]
        for tag, label in _DT_STRINGS.items():
            for value in tags.get(tag, []):
                if value >= strsz:
                    raise _damaged(self.name, f"its dynamic entry {label} names string {value}, past the end of its "
                                   f"string table ({strsz} bytes)")

    def _segment_of_file(self, offset: int, n: int):
        for _, _, filesz, seg_offset in self.segments:
            if seg_offset <= offset and offset - seg_offset + n <= filesz:
                return seg_offset
        return None

    def has_seal_build_id(self) -> bool:
        """Whether a PT_NOTE holds a GNU build id starting with BUILD_ID_PREFIX."""
        fmt = "IIQQQQQQ" if self.is64 else "IIIIIIII"
        table = self._read(self.phoff, self.phnum * self.phentsize)
        for i in range(self.phnum):
            raw = struct.unpack_from(self.end + fmt, table, i * self.phentsize)
            ptype, offset, filesz = (raw[0], raw[2], raw[5]) if self.is64 else (raw[0], raw[1], raw[4])
            if ptype != _PT_NOTE:
                continue
            notes, at = self._read(offset, min(filesz, 4096)), 0
            while at + 12 <= len(notes):
                namesz, descsz, ntype = struct.unpack_from(self.end + "III", notes, at)
                name_at = at + 12
                desc_at = name_at + (namesz + 3) // 4 * 4
                if ntype == _NT_GNU_BUILD_ID and notes[name_at:name_at + namesz] == b"GNU\0":
                    return notes[desc_at:desc_at + descsz].startswith(BUILD_ID_PREFIX)
                at = desc_at + (descsz + 3) // 4 * 4
        return False
