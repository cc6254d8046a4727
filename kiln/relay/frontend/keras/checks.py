"""What the Keras importer checks in a file before it trusts it.

A ``.h5`` holds two things a hostile file can abuse: the architecture JSON (any shape of JSON
reaches code that expects dicts of lists of strings) and the weight datasets, whose declared
shape need not be stored: an 84 KB file can declare a 16 GB chunked dataset made of its fill
value. Here the JSON is checked for the structure the importer walks, each dataset is checked
against kiln/limits.py (stored data: KILN_LOAD_LIMIT; data HDF5 would have to make up beyond
what is stored: the file's expansion limit) before it is read, and h5py's errors on a damaged
file become one error naming the file.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np

from kiln import limits


@contextlib.contextmanager
def h5_errors(file: str, what: str):
    """h5py reports a damaged file (bad B-tree or heap signatures, truncated objects) as
    OSError/RuntimeError/KeyError from its C layer; only h5py calls run inside this block."""
    try:
        yield
    except (OSError, RuntimeError, KeyError) as err:
        raise limits.fail(file, what, f"cannot be read ({str(err).splitlines()[0][:160]})",
                          "the HDF5 file is damaged: save the model again") from None


def parse_config(text, file: str, field: str = "model_config") -> dict:
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise limits.fail(file, field, "is not UTF-8 text", "save the model again") from None
    if not isinstance(text, str):
        raise limits.fail(file, field, f"is a {type(text).__name__}, not JSON text", "save the model again")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise limits.fail(file, field, f"is not valid JSON ({err})", "save the model again") from None
    except RecursionError:  # the json module's own depth limit
        raise limits.fail(file, field, "nests too deeply to be a model architecture", "save the model again") from None
    check_config(config, file, field)
    return config


def _need(cond, file, field, problem):
    if not cond:
        raise limits.fail(file, field, problem, "the architecture JSON is damaged or not from model.save")


def _is_shape(v) -> bool:
    return isinstance(v, list) and all(d is None or (type(d) is int and d >= 0) for d in v)


def check_config(config, file: str, field: str = "model_config") -> None:
    """The structure the importer walks: layers with a class name, a config and their connections."""
    _need(isinstance(config, dict), file, field, f"is a {type(config).__name__}, not an object")
    _need(isinstance(config.get("class_name", ""), str), file, f"{field}.class_name", "is not a string")
    cfg = config.get("config", {})
    _need(isinstance(cfg, (dict, list)), file, f"{field}.config", "is neither an object nor a list")
    layers = cfg.get("layers") if isinstance(cfg, dict) else cfg
    _need(isinstance(layers, list) and layers, file, f"{field}.config.layers", "is not a non-empty list")
    names = set()
    for i, layer in enumerate(layers):
        where = f"{field} layers[{i}]"
        _need(isinstance(layer, dict), file, where, "is not an object")
        _need(isinstance(layer.get("class_name"), str), file, f"{where}.class_name", "is not a string")
        lcfg = layer.get("config")
        _need(isinstance(lcfg, dict), file, f"{where}.config", "is not an object")
        name = layer.get("name") or lcfg.get("name")
        _need(isinstance(name, str) and name, file, f"{where}.name", "is not a non-empty string")
        _need(name not in names, file, f"{where}.name", f"repeats the layer name {name!r}")
        names.add(name)
        for key in ("batch_input_shape", "batch_shape"):
            if lcfg.get(key) is not None:
                _need(_is_shape(lcfg[key]) and lcfg[key], file, f"{where}.config.{key}",
                      f"is {str(lcfg[key])[:40]}, not a list of dimensions")
        inbound = layer.get("inbound_nodes", [])
        _need(isinstance(inbound, list), file, f"{where}.inbound_nodes", "is not a list")
        if inbound and config.get("class_name") != "Sequential":  # Sequential: chained by position
            _check_inbound(inbound[0], names, file, f"{where}.inbound_nodes[0]")
    if isinstance(cfg, dict) and cfg.get("output_layers"):
        outs = cfg["output_layers"]
        _need(isinstance(outs, list), file, f"{field}.config.output_layers", "is not a list")
        outs = [outs] if outs and isinstance(outs[0], str) else outs
        for j, o in enumerate(outs):
            _need(isinstance(o, list) and o and isinstance(o[0], str) and o[0] in names, file, f"{field}.config.output_layers[{j}]",
                  f"is {str(o)[:40]}, not a layer of the model")


def _check_inbound(node, names: set, file: str, where: str) -> None:
    if isinstance(node, dict):  # Keras 3: keras tensors anywhere under "args"
        stack = [node.get("args", [])]
        while stack:
            v = stack.pop()
            if isinstance(v, dict) and v.get("class_name") == "__keras_tensor__":
                history = v.get("config", {}).get("keras_history") if isinstance(v.get("config"), dict) else None
                _need(isinstance(history, list) and len(history) == 3 and isinstance(history[0], str)
                      and history[0] in names, file, where,
                      f"reads {str(history)[:40]}, not an earlier layer")
            elif isinstance(v, (list, tuple)):
                stack.extend(v)
        return
    _need(isinstance(node, list), file, where, "is not a list of connections")
    for k, entry in enumerate(node):
        _need(isinstance(entry, list) and len(entry) >= 3 and isinstance(entry[0], str), file, f"{where}[{k}]",
              f"is {str(entry)[:40]}, not [layer, node, tensor]")
        _need(entry[0] in names, file, f"{where}[{k}]", f"reads layer {entry[0][:40]!r}, which is not an earlier layer")


def read_dataset(ds, file: str, field: str, file_size: int) -> np.ndarray:
    """A weight dataset as numpy, once its declared size is within the limits."""
    import h5py
    with h5_errors(file, field):
        if not isinstance(ds, h5py.Dataset):
            raise limits.fail(file, field, "is a group, not a weight array", "the file is damaged")
        dtype, shape = ds.dtype, ds.shape
        stored = ds.id.get_storage_size()
    if dtype.kind not in "biuf":
        raise limits.fail(file, field, f"has dtype {dtype}, not a number type", "the file is damaged")
    nbytes = limits.nbytes(shape or (), dtype.itemsize, file=file, field=f"{field} shape")
    # Data that is stored costs the file its own size; data HDF5 makes up (fill values,
    # compression) is bounded by the file's expansion limit.
    limit = limits.load_limit() if stored >= nbytes else limits.expansion_limit(file_size)
    limits.within(nbytes, limit, file=file, field=f"{field} (shape {list(shape)}, {dtype})",
                  setting="KILN_LOAD_LIMIT" if stored >= nbytes else "KILN_LOAD_EXPANSION")
    with h5_errors(file, field):
        return np.asarray(ds)
