"""Read the Keras 3 ``.keras`` archive: a zip with ``config.json`` (the architecture) and
``model.weights.h5``, where each layer's variables sit positionally under
``layers/<path>/vars/<i>`` and the group's ``name`` attribute names the layer.
"""

from __future__ import annotations

import io
import json
import zipfile
import zlib

import numpy as np

from kiln import limits

from . import checks


def _positional_names(layer: dict) -> list:
    """Short names of a layer's variables in the order Keras 3 creates them."""
    cls, cfg = layer["class_name"], layer.get("config", {})
    if cls == "BatchNormalization":
        return (["gamma"] if cfg.get("scale", True) else []) + (["beta"] if cfg.get("center", True) else []) + \
            ["moving_mean", "moving_variance"]
    if cls == "DepthwiseConv2D":
        return ["depthwise_kernel", "bias"]
    return ["kernel", "bias"]


def _layers(config: dict) -> list:
    cfg = config.get("config", {})
    return cfg.get("layers", []) if isinstance(cfg, dict) else cfg


def _member(z: zipfile.ZipFile, name: str, path: str, size: int) -> bytes:
    """A member's bytes, once its declared size is one the archive can hold: a stored member
    must lie in the file; an inflated one is data the file makes kiln compute (a zip bomb of a
    few KB declares GBs), bounded like any such data (kiln/limits.py)."""
    info = z.getinfo(name)
    if info.compress_type == zipfile.ZIP_STORED:
        limits.fits(info.file_size, size, file=path, field=f"{name} (stored)")
    else:
        limits.within(info.file_size, limits.expansion_limit(size), file=path, field=f"{name} (compressed)",
                      setting="KILN_LOAD_EXPANSION or KILN_LOAD_LIMIT")
    try:
        return z.read(name)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as err:  # bad CRC, bad DEFLATE data
        raise limits.fail(path, name, f"cannot be read ({str(err)[:120]})",
                          "the archive is damaged; save it again") from None


def read_archive(path: str, fail) -> tuple[dict, dict]:
    """(model config, {layer name: {short weight name: array}}) of a ``.keras`` file."""
    import h5py
    size = limits.file_size(path)
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        raise limits.fail(path, "zip directory", f"cannot be read ({str(err)[:120]})",
                          "the archive is damaged; save the model again") from None
    with z:
        names = set(z.namelist())
        if "config.json" not in names or "model.weights.h5" not in names:
            fail(f"{path!r} is a zip without config.json and model.weights.h5, not a .keras model")
        text = _member(z, "config.json", path, size)
        blob = _member(z, "model.weights.h5", path, size)
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise limits.fail(path, "config.json", f"is not valid JSON ({str(err)[:120]})",
                          "the archive is damaged; save the model again") from None
    if not isinstance(config, dict):
        raise limits.fail(path, "config.json", "is not a JSON object", "the archive is damaged; save the model again")
    by_name = {(layer.get("config", {}).get("name") or layer.get("name")): layer for layer in _layers(config)
               if isinstance(layer, dict)}
    weights: dict = {}
    with checks.h5_errors(path, "model.weights.h5"):
        f = h5py.File(io.BytesIO(blob), "r")
    with f:
        groups = []
        with checks.h5_errors(path, "model.weights.h5"):
            f.visititems(lambda name, obj: groups.append(obj) if name.endswith("/vars") else None)
        for g in groups:
            with checks.h5_errors(path, f"model.weights.h5/{g.name}"):
                lname = g.attrs.get("name")
                keys = sorted(g.keys(), key=lambda k: int(k) if str(k).isdigit() else -1)
            lname = lname.decode() if isinstance(lname, bytes) else lname
            if lname not in by_name or not keys:
                continue
            values = []
            for k in keys:
                field = f"model.weights.h5{g.name}/{k}"
                with checks.h5_errors(path, field):
                    ds = g[k]
                values.append(checks.read_dataset(ds, path, field, len(blob)))
            weights[lname] = dict(zip(_positional_names(by_name[lname]), values))
    return config, weights
