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

from ..errors import KilnError

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


def load_params(blob, copy: bool = True) -> dict:
    """``{name: numpy array}`` from a blob (bytes, bytearray or memoryview).

    With ``copy=False`` the arrays are read-only views into ``blob`` (no copy of the data, e.g.
    for parameters embedded in a loaded library); the caller keeps ``blob`` alive.
    """
    view = memoryview(blob).cast("B")
    if bytes(view[:8]) != MAGIC:
        raise KilnError("load_params: not a kiln parameter blob (bad magic); was it written by "
                        "relay.save_param_dict (or lib.get_params)?")
    pos = 8

    def take(fmt):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(view):
            raise KilnError("load_params: the blob is truncated")
        vals = struct.unpack_from(fmt, view, pos)
        pos += size
        return vals

    def take_bytes(n):
        nonlocal pos
        if pos + n > len(view):
            raise KilnError("load_params: the blob is truncated")
        pos += n
        return view[pos - n:pos]

    (count,) = take("<Q")
    result = {}
    for _ in range(count):
        name = bytes(take_bytes(take("<Q")[0])).decode()
        dtype = bytes(take_bytes(take("<Q")[0])).decode()
        (ndim,) = take("<Q")
        shape = take(f"<{ndim}q")
        data = take_bytes(take("<Q")[0])
        np_type = np.dtype(dtype)
        arr = np.frombuffer(data, dtype=np_type.newbyteorder("<")).reshape(shape)
        if copy:
            arr = arr.astype(np_type)
        result[name] = arr
    return result
