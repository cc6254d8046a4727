"""The session directory: uploads, downloads and removals stay inside it.

A client names files relative to its session directory. Names with ``..``, absolute paths,
and paths that resolve (through symlinks) outside the directory are rejected, so a client
cannot read or overwrite the server's other files through the file API.
"""

from __future__ import annotations

import os

from ..errors import RPCError


class PathError(RPCError, ValueError):
    """A file name that would escape the session directory."""


def resolve(workdir: str, name: str, must_exist: bool = False) -> str:
    """The absolute path of ``name`` inside ``workdir``, or PathError."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise PathError(f"bad file name {name!r}: use a non-empty relative name like 'lib.tar'")
    if os.path.isabs(name) or name.startswith("~"):
        raise PathError(f"file name {name!r} is absolute; name files relative to the session "
                        "directory, e.g. os.path.basename(path)")
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise PathError(f"file name {name!r} contains '..'; files stay inside the session directory")
    root = os.path.realpath(workdir)
    path = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, path]) != root:
        raise PathError(f"file name {name!r} resolves outside the session directory (a symlink?)")
    if must_exist and not os.path.exists(path):
        raise FileNotFoundError(f"{name!r} is not in the session directory; upload it first "
                                f"(files there: {listdir(workdir)})")
    return path


def write_chunk(workdir: str, name: str, offset: int, data) -> None:
    path = resolve(workdir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Offset 0 starts the file over; later chunks must follow on exactly.
    if offset == 0:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    else:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
        if os.fstat(fd).st_size != offset:
            os.close(fd)
            raise RPCError(f"upload of {name!r}: chunk at offset {offset} does not follow the "
                           "bytes received so far; restart the upload")
        os.lseek(fd, offset, os.SEEK_SET)
    try:
        view = memoryview(data)
        while view.nbytes:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def read_chunk(workdir: str, name: str, offset: int, nbytes: int) -> bytes:
    path = resolve(workdir, name, must_exist=True)
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(nbytes)


def remove(workdir: str, name: str) -> None:
    path = resolve(workdir, name, must_exist=True)
    if os.path.isdir(path):
        import shutil
        shutil.rmtree(path)
    else:
        os.remove(path)


def listdir(workdir: str) -> list[str]:
    out = []
    for root, dirs, names in os.walk(workdir):
        rel = os.path.relpath(root, workdir)
        out.extend(n if rel == "." else f"{rel}/{n}" for n in names)
    return sorted(out)
