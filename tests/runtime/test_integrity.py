"""load_module on truncated and damaged shared objects (kiln/runtime/integrity.py): every truncation
and every flipped bit of a library export_library wrote is refused with one FileFormatError before
dlopen (which died of SIGBUS/SIGSEGV on them); damage to the ELF header, program headers and
dynamic section of a library without a seal is refused from its structure. The loads run in a
child process, so a crash in dlopen fails the test instead of ending the run."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln.errors import FileFormatError
from kiln.runtime.integrity import SEAL_BYTES

_PROBE = r"""
import json, sys
import kiln as tvm
from kiln.errors import KilnError
out = []
for path in sys.argv[1:]:
    try:
        tvm.runtime.load_module(path)
        out.append("loaded")
    except KilnError as err:
        out.append(type(err).__name__ + ": " + str(err))
print(json.dumps(out))
"""


def load_all(paths):
    """Loads each file in one child process: its outcome per file (or the child's death)."""
    result = subprocess.run([sys.executable, "-c", _PROBE, *map(str, paths)], capture_output=True, text=True)
    assert result.returncode == 0, f"the loader died (exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def exported(c_module, tmp_path):
    path = tmp_path / "exported" / "lib.so"
    path.parent.mkdir()
    c_module.export_library(str(path))
    return path.read_bytes()


def _elf(blob):
    """(program headers, dynamic offset/size, section header offset/count) of a 64-bit little-endian ELF."""
    phoff, shoff = struct.unpack_from("<QQ", blob, 32)
    phentsize, phnum, _, shnum = struct.unpack_from("<HHHH", blob, 54)
    phdrs = [struct.unpack_from("<IIQQQQQQ", blob, phoff + i * phentsize) for i in range(phnum)]
    dyn = next((p[2], p[5]) for p in phdrs if p[0] == 2)
    return phoff, phdrs, dyn, shoff, shnum


def test_an_exported_library_is_sealed_and_loads(exported, tmp_path):
    assert exported[-SEAL_BYTES:].startswith(b"KILNSEAL")
    (tmp_path / "ok.so").write_bytes(exported)
    assert load_all([tmp_path / "ok.so"]) == ["loaded"]


def test_every_truncation_is_refused(exported, tmp_path):
    size = len(exported)
    cuts = sorted({0, 1, 4, 16, 20, 52, 63, 64, 200, size // 2, size - SEAL_BYTES - 1, size - SEAL_BYTES,
                   size - SEAL_BYTES + 1, size - 8, size - 1} | set(range(0, size, max(size // 40, 1))))
    paths = []
    for n in cuts:
        paths.append(tmp_path / f"cut{n}.so")
        paths[-1].write_bytes(exported[:n])
    for n, outcome in zip(cuts, load_all(paths)):
        assert outcome.startswith("FileFormatError: "), (n, outcome)
        assert f"cut{n}.so" in outcome and "\n" not in outcome
    seal_cut = load_all([tmp_path / f"cut{size - SEAL_BYTES}.so"])[0]
    assert "seal" in seal_cut and "missing" in seal_cut


def test_every_flipped_bit_is_refused(exported, tmp_path):
    rng = np.random.default_rng(7)
    positions = sorted(set(rng.integers(0, len(exported), 150).tolist()) | set(range(0, 64, 3)))
    paths = []
    for pos in positions:
        b = bytearray(exported)
        b[pos] ^= 1 << int(rng.integers(0, 8))
        paths.append(tmp_path / f"flip{pos}.so")
        paths[-1].write_bytes(bytes(b))
    for pos, outcome in zip(positions, load_all(paths)):
        assert outcome.startswith("FileFormatError: ") or outcome.startswith("KilnError: "), (pos, outcome)
        assert "\n" not in outcome, outcome


def test_structure_damage_without_a_seal_is_refused(c_module, tmp_path):
    """A library from another tool has no seal: the structure alone is checked."""
    from kiln.contrib import cc
    c_module.export_library(str(tmp_path / "other.so"), fcompile=cc.create_shared)  # no kilnseal build id
    plain = bytearray((tmp_path / "other.so").read_bytes()[:-SEAL_BYTES])
    (tmp_path / "plain.so").write_bytes(plain)
    phoff, phdrs, (dyn_off, dyn_size), shoff, shnum = _elf(plain)
    load = next(i for i, p in enumerate(phdrs) if p[0] == 1)

    def damaged(name, edit):
        b = bytearray(plain)
        edit(b)
        (tmp_path / name).write_bytes(bytes(b))
        return tmp_path / name

    # find DT_STRTAB in the dynamic section
    strtab = next(dyn_off + i * 16 for i in range(dyn_size // 16)
                  if struct.unpack_from("<q", plain, dyn_off + i * 16)[0] == 5)
    cases = {
        "phoff.so": (lambda b: struct.pack_into("<Q", b, 32, len(plain) - 8), "program header table"),
        "phnum.so": (lambda b: struct.pack_into("<H", b, 56, 0xFFFF), "program header table"),
        "segment.so": (lambda b: struct.pack_into("<Q", b, phoff + load * 56 + 8, len(plain)), "program header"),
        "memsz.so": (lambda b: struct.pack_into("<Q", b, phoff + load * 56 + 40, 0), "inconsistent"),
        "strtab.so": (lambda b: struct.pack_into("<Q", b, strtab + 8, 1 << 40), "DT_STRTAB"),
        "dynnull.so": (lambda b: b.__setitem__(slice(dyn_off, dyn_off + dyn_size),
                                               (struct.pack("<qQ", 0x6FFFFFF9, 0) * (dyn_size // 16))), "DT_NULL"),
        "shoff.so": (lambda b: struct.pack_into("<Q", b, 40, len(plain)), "section header table"),
        "type.so": (lambda b: struct.pack_into("<H", b, 16, 2), "ELF type is 2"),
        "class.so": (lambda b: b.__setitem__(4, 7), "identification bytes (class 7"),
        "tail.so": (lambda b: b.extend(b"\0" * 5), "5 bytes after its ELF content"),
    }
    paths = [damaged(name, edit) for name, (edit, _) in cases.items()]
    outcomes = load_all([tmp_path / "plain.so", *paths])
    assert outcomes[0] == "loaded"
    for (name, (_, needle)), outcome in zip(cases.items(), outcomes[1:]):
        assert outcome.startswith("FileFormatError: ") and name in outcome and needle in outcome, (name, outcome)


def test_a_32_bit_elf_for_x86_64_is_not_called_this_machine(exported, tmp_path):
    if tvm.runtime.elf.host_arch() != ("x86_64", 64):
        pytest.skip("the message compares with an x86_64 host")
    b = bytearray(exported)
    b[4] = 1  # ELFCLASS32, machine still x86_64 (the x32 ABI, or damage)
    (tmp_path / "x32.so").write_bytes(bytes(b))
    with pytest.raises(tvm.TVMError) as info:
        tvm.runtime.load_module(str(tmp_path / "x32.so"))
    assert "built for x86_64 (32-bit ELF); this machine is x86_64" in str(info.value)


def test_a_changed_library_is_refused_in_process(exported, tmp_path):
    b = bytearray(exported)
    b[len(b) // 2] ^= 0x40
    (tmp_path / "changed.so").write_bytes(bytes(b))
    with pytest.raises(FileFormatError, match=r"changed.so is damaged: its content does not match its kiln seal"):
        tvm.runtime.load_module(str(tmp_path / "changed.so"))


def test_tvmc_run_on_a_package_with_a_damaged_library(tmp_path):
    import tarfile
    import io
    from kiln import relay
    from kiln.driver.tvmc.compiler import export_package
    x = relay.var("x", shape=(4,), dtype="float32")
    lib = relay.build(tvm.IRModule.from_expr(relay.Function([x], relay.add(x, relay.const(1.0)))), target="llvm")
    export_package(lib, str(tmp_path / "good.tar"))
    with tarfile.open(tmp_path / "good.tar") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    files["mod.so"] = files["mod.so"][:len(files["mod.so"]) // 2]
    with tarfile.open(tmp_path / "bad.tar", "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    result = subprocess.run([sys.executable, "-m", "kiln.driver.tvmc", "run", str(tmp_path / "bad.tar")],
                            capture_output=True, text=True)
    assert result.returncode > 0, result  # an error exit, not a signal
    assert "mod.so is damaged" in result.stderr, result.stderr
