"""Read a Keras ``.h5`` file (``model.save("x.h5")``) and build the relay function
(``.keras`` archives are read by archive.py into the same config and weights).

The file holds the model's architecture as JSON in the root attribute ``model_config`` and
the weights under ``model_weights/<layer>/`` (their order in the layer's ``weight_names``
attribute). Both the Keras 2 and the Keras 3 spellings of layer connections are read.

The graph is built channels-last, as Keras computes it (conv2d ``NHWC``/``HWIO``, pooling
``NHWC``). ``layout="NCHW"`` (TVM's default for ``from_keras``) declares the 4-d inputs as
NCHW and transposes them to NHWC at the start; 4-d outputs are transposed back to NCHW.
``layout="NHWC"`` (what tvmc uses) keeps the inputs and outputs as Keras has them. Weights
become Constants, so ``params`` is empty.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from kiln import limits
from kiln.errors import FileFormatError, KilnError

from ...expr import Function, Tuple, var
from ...op import transform as tf
from ...transform.infer_type import infer
from . import checks
from .archive import read_archive


class ImportError_(FileFormatError):
    """The Keras model cannot be imported as written."""


class Ctx:
    """What a converter sees: the layer's class, name and config, its weights by short name."""

    def __init__(self, layer: dict, weights: dict, version: int = 2):
        self.version = version  # Keras' major version: a few definitions changed in Keras 3
        self.cls = layer["class_name"]
        self.config = layer.get("config", {})
        self.name = self.config.get("name", layer.get("name", "?"))
        self.weights = weights

    def fail(self, msg: str):
        raise ImportError_(f"from_keras: layer {self.name!r} ({self.cls}): {msg}")

    def weight(self, *keys: str):
        """The first of ``keys`` the file has (Keras versions name some weights differently)."""
        for key in keys:
            if key in self.weights:
                return self.weights[key]
        self.fail(f"the file has no weight {keys[0]!r} for it (found {sorted(self.weights) or 'none'})")

    def shape_of(self, expr) -> tuple:
        return tuple(infer(expr).checked_type.shape)

    def dtype_of(self, expr) -> str:
        return infer(expr).checked_type.dtype

    def channels_last(self):
        if self.config.get("data_format", "channels_last") != "channels_last":
            self.fail("data_format='channels_first' is not supported; save the model channels_last")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _names(value, file: str, field: str) -> list:
    """A list of names stored as an HDF5 attribute (bytes or str)."""
    items = list(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if items is None or not all(isinstance(n, (bytes, str, np.bytes_, np.str_)) for n in items):
        raise limits.fail(file, field, f"is {str(value)[:40]}, not a list of names", "the file is damaged")
    try:
        return [_text(n) for n in items]
    except UnicodeDecodeError:
        raise limits.fail(file, field, "holds a name that is not UTF-8", "the file is damaged") from None


def _read_weights(group, layer_names, file: str = "", file_size: int = 0) -> dict:
    """{layer name: {short weight name: array}}; 'conv1/kernel:0' is stored as 'kernel'."""
    out = {}
    for lname in layer_names:
        with checks.h5_errors(file, f"model_weights/{lname}"):
            if lname not in group:
                continue
            g = group[lname]
            names = _names(g.attrs.get("weight_names", []), file, f"model_weights/{lname} weight_names")
        weights = {}
        for full in names:
            short = full.split("/")[-1].split(":")[0]
            with checks.h5_errors(file, f"model_weights/{lname}/{full}"):
                if full not in g:
                    raise limits.fail(file, f"model_weights/{lname}", f"lists the weight {full!r} but does not hold it",
                                      "the file is damaged; save the model again")
                ds = g[full]
            weights[short] = checks.read_dataset(ds, file, f"model_weights/{lname}/{full}", file_size)
        out[lname] = weights
    return out


def _inbound(layer: dict) -> list:
    """[(layer name, node index, tensor index)] feeding ``layer`` (its first call)."""
    nodes = layer.get("inbound_nodes") or []
    if not nodes:
        return []
    node = nodes[0]
    if isinstance(node, dict):  # Keras 3: {"args": [keras tensors or lists of them], "kwargs": {}}
        found = []

        def walk(v):
            if isinstance(v, dict) and v.get("class_name") == "__keras_tensor__":
                found.append(tuple(v["config"]["keras_history"]))
            elif isinstance(v, (list, tuple)):
                for item in v:
                    walk(item)
        walk(node.get("args", []))
        return found
    return [tuple(entry[:3]) for entry in node]


class _Importer:
    def __init__(self, config: dict, weights: dict, shape: dict, layout: str, converters: dict, version: int = 2):
        self.version = version
        self.config = config
        self.weights = weights
        self.shape = dict(shape or {})
        self.layout = layout
        self.converters = converters
        self.tensors: dict = {}
        self.inputs: list = []

    def layers(self) -> list:
        cfg = self.config.get("config", {})
        layers = cfg["layers"] if isinstance(cfg, dict) else cfg
        if self.config.get("class_name") == "Sequential":
            return _chain(layers, cfg.get("build_input_shape") if isinstance(cfg, dict) else None)
        return layers

    def check_supported(self, layers):
        missing = {}
        for layer in layers:
            if layer["class_name"] not in self.converters and layer["class_name"] != "InputLayer":
                missing.setdefault(layer["class_name"], []).append(layer.get("name") or layer["config"].get("name"))
        if missing:
            listed = "\n".join(f"  {k}: {', '.join(v)}" for k, v in sorted(missing.items()))
            raise ImportError_(f"from_keras: the model uses {len(missing)} unsupported layer type(s):\n{listed}\n"
                               "Supported layers are listed in docs/frontends.md "
                               "(kiln.relay.frontend.keras.CONVERTERS).")

    def input_var(self, layer):
        cfg = layer["config"]
        name = cfg.get("name", layer.get("name"))
        if name in self.shape:
            dims = tuple(int(d) for d in self.shape[name])
            nhwc = _to_nhwc(dims) if self.layout == "NCHW" and len(dims) == 4 else dims
        else:
            declared = cfg.get("batch_input_shape") or cfg.get("batch_shape")
            if declared is None or any(d is None for d in declared[1:]):
                raise ImportError_(f"from_keras: input {name!r} has shape {declared}; pass "
                                   f"shape={{{name!r}: (...)}} with every dimension")
            nhwc = tuple(1 if d is None else int(d) for d in declared)
            dims = _to_nchw(nhwc) if self.layout == "NCHW" and len(nhwc) == 4 else nhwc
        v = var(name, shape=dims, dtype=cfg.get("dtype") if isinstance(cfg.get("dtype"), str) else "float32")
        self.inputs.append(v)
        return tf.transpose(v, (0, 2, 3, 1)) if self.layout == "NCHW" and len(dims) == 4 else v

    def run(self) -> Function:
        layers = self.layers()
        self.check_supported(layers)
        known = [layer.get("name") or layer["config"]["name"] for layer in layers if layer["class_name"] == "InputLayer"]
        unknown = [n for n in self.shape if n not in known]
        if unknown:
            raise ImportError_(f"from_keras: shape names {unknown}, but the model's inputs are {known}")
        for layer in layers:
            name = layer.get("name") or layer["config"]["name"]
            if layer["class_name"] == "InputLayer":
                self.tensors[name] = self.input_var(layer)
                continue
            ins = [self.tensors[src] for src, _node, _idx in _inbound(layer)]
            ctx = Ctx(layer, self.weights.get(name, {}), self.version)
            try:
                self.tensors[name] = self.converters[layer["class_name"]](ctx, ins)
            except FileFormatError:  # ImportError_ and size limits: already name the file
                raise
            except (KilnError, ValueError, TypeError, KeyError, IndexError) as e:  # from the layer's config values
                raise ImportError_(f"from_keras: layer {name!r} ({layer['class_name']}): {e}") from e
        outs = [self.output(self.tensors[o[0]]) for o in self.output_layers(layers)]
        return Function(self.inputs, outs[0] if len(outs) == 1 else Tuple(outs))

    def output(self, expr):
        if self.layout == "NCHW" and len(infer(expr).checked_type.shape) == 4:
            return tf.transpose(expr, (0, 3, 1, 2))
        return expr

    def output_layers(self, layers):
        cfg = self.config.get("config", {})
        outs = cfg.get("output_layers") if isinstance(cfg, dict) else None
        if not outs:
            return [[layers[-1].get("name") or layers[-1]["config"]["name"]]]
        return [outs] if isinstance(outs[0], str) else outs


def _chain(layers, build_shape):
    """A Sequential model as a functional one: each layer reads the one before it."""
    out, prev = [], None
    for layer in layers:
        layer = dict(layer)
        cfg = layer["config"]
        name = cfg["name"]
        if layer["class_name"] != "InputLayer" and prev is None:
            shape = cfg.get("batch_input_shape") or cfg.get("batch_shape") or build_shape
            out.append({"class_name": "InputLayer", "name": f"{name}_input",
                        "config": {"name": f"{name}_input", "batch_input_shape": shape}})
            prev = f"{name}_input"
        layer["name"] = name
        layer["inbound_nodes"] = [[[prev, 0, 0, {}]]] if prev else []
        out.append(layer)
        prev = name
    return out


def _to_nchw(shape):
    return (shape[0], shape[3], shape[1], shape[2])


def _to_nhwc(shape):
    return (shape[0], shape[2], shape[3], shape[1])


def _major(version) -> int:
    try:
        return int(_text(version).split(".")[0])
    except (ValueError, UnicodeDecodeError):
        return 2


def _fail(msg: str):
    raise ImportError_(f"from_keras: {msg}")


def _open(model):
    try:
        import h5py
    except ImportError:
        raise ImportError_("from_keras needs h5py to read .h5 files: pip install h5py") from None
    if isinstance(model, h5py.File):
        return model, False
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if limits.file_size(path) == 0:
            raise limits.fail(path, "file", "is empty (0 bytes), not a Keras model", "save it with model.save('model.h5')")
        try:
            return h5py.File(path, "r"), True
        except OSError as err:
            raise ImportError_(f"from_keras: {path!r} is not a readable HDF5 file ({err}); save the model with "
                               "model.save('model.h5')") from None
    raise ImportError_(f"from_keras takes the path of an .h5 file or an h5py.File, got {type(model).__name__} "
                       "(save a keras.Model with model.save('model.h5') first)")


def from_keras(model, shape=None, layout="NCHW"):
    """Import a Keras model as ``(IRModule, params)``: an ``.h5`` file (a path or an open
    ``h5py.File``) or a Keras 3 ``.keras`` archive (a path).

    ``shape``: ``{input name: shape}`` in ``layout`` (needed when the model's own input shape
    has unknown dimensions other than the batch). ``layout``: "NCHW" (inputs and 4-d outputs
    NCHW, as TVM's from_keras) or "NHWC" (as the Keras model; tvmc uses this).

    >>> mod, params = relay.frontend.from_keras("resnet50.h5", {"input_1": (1, 224, 224, 3)}, layout="NHWC")
    """
    from kiln.ir.module import IRModule

    from . import CONVERTERS
    if layout not in ("NCHW", "NHWC"):
        raise ImportError_(f"from_keras: layout={layout!r}; use 'NCHW' or 'NHWC'")
    if isinstance(model, (str, os.PathLike)) and not os.path.isdir(model) and zipfile.is_zipfile(os.fspath(model)):
        config, weights = read_archive(os.fspath(model), lambda msg: _fail(msg))
        func = _Importer(config, weights, shape, layout, CONVERTERS, version=3).run()
        infer(func)
        return IRModule({"main": func}), {}
    f, owned = _open(model)
    file = f"from_keras: {f.filename}"
    size = os.path.getsize(f.filename) if os.path.isfile(f.filename) else 0
    try:
        with checks.h5_errors(file, "model_config"):
            if "model_config" not in f.attrs:
                raise ImportError_(f"from_keras: {f.filename!r} has no model_config attribute (a weights-only file?); "
                                   "save the whole model with model.save('model.h5')")
            raw = f.attrs["model_config"]
            group = f["model_weights"] if "model_weights" in f else f
            layer_names = group.attrs.get("layer_names", list(group.keys()))
            version = f.attrs.get("keras_version", group.attrs.get("keras_version", "2"))
        config = checks.parse_config(raw, file)
        weights = _read_weights(group, _names(layer_names, file, "model_weights layer_names"), file, size)
        version = _major(version)
    finally:
        if owned:
            f.close()
    func = _Importer(config, weights, shape, layout, CONVERTERS, version).run()
    infer(func)
    return IRModule({"main": func}), {}
