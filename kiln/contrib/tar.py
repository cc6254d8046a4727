"""Pack and unpack module archives. ``untar`` refuses anything that could escape its directory."""

from __future__ import annotations

import os
import tarfile

from ..errors import KilnError


def tar(output: str, files: list[str]) -> None:
    """Write ``files`` into the tar ``output``, each under its base name (flat archive)."""
    if isinstance(files, str):
        files = [files]
    names = [os.path.basename(f) for f in files]
    if len(set(names)) != len(names):
        raise ValueError(f"tar: two inputs share a file name: {names}; rename one of them")
    with tarfile.open(output, "w") as archive:
        for path, name in zip(files, names):
            archive.add(path, arcname=name, recursive=False)


def untar(path: str, directory: str) -> list[str]:
    """Extract the regular files and directories of ``path`` into ``directory``.

    Members with absolute paths, ``..`` components, links or device nodes are rejected:
    module archives come from other machines (RPC uploads) and must not write elsewhere.
    Returns the extracted member names.
    """
    _check_headers(path)
    try:
        archive = tarfile.open(path, "r:")  # uncompressed only: no decompression bomb, no guessing
        members = archive.getmembers()
    except (tarfile.TarError, OSError) as err:
        raise KilnError(f"cannot read tar archive {path}: {err}") from None
    size = os.path.getsize(path)
    with archive:
        for m in members:
            parts = m.name.replace("\\", "/").split("/")
            if m.name.startswith("/") or ".." in parts or os.path.isabs(m.name):
                raise KilnError(f"{path}: member {m.name!r} points outside the archive "
                                "directory; refusing to extract it")
            if not (m.isfile() or m.isdir()):
                raise KilnError(f"{path}: member {m.name!r} is a link or special file; module "
                                "archives may hold only regular files")
            if m.issparse():  # a few KB of sparse map can declare GBs of zeros to write out
                raise KilnError(f"{path}: member {m.name!r} is a sparse file (declares {m.size} bytes); module "
                                "archives hold only plain files: export the module again")
            if m.isfile() and m.offset_data + m.size > size:  # a pax size= record can say anything
                raise KilnError(f"{path}: member {m.name!r} declares {m.size} bytes but the archive ends "
                                f"{size - m.offset_data} bytes after its start; the archive is truncated or damaged")
        os.makedirs(directory, exist_ok=True)
        try:
            for m in members:
                archive.extract(m, directory, set_attrs=False, **_filter_arg())
        except tarfile.TarError as err:  # the data ends early or a header is damaged past the index
            raise KilnError(f"cannot read tar archive {path}: {err}; the archive is damaged") from None
    return [m.name for m in members]


_META_TYPES = b"LKxgX"  # GNU long names/links, pax headers: tarfile reads these whole, into memory
_META_MAX = 1 << 20


def _check_headers(path: str) -> None:
    """Walk the 512-byte headers before tarfile does: every member's data must fit in the file, and
    a metadata member (long name, pax header), which tarfile reads whole into memory, stays small.
    A 3 KB archive could otherwise declare a long name of any size."""
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except OSError as err:
        raise KilnError(f"cannot read tar archive {path}: {err.strerror or err}") from None
    with f:
        offset = 0
        while offset + 512 <= size:
            f.seek(offset)
            block = f.read(512)
            if block == bytes(512):
                return
            declared = _octal(block[124:136])
            if declared is None:
                return  # not a header tarfile would accept either: it reports it
            if declared > size - offset - 512 or (block[156:157] and block[156:157] in _META_TYPES
                                                  and declared > _META_MAX):
                raise KilnError(f"{path}: the member at byte {offset} declares {declared} bytes but the archive "
                                f"has {max(size - offset - 512, 0)} left; the archive is truncated or damaged")
            offset += 512 + (declared + 511) // 512 * 512


def _octal(field: bytes) -> int | None:
    if field[:1] and field[0] & 0x80:  # base-256 (GNU) for sizes of 8 GiB and more
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        return None


def _filter_arg() -> dict:
    # Python >= 3.11.4 has extraction filters; members were already vetted above.
    return {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
