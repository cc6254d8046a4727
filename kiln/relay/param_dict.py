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

from kiln.runtime.params import MAGIC, load_params, save_params  # noqa: F401  (numpy-only, shared with the device)


def save_param_dict(params: dict) -> bytes:
    """Serialize ``{name: array}`` (numpy arrays or kiln NDArrays) to bytes."""
    return save_params(params)


def _numpy_params(blob: bytes) -> dict:
    return load_params(blob)


def load_param_dict(blob: bytes) -> dict:
    """Inverse of ``save_param_dict``; values are kiln NDArrays (numpy arrays without the runtime)."""
    params = _numpy_params(bytes(blob))
    try:
        from kiln import nd
    except ImportError:
        return params
    return {k: nd.array(v) for k, v in params.items()}
