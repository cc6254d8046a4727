"""Read the Keras 3 ``.keras`` archive: a zip with ``config.json`` (the architecture) and
``model.weights.h5``, where each layer's variables sit positionally under
``layers/<path>/vars/<i>`` and the group's ``name`` attribute names the layer.
"""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np


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


def read_archive(path: str, fail) -> tuple[dict, dict]:
    """(model config, {layer name: {short weight name: array}}) of a ``.keras`` file."""
    import h5py
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        if "config.json" not in names or "model.weights.h5" not in names:
            fail(f"{path!r} is a zip without config.json and model.weights.h5, not a .keras model")
        config = json.loads(z.read("config.json"))
        blob = z.read("model.weights.h5")
    by_name = {(layer.get("config", {}).get("name") or layer.get("name")): layer for layer in _layers(config)}
    weights: dict = {}
    with h5py.File(io.BytesIO(blob), "r") as f:
        groups = []
        f.visititems(lambda name, obj: groups.append(obj) if name.endswith("/vars") else None)
        for g in groups:
            lname = g.attrs.get("name")
            lname = lname.decode() if isinstance(lname, bytes) else lname
            if lname not in by_name or not len(g):
                continue
            values = [np.asarray(g[k]) for k in sorted(g.keys(), key=int)]
            weights[lname] = dict(zip(_positional_names(by_name[lname]), values))
    return config, weights
