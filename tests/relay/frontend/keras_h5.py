"""Write Keras-layout ``.h5`` files with h5py, and compute what Keras would output with an
independent numpy implementation of the layers (channels_last, TensorFlow's 'same' padding).

The files follow what Keras 2's ``model.save("x.h5")`` writes: the architecture as JSON in the
root attribute ``model_config``; ``model_weights`` with ``layer_names``, one group per layer
with ``weight_names`` ("conv1/kernel:0") and the datasets under those names.
"""

import json
import math

import h5py
import numpy as np


class Graph:
    """A functional model under construction: ``g.add("Conv2D", cfg, inputs, weights)``."""

    def __init__(self, input_shape, name="input_1"):
        self.layers = [{"class_name": "InputLayer", "name": name, "inbound_nodes": [],
                        "config": {"name": name, "batch_input_shape": [None, *input_shape], "dtype": "float32"}}]
        self.weights = {}
        self.input = name

    def add(self, cls, name, inputs, weights=(), **config):
        inputs = [inputs] if isinstance(inputs, str) else inputs
        self.layers.append({"class_name": cls, "name": name, "config": {"name": name, **config},
                            "inbound_nodes": [[[i, 0, 0, {}] for i in inputs]]})
        self.weights[name] = list(weights)
        return name

    def save(self, path, output):
        config = {"class_name": "Functional", "config": {"name": "model", "layers": self.layers,
                                                         "input_layers": [[self.input, 0, 0]],
                                                         "output_layers": [[output, 0, 0]]}}
        with h5py.File(path, "w") as f:
            f.attrs["keras_version"] = b"2.13.1"
            f.attrs["backend"] = b"tensorflow"
            f.attrs["model_config"] = json.dumps(config).encode()
            g = f.create_group("model_weights")
            names = [layer["name"] for layer in self.layers]
            g.attrs["layer_names"] = [n.encode() for n in names]
            for n in names:
                lg = g.create_group(n)
                pairs = self.weights.get(n, [])
                lg.attrs["weight_names"] = [f"{n}/{w}:0".encode() for w, _ in pairs]
                for w, value in pairs:
                    lg.create_dataset(f"{n}/{w}:0", data=value)


# -- numpy reference of the layers (NHWC) ---------------------------------------------------------

def _same(size, k, s, d=1):
    total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _pad_hw(x, cfg, k, s, value=0.0):
    if cfg.get("padding", "valid") == "valid":
        return x, np.ones(x.shape[1:3])
    (t, b), (l, r) = _same(x.shape[1], k[0], s[0]), _same(x.shape[2], k[1], s[1])
    inside = np.pad(np.ones(x.shape[1:3]), ((t, b), (l, r)))
    return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=value), inside


def _windows(x, k, s):
    """Yield (i, j, window) over output positions of a k-window, stride-s scan of padded x."""
    oh, ow = (x.shape[1] - k[0]) // s[0] + 1, (x.shape[2] - k[1]) // s[1] + 1
    for i in range(oh):
        for j in range(ow):
            yield i, j, x[:, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1], :], (oh, ow)


def conv2d(x, kernel, bias, cfg):
    s = tuple(cfg.get("strides", (1, 1)))
    xp, _ = _pad_hw(x, cfg, kernel.shape[:2], s)
    out = None
    for i, j, win, (oh, ow) in _windows(xp, kernel.shape[:2], s):
        if out is None:
            out = np.zeros((x.shape[0], oh, ow, kernel.shape[3]))
        out[:, i, j, :] = np.tensordot(win, kernel, axes=([1, 2, 3], [0, 1, 2]))
    return out + (bias if bias is not None else 0)


def depthwise(x, kernel, bias, cfg):
    s = tuple(cfg.get("strides", (1, 1)))
    kh, kw, c, m = kernel.shape
    xp, _ = _pad_hw(x, cfg, (kh, kw), s)
    out = None
    for i, j, win, (oh, ow) in _windows(xp, (kh, kw), s):
        if out is None:
            out = np.zeros((x.shape[0], oh, ow, c, m))
        out[:, i, j] = np.einsum("nhwc,hwcm->ncm", win, kernel)
    out = out.reshape(x.shape[0], out.shape[1], out.shape[2], c * m)
    return out + (bias if bias is not None else 0)


def pool(x, cfg, kind):
    k = tuple(cfg.get("pool_size", (2, 2)))
    s = tuple(cfg.get("strides") or k)
    xp, inside = _pad_hw(x, cfg, k, s, value=-np.inf if kind == "max" else 0.0)
    out = None
    for i, j, win, (oh, ow) in _windows(xp, k, s):
        if out is None:
            out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
        if kind == "max":
            out[:, i, j] = win.max(axis=(1, 2))
        else:
            out[:, i, j] = win.sum(axis=(1, 2)) / inside[i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]].sum()
    return out


def batch_norm(x, gamma, beta, mean, var, eps):
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
