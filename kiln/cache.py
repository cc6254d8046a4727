"""The build cache: compiled artifacts on disk, so rebuilding an unchanged model is quick.

An entry is one file ``<KILN_CACHE_DIR>/build-v2/<key>.kc`` named by the SHA-256 of everything
that decides its contents (``key(...)``: the caller's description of the input, plus
``fingerprint()``: the kiln sources, the LLVM and Python versions). Writers put the whole
entry in a temporary file beside it and ``os.replace`` it into place, so concurrent builds of
the same thing each write a complete entry and readers see an old one, a new one or none.
Every entry carries a checksum; a truncated or damaged one reads as a miss and is removed.
After each write the least recently used entries (by mtime; a hit touches its entry) are
deleted until the total is within ``KILN_CACHE_SIZE``.

Trust (docs/cache.md, docs/security.md): an entry holds compiled code, and its key is no secret
(anyone can hash a build's inputs), so a checksum proves nothing against a writer of the folder.
Every entry ends with an HMAC-SHA256 of its bytes under a per-user secret kept *outside* the
cache folder (``KILN_CACHE_SECRET``, default ``~/.config/kiln/cache-secret``, made 0600 on first
use); an entry whose tag does not verify was not written by this user's kiln and is removed. The
cache also refuses a folder (or secret) that is not owned by the user or that group or others
can write: then builds go on uncached with one warning. Entries are opened without following
links or blocking (a FIFO or device in place of an entry is a miss), and only if they are regular
files no larger than ``KILN_CACHE_SIZE``, so a sparse multi-GB entry is never read.

The cache never makes a build fail: an unwritable or untrusted directory, a bad entry or a
KILN_CACHE_SIZE that is not a size costs a rebuild and one warning. ``KILN_CACHE_DIR=off``
(or empty) turns it off; ``kiln cache info|clear``.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
import json
import logging
import os
import stat
import struct
import sys
import tempfile
import time

from . import config

logger = logging.getLogger("kiln.cache")

SUBDIR = "build-v2"  # bump when the entry format changes: old entries are then ignored
SUFFIX = ".kc"
_MAGIC = b"KILNC02\n"
_TAG = 32  # bytes of HMAC-SHA256 at the end of every entry
_SECRET_BYTES = 32
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


# -- trust ---------------------------------------------------------------------------------------
def _untrusted(path: str) -> str:
    """Why ``path`` (a folder or the secret) may not be trusted, or "" (missing paths are fine)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as err:
        return f"cannot inspect it ({err.strerror or err})"
    if stat.S_ISLNK(st.st_mode):
        st = os.stat(path)  # a link the user made to elsewhere is fine; its target is checked
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others can write it (mode {stat.S_IMODE(st.st_mode):o}); chmod go-w it"
    return ""


def _trusted_folder(folder: str) -> bool:
    """The entry folder and the cache root are the user's own and writable by nobody else."""
    for path in (os.path.dirname(folder), folder):
        why = _untrusted(path)
        if why:
            _warn_once(path, f"not used: {why}")
            return False
    return True


def secret_path() -> str:
    return os.path.abspath(os.path.expanduser(config.get().cache_secret))


def _secret(folder: str) -> bytes | None:
    """The per-user HMAC key, created (0600, in a 0700 folder) on first use; None if untrusted."""
    path = secret_path()
    root = os.path.dirname(folder)
    if os.path.commonpath([path, root]) == root:
        _warn_once(path, "not used: the secret must live outside KILN_CACHE_DIR (set KILN_CACHE_SECRET)")
        return None
    for check in (os.path.dirname(path), path):
        why = _untrusted(check)
        if why:
            _warn_once(check, f"not used: {why}")
            return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return _new_secret(path)
    except OSError as err:
        _warn_once(path, f"cannot read the cache secret ({err.strerror or err})")
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            _warn_once(path, f"not used: the cache secret must be a regular file only you can read "
                             f"(mode {stat.S_IMODE(st.st_mode):o}); chmod 600 it")
            return None
        key = f.read(_SECRET_BYTES + 1)
    if len(key) != _SECRET_BYTES:
        _warn_once(path, f"not used: the cache secret is not {_SECRET_BYTES} bytes; delete it to make a new one")
        return None
    return key


def _new_secret(path: str) -> bytes | None:
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another process made it meanwhile: use theirs
        return _read_secret_again(path)
    except OSError as err:
        _warn_once(path, f"cannot create the cache secret ({err.strerror or err})")
        return None
    key = os.urandom(_SECRET_BYTES)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def _read_secret_again(path: str) -> bytes | None:
    time.sleep(0.01)  # the creator writes 32 bytes right after creating the file
    try:
        with open(path, "rb") as f:
            key = f.read(_SECRET_BYTES + 1)
    except OSError:
        return None
    return key if len(key) == _SECRET_BYTES else None


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
    if folder is None or not _trusted_folder(folder):
        return None
    secret = _secret(folder)
    if secret is None:
        return None
    path = os.path.join(folder, entry_key + SUFFIX)
    data = _read_entry(path)
    if data is None:
        return None
    files = _unpack(data, entry_key, secret) if data else None
    if files is None:
        logger.warning("kiln cache: damaged entry %s removed; rebuilding", path)
        _remove(path)
        return None
    try:
        os.utime(path)  # most recently used: evicted last
    except OSError:
        pass
    return files


def _read_entry(path: str) -> bytes | None:
    """The entry's bytes; None for a missing one; b"" for one that is not a plain file of at most
    KILN_CACHE_SIZE bytes (a FIFO would block, a sparse entry would be read whole)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:  # a link (ELOOP), no permission...: not an entry this cache wrote
        return b""
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > size_limit():
            return b""
        return f.read(st.st_size)


def store(entry_key: str, files: dict[str, bytes]) -> bool:
    """Write the entry (atomically), then evict down to the size limit. False if not written."""
    folder = directory()
    if folder is None:
        return False
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as err:
        _warn_once(folder, f"cannot write to it ({err.strerror or err})")
        return False
    secret = _secret(folder) if _trusted_folder(folder) else None
    if secret is None:
        return False
    data = _pack(files, entry_key, secret)
    limit = size_limit()
    if len(data) > limit:
        return False
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(folder, entry_key + SUFFIX))
        tmp = None
        evict(limit, keep=entry_key + SUFFIX)
        return True
    except OSError as err:
        _warn_once(folder, f"cannot write to it ({err.strerror or err})")
        return False
    finally:
        if tmp is not None:
            _remove(tmp)


def _pack(files: dict[str, bytes], entry_key: str, secret: bytes) -> bytes:
    payload = b"".join(files.values())
    header = json.dumps({"key": entry_key, "files": [[n, len(b)] for n, b in files.items()],
                         "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    body = _MAGIC + _HEADER.pack(len(header)) + header + payload
    return body + hmac.new(secret, body, hashlib.sha256).digest()


def _unpack(data: bytes, entry_key: str, secret: bytes) -> dict[str, bytes] | None:
    # The tag first: nothing of an entry another writer made is parsed.
    if len(data) < _TAG or not hmac.compare_digest(
            hmac.new(secret, data[:-_TAG], hashlib.sha256).digest(), data[-_TAG:]):
        return None
    data = data[:-_TAG]
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
DEFAULT_SIZE = 1 << 30


def size_limit() -> int:
    """KILN_CACHE_SIZE, or the default 1G (with one warning) when it is not a size."""
    limit = config.get().cache_size
    if limit < 0:
        if "size" not in _warned:
            _warned.add("size")
            logger.warning("kiln cache: KILN_CACHE_SIZE is not a size (use e.g. 500M or 2G); the cache keeps "
                           "its default bound of 1G")
        return DEFAULT_SIZE
    return limit


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
            "limit": size_limit()}


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


def _warn_once(path: str, problem: str) -> None:
    if path not in _warned:
        _warned.add(path)
        logger.warning("kiln cache: %s: %s; builds go on uncached. Set KILN_CACHE_DIR to a folder of your own, "
                       "or KILN_CACHE_DIR=off", path, problem)
