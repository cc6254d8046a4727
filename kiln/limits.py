"""The checks every loader runs on sizes it reads from a file, before it allocates anything.

Files from elsewhere (models, packages, parameter blobs, graph JSON) declare sizes: a tensor's
shape, a string's length, a member's size. A loader trusts none of them. Two rules:

1. **What the file holds.** A size the file says it *contains* (an array's data, a name, an
   archive member) must fit in the bytes it has left: ``fits``. This needs no limit: a 154 MB
   embedding is accepted because it is really there.
2. **What the file makes kiln compute.** Data that is *not* in the file (a folded
   ``ConstantOfShape`` or ``Range``, a compressed dataset, the graph executor's buffers) is
   bounded: one tensor or buffer by ``load_limit()`` (``KILN_LOAD_LIMIT``, default 4G), and data
   a model computes at import beyond what it holds by ``expansion_limit(file_size)``:
   ``max(KILN_LOAD_EXPANSION (64M), 8 x the file's size)``, never above ``load_limit()``.

Every failure is a ``SizeLimitError`` (or ``FileFormatError``) that names the file, the field
and what to do; docs/security.md lists the limits. Shapes are multiplied as Python integers, so
a product never wraps.
"""

from __future__ import annotations

import math
import os

from . import config
from .errors import FileFormatError, SizeLimitError

EXPANSION_FACTOR = 8  # a model may compute at import up to this many times its own size


def load_limit() -> int:
    """The most bytes one tensor or buffer declared by a loaded file may take (KILN_LOAD_LIMIT)."""
    return config.get().load_limit


def expansion_limit(file_size: int) -> int:
    """The most bytes of data a model of ``file_size`` bytes may compute at load time."""
    return min(load_limit(), max(config.get().load_expansion, EXPANSION_FACTOR * max(int(file_size), 0)))


def fail(file, field: str, problem: str, fix: str) -> FileFormatError:
    """The error for a malformed file: ``raise limits.fail(path, "nodes[3].inputs", "...", "...")``."""
    return FileFormatError(f"{_name(file)}: {field}: {problem}; {fix}")


def file_size(path) -> int:
    """The size of a file to load; a missing file or a folder is one clear error."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise FileFormatError(f"{path} is a directory, not a file; pass the path of the file itself")
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        raise FileFormatError(f"{path} does not exist; check the path") from None
    except OSError as err:
        raise FileFormatError(f"cannot read {path}: {err.strerror or err}") from None


def fits(n, available: int, *, file, field: str) -> int:
    """``n`` (a size read from the file) as an int, if the ``available`` bytes left can hold it."""
    n = count(n, file=file, field=field)
    if n > available:
        raise SizeLimitError(f"{_name(file)}: {field} declares {n} bytes but only {max(available, 0)} remain; "
                             "the file is truncated or damaged: export or download it again")
    return n


def count(n, *, file, field: str, most: int | None = None) -> int:
    """A count or size read from the file, checked to be a non-negative integer (at most ``most``)."""
    if isinstance(n, bool) or not isinstance(n, int):
        try:
            import numpy as np
            ok = isinstance(n, np.integer)
        except ImportError:  # pragma: no cover - numpy is a dependency of every loader
            ok = False
        if not ok:
            raise FileFormatError(f"{_name(file)}: {field} is {_short(n)}, not an integer; "
                                  "the file is damaged or was not written by a supported exporter")
    n = int(n)
    if n < 0:
        raise FileFormatError(f"{_name(file)}: {field} is {n}, a negative size; the file is damaged")
    if most is not None and n > most:
        raise SizeLimitError(f"{_name(file)}: {field} is {n}, more than the {most} this file can hold; "
                             "the file is damaged")
    return n


def shape(dims, *, file, field: str) -> tuple:
    """A shape read from the file: a sequence of non-negative integers (each checked)."""
    try:
        if isinstance(dims, (str, bytes, dict)):
            raise TypeError
        dims = list(dims)
    except TypeError:
        raise FileFormatError(f"{_name(file)}: {field} is {_short(dims)}, not a list of dimensions; "
                              "the file is damaged") from None
    return tuple(count(d, file=file, field=f"{field}[{i}]") for i, d in enumerate(dims))


def nbytes(dims, itemsize: int, *, file, field: str) -> int:
    """Bytes of a tensor of shape ``dims`` (checked) and ``itemsize``; exact, never wrapping."""
    return math.prod(shape(dims, file=file, field=field)) * int(itemsize)


def within(n: int, limit: int, *, file, field: str, setting: str = "KILN_LOAD_LIMIT") -> int:
    """``n`` bytes that loading ``file`` would allocate, if at most ``limit``."""
    if n > limit:
        raise SizeLimitError(f"{_name(file)}: {field} needs {_bytes(n)}, above the limit of {_bytes(limit)}; "
                             f"if the file is genuine, raise {setting} (docs/security.md)")
    return n


def tensor(dims, itemsize: int, *, file, field: str, limit: int | None = None) -> int:
    """Bytes of a tensor the file makes kiln allocate, checked against ``limit`` (default load_limit())."""
    n = nbytes(dims, itemsize, file=file, field=field)
    return within(n, load_limit() if limit is None else limit, file=file, field=field,
                  setting="KILN_LOAD_LIMIT" if limit is None else "KILN_LOAD_EXPANSION or KILN_LOAD_LIMIT")


def _name(file) -> str:
    if isinstance(file, (str, os.PathLike)):
        return os.fspath(file)
    return str(file) if file else "<input>"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n} bytes)"
    return f"{n} bytes"
