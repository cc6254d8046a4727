"""The parameter blob (``mod.params``) as numpy: written by the compiler, read by the device.

Format (all integers little-endian; docs/relay.md):

    magic   8 bytes  b"KILNPRM1"
    count   u64      number of arrays
    then per array, in insertion order:
      name_len u64, name (utf-8)
      dtype_len u64, dtype name (ascii, e.g. "float32", "int64", "bool")
      ndim u64, shape: ndim x i64
      nbytes u64, data (C-contiguous, little-endian)

This module needs only numpy, so the graph executor on a device can read the blob that a
compiled library carries; ``relay.save_param_dict``/``load_param_dict`` are built on it.
"""

from __future__ import annotations

import struct

import numpy as np

from .. import limits
from ..errors import FileFormatError

MAGIC = b"KILNPRM1"


def _as_numpy(value) -> np.ndarray:
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    arr = np.asarray(value)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")  # ascontiguousarray would make 0-d 1-d


def save_params(params: dict) -> bytes:
    """Serialize ``{name: array}`` (numpy arrays or kiln NDArrays) to bytes."""
    out = [MAGIC, struct.pack("<Q", len(params))]
    for name, value in params.items():
        arr = _as_numpy(value)
        dtype = "bool" if arr.dtype == np.bool_ else arr.dtype.name
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        for text in (str(name).encode(), dtype.encode()):
            out += [struct.pack("<Q", len(text)), text]
        out.append(struct.pack(f"<Q{arr.ndim}q", arr.ndim, *arr.shape))
        out += [struct.pack("<Q", len(data)), data]
    return b"".join(out)


# dtypes a blob may name: what save_params writes for numeric and bool arrays.
DTYPES = frozenset(["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "float32", "float64", "complex64", "complex128"])
_MAX_NDIM = 32  # numpy's own bound


def load_params(blob, copy: bool = True, source: str = "parameter blob") -> dict:
    """``{name: numpy array}`` from a blob (bytes, bytearray or memoryview).

    With ``copy=False`` the arrays are read-only views into ``blob`` (no copy of the data, e.g.
    for parameters embedded in a loaded library); the caller keeps ``blob`` alive. Every size in
    the blob is checked against the bytes that follow it before anything is read (kiln/limits.py);
    ``source`` (the file's name) starts each error message.
    """
    view = memoryview(blob).cast("B")
    if bytes(view[:8]) != MAGIC:
        raise FileFormatError(f"load_params: {source} is not a kiln parameter blob (bad magic); was it written by "
                              "relay.save_param_dict (or lib.get_params)?")
    pos = 8
    where = f"load_params: {source}"

    def take(fmt, field):
        nonlocal pos
        size = struct.calcsize(fmt)
        limits.fits(size, len(view) - pos, file=where, field=field)
        vals = struct.unpack_from(fmt, view, pos)
        pos += size
        return vals

    def take_bytes(field):
        nonlocal pos
        n = limits.fits(take("<Q", field + " length")[0], len(view) - pos, file=where, field=field)
        pos += n
        return view[pos - n:pos]

    def text(field):
        try:
            return bytes(take_bytes(field)).decode()
        except UnicodeDecodeError:
            raise limits.fail(where, field, "is not UTF-8 text", "the blob is damaged; export it again") from None

    # Each array takes at least four u64 fields: a larger count cannot be in the blob.
    (count,) = take("<Q", "count")
    limits.count(count, file=where, field="count", most=(len(view) - pos) // 32)
    result = {}
    for i in range(count):
        name = text(f"array {i} name")
        field = f"array {name!r}"
        dtype = text(f"{field} dtype")
        if dtype not in DTYPES:
            raise limits.fail(where, f"{field} dtype", f"{dtype[:20]!r} is not a tensor dtype",
                              "the blob is damaged or was not written by relay.save_param_dict")
        (ndim,) = take("<Q", f"{field} ndim")
        if ndim > _MAX_NDIM:
            raise limits.fail(where, f"{field} ndim", f"{ndim} dimensions (at most {_MAX_NDIM})", "the blob is damaged")
        shape = limits.shape(take(f"<{ndim}q", f"{field} shape"), file=where, field=f"{field} shape")
        np_type = np.dtype(dtype)
        data = take_bytes(f"{field} data")
        want = limits.nbytes(shape, np_type.itemsize, file=where, field=f"{field} shape")
        if len(data) != want:
            raise limits.fail(where, f"{field} data", f"holds {len(data)} bytes but shape {shape} of {dtype} "
                              f"needs {want}", "the blob is damaged; export it again")
        arr = np.frombuffer(data, dtype=np_type.newbyteorder("<")).reshape(shape)
        if copy:
            arr = arr.astype(np_type)
        result[name] = arr
    return result
