"""Train the small CNN of the relay.quantize accuracy test on scikit-learn's load_digits and
save it as digits_cnn.onnx next to this script (the committed file; run this to remake it).

    python tests/relay/qnn/data/train_digits_cnn.py

Net: 8x8 image -> conv3x3(1->8, pad 1) + ReLU -> conv3x3(8->16, stride 2, pad 1) + ReLU ->
flatten (256) -> dense(10). numpy only (im2col convolutions, Adam, 40 epochs, seed 0). The
held-out split is the last 360 images of ``train_test_split(test_size=0.2, random_state=0)``.
"""

from __future__ import annotations

import os

import numpy as np


def data():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype("float32")[:, None]  # N, 1, 8, 8 in [0, 1]
    return train_test_split(x, d.target, test_size=0.2, random_state=0)


def im2col(x, k, stride, pad):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    cols = np.empty((n, c, k, k, oh, ow), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
    return cols.reshape(n, c * k * k, oh * ow), (oh, ow)


def col2im(cols, shape, k, stride, pad):
    n, c, h, w = shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    cols = cols.reshape(n, c, k, k, oh, ow)
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), cols.dtype)
    for i in range(k):
        for j in range(k):
            xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] += cols[:, :, i, j]
    return xp[:, :, pad:pad + h, pad:pad + w]


LAYERS = [("c1", 1, 8, 1), ("c2", 8, 16, 2)]


def forward(p, x):
    cache = []
    for name, cin, cout, stride in LAYERS:
        cols, (oh, ow) = im2col(x, 3, stride, 1)
        z = np.einsum("ok,nkp->nop", p[name + "w"].reshape(cout, -1), cols) + p[name + "b"][None, :, None]
        a = np.maximum(z, 0).reshape(x.shape[0], cout, oh, ow)
        cache.append((x, cols, z))
        x = a
    flat = x.reshape(x.shape[0], -1)
    logits = flat @ p["fw"].T + p["fb"]
    return logits, cache, flat


def train(seed=0, epochs=40, batch=32, lr=2e-3):
    xtr, xte, ytr, yte = data()
    rng = np.random.default_rng(seed)
    p = {}
    for name, cin, cout, _ in LAYERS:
        p[name + "w"] = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (cin * 9))).astype("float32")
        p[name + "b"] = np.zeros(cout, "float32")
    p["fw"] = (rng.standard_normal((10, 256)) * np.sqrt(1 / 256)).astype("float32")
    p["fb"] = np.zeros(10, "float32")
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    t = 0
    for _ in range(epochs):
        order = rng.permutation(len(xtr))
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            x, y = xtr[idx], ytr[idx]
            logits, cache, flat = forward(p, x)
            e = np.exp(logits - logits.max(1, keepdims=True))
            d = e / e.sum(1, keepdims=True)
            d[np.arange(len(y)), y] -= 1
            d /= len(y)
            g = {"fw": d.T @ flat, "fb": d.sum(0)}
            da = (d @ p["fw"]).reshape(len(y), 16, 4, 4)
            for (name, cin, cout, stride), (xin, cols, z) in zip(LAYERS[::-1], cache[::-1]):
                dz = da.reshape(z.shape) * (z > 0)
                g[name + "w"] = np.einsum("nop,nkp->ok", dz, cols).reshape(cout, cin, 3, 3)
                g[name + "b"] = dz.sum((0, 2))
                dcols = np.einsum("ok,nop->nkp", p[name + "w"].reshape(cout, -1), dz)
                da = col2im(dcols, xin.shape, 3, stride, 1)
            t += 1
            for k in p:
                m[k] = 0.9 * m[k] + 0.1 * g[k]
                v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
                p[k] -= (lr * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)).astype("float32")
    acc = (forward(p, xte)[0].argmax(1) == yte).mean()
    return p, acc


def to_onnx(p):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Conv", ["image", "c1w", "c1b"], ["a1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Conv", ["r1", "c2w", "c2b"], ["a2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "digits_cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                              [numpy_helper.from_array(v, k) for k, v in p.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    import onnx

    params, accuracy = train()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits_cnn.onnx")
    onnx.save(to_onnx(params), path)
    print(f"held-out accuracy {accuracy:.4f}; wrote {path}")
