"""Save and load parameter dicts (``mod.params``) in kiln's binary format.

Format (all integers little-endian), written down in docs/relay.md:

    magic   8 bytes  b"KILNPRM1"
    count   u64      number of arrays
    then per array, in insertion order:
      name_len u64, name (utf-8)
      dtype_len u64, dtype name (ascii, e.g. "float32", "int64", "bool")
      ndim u64, shape: ndim x i64
      nbytes u64, data (C-contiguous, little-endian)

Simple enough for the C runtime to read with fread.
"""

from __future__ import annotations

import struct

import numpy as np

from kiln.errors import KilnError

MAGIC = b"KILNPRM1"


def _as_numpy(value) -> np.ndarray:
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    arr = np.asarray(value)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")  # ascontiguousarray would make 0-d 1-d


def save_param_dict(params: dict) -> bytes:
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


def _numpy_params(blob: bytes) -> dict:
    view = memoryview(blob)
    if bytes(view[:8]) != MAGIC:
        raise KilnError("load_param_dict: not a kiln parameter blob (bad magic); was it written by save_param_dict?")
    pos = 8

    def take(fmt):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(view):
            raise KilnError("load_param_dict: the blob is truncated")
        vals = struct.unpack_from(fmt, view, pos)
        pos += size
        return vals

    def take_bytes(n):
        nonlocal pos
        if pos + n > len(view):
            raise KilnError("load_param_dict: the blob is truncated")
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
        np_type = np.dtype(dtype).newbyteorder("<")
        result[name] = np.frombuffer(data, dtype=np_type).astype(np.dtype(dtype)).reshape(shape)
    return result


def load_param_dict(blob: bytes) -> dict:
    """Inverse of ``save_param_dict``; values are kiln NDArrays (numpy arrays without the runtime)."""
    params = _numpy_params(bytes(blob))
    try:
        from kiln import nd
    except ImportError:
        return params
    return {k: nd.array(v) for k, v in params.items()}
