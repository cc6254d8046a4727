"""Save and load parameter dicts (``mod.params``) in kiln's binary format.

The format (docs/relay.md) and its reader and writer are kiln/runtime/params.py's, which needs
only numpy so that devices read the same blob; simple enough for the C runtime to read with fread.
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
