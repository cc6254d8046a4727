"""The build cache: compiled artifacts on disk, so rebuilding an unchanged model is quick.

An entry is one file ``<KILN_CACHE_DIR>/build-v1/<key>.kc`` named by the SHA-256 of everything
that decides its contents (``key(...)``: the caller's description of the input, plus
``fingerprint()``: the kiln sources, the LLVM and Python versions). Writers put the whole
entry in a temporary file beside it and ``os.replace`` it into place, so concurrent builds of
the same thing each write a complete entry and readers see an old one, a new one or none.
Every entry carries a checksum; a truncated or damaged one reads as a miss and is removed.
After each write the least recently used entries (by mtime; a hit touches its entry) are
deleted until the total is within ``KILN_CACHE_SIZE``.

The cache never makes a build fail: an unwritable directory or a bad entry costs a rebuild
and one warning. ``KILN_CACHE_DIR=off`` (or empty) turns it off; ``kiln cache info|clear``.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import logging
import os
import struct
import sys
import tempfile
import time

from . import config

logger = logging.getLogger("kiln.cache")

SUBDIR = "build-v1"  # bump when the entry format changes: old entries are then ignored
SUFFIX = ".kc"
_MAGIC = b"KILNC01\n"
_HEADER = struct.Struct(">Q")
_OFF = ("", "off", "0", "none", "false", "no")
_STALE_TMP_S = 3600  # a temporary file this old belongs to a writer that died


class Uncacheable(Exception):
    """The input holds something without a stable description (an object known only by id)."""


def directory() -> str | None:
    """The folder entries live in, or None when the cache is off."""
    root = config.get().cache_dir
    if root.strip().lower() in _OFF:
        return None
    return os.path.join(os.path.abspath(os.path.expanduser(root)), SUBDIR)


# -- keys ----------------------------------------------------------------------------------------
def key(*parts) -> str:
    """SHA-256 (hex) of ``parts`` and ``fingerprint()``; raises Uncacheable for unstable parts."""
    h = hashlib.sha256(fingerprint().encode())
    _encode(parts, h.update)
    return h.hexdigest()


def _encode(obj, out) -> None:
    """Feed a canonical byte form of obj to out: equal values give equal bytes in any process."""
    import numpy as np

    if obj is None or isinstance(obj, bool):
        out(b"N" if obj is None else b"T" if obj else b"F")
    elif isinstance(obj, enum.Enum):
        out(f"e{type(obj).__qualname__}.{obj.name};".encode())
    elif type(obj) is int or isinstance(obj, np.integer):
        out(b"i%d;" % int(obj))
    elif type(obj) is float or isinstance(obj, np.floating):
        out(f"f{float(obj)!r};".encode())
    elif type(obj) is str:
        data = obj.encode()
        out(b"s%d:" % len(data) + data)
    elif isinstance(obj, (bytes, bytearray)):
        out(b"b%d:" % len(obj) + bytes(obj))
    elif isinstance(obj, (tuple, list)):
        out(b"(")
        for x in obj:
            _encode(x, out)
        out(b")")
    elif isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            h = hashlib.sha256()
            _encode(k, h.update)
            items.append((h.digest(), v))
        out(b"{")
        for k, v in sorted(items, key=lambda kv: kv[0]):
            out(k)
            _encode(v, out)
        out(b"}")
    elif isinstance(obj, np.ndarray):
        out(f"a{obj.dtype.str}{obj.shape};".encode())
        out(np.ascontiguousarray(obj).tobytes())
    elif type(obj).__name__ == "DType" and type(obj).__module__.startswith("kiln."):
        out(f"d{obj};".encode())
    else:  # an int subclass marking an identity, an IR node, a function...: no stable form
        raise Uncacheable(f"{type(obj).__name__} has no stable cache key")


@functools.cache
def fingerprint() -> str:
    """What else decides compiled code: kiln's own sources, LLVM's and Python's versions."""
    import llvmlite
    import llvmlite.binding as llvm

    h = hashlib.sha256()
    root = os.path.dirname(os.path.abspath(__file__))
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files.extend(os.path.join(folder, n) for n in names if n.endswith(".py"))
    for path in sorted(files):
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    h.update(f"llvmlite {llvmlite.__version__} llvm {llvm.llvm_version_info} "
             f"python {sys.version_info[:2]}".encode())
    return h.hexdigest()


# -- entries -------------------------------------------------------------------------------------
def load(entry_key: str) -> dict[str, bytes] | None:
    """The files stored under entry_key, or None (missing, unreadable or damaged)."""
    folder = directory()
    if folder is None:
        return None
    path = os.path.join(folder, entry_key + SUFFIX)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    files = _unpack(data, entry_key)
    if files is None:
        logger.warning("kiln cache: damaged entry %s removed; rebuilding", path)
        _remove(path)
        return None
    try:
        os.utime(path)  # most recently used: evicted last
    except OSError:
        pass
    return files


def store(entry_key: str, files: dict[str, bytes]) -> bool:
    """Write the entry (atomically), then evict down to the size limit. False if not written."""
    folder = directory()
    if folder is None:
        return False
    data = _pack(files, entry_key)
    limit = config.get().cache_size
    if len(data) > limit:
        return False
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(folder, entry_key + SUFFIX))
        tmp = None
        evict(limit, keep=entry_key + SUFFIX)
        return True
    except OSError as err:
        _warn_once(folder, err)
        return False
    finally:
        if tmp is not None:
            _remove(tmp)


def _pack(files: dict[str, bytes], entry_key: str) -> bytes:
    payload = b"".join(files.values())
    header = json.dumps({"key": entry_key, "files": [[n, len(b)] for n, b in files.items()],
                         "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    return _MAGIC + _HEADER.pack(len(header)) + header + payload


def _unpack(data: bytes, entry_key: str) -> dict[str, bytes] | None:
    try:
        if not data.startswith(_MAGIC):
            return None
        start = len(_MAGIC) + _HEADER.size
        (n,) = _HEADER.unpack_from(data, len(_MAGIC))
        header = json.loads(data[start:start + n])
        payload = data[start + n:]
        if header["key"] != entry_key or hashlib.sha256(payload).hexdigest() != header["sha256"]:
            return None
        files, pos = {}, 0
        for name, size in header["files"]:
            files[name] = payload[pos:pos + size]
            pos += size
        return files if pos == len(payload) else None
    except (ValueError, KeyError, TypeError, struct.error):
        return None


# -- size bound, info, clear ---------------------------------------------------------------------
def _entries(folder: str) -> list[tuple[float, int, str]]:
    """(mtime, size, path) of every entry, and stale temporary files removed on the way."""
    out = []
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    now = time.time()
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.stat(path)
        except OSError:
            continue  # removed by another process meanwhile
        if name.startswith(".tmp-"):
            if now - st.st_mtime > _STALE_TMP_S:
                _remove(path)
            continue
        out.append((st.st_mtime, st.st_size, path))
    return out


def evict(limit: int, keep: str = "") -> int:
    """Delete least recently used entries until they total at most ``limit`` bytes."""
    folder = directory()
    if folder is None:
        return 0
    entries = sorted(_entries(folder))
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, path in entries:
        if total <= limit:
            break
        if os.path.basename(path) == keep:
            continue
        if _remove(path):
            removed += 1
        total -= size
    return removed


def info() -> dict:
    folder = directory()
    entries = _entries(folder) if folder else []
    return {"directory": folder, "entries": len(entries), "bytes": sum(s for _, s, _ in entries),
            "limit": config.get().cache_size}


def clear() -> tuple[int, int]:
    """Delete every entry; returns (entries, bytes) removed. Builds writing meanwhile still finish."""
    folder = directory()
    if folder is None:
        return 0, 0
    n = size = 0
    for _, s, path in _entries(folder):
        if _remove(path):
            n, size = n + 1, size + s
    return n, size


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


_warned: set = set()


def _warn_once(folder: str, err: OSError) -> None:
    if folder not in _warned:
        _warned.add(folder)
        logger.warning("kiln cache: cannot write to %s (%s); builds go on uncached. Set "
                       "KILN_CACHE_DIR to a writable folder, or KILN_CACHE_DIR=off", folder, err.strerror or err)
