"""from_keras on .h5 files: ones written here with h5py in the layout Keras 2 saves, checked
against an independent numpy implementation of the layers (keras_h5.py), and, where Keras 3
and torch are installed (the `frontends` extra), one saved by Keras itself and checked against
its predict(); rtol/atol 1e-4. TensorFlow is never needed."""

import numpy as np
import pytest

pytest.importorskip("h5py", reason="the Keras frontend reads .h5 files with h5py (pip install h5py)")

import keras_h5 as K  # noqa: E402
from frontend_run import run_built, run_reference  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)


def _conv(g, rng, name, src, cin, cout, k, stride=1, padding="same", bias=True, act="linear"):
    kernel = (rng.standard_normal((k, k, cin, cout)) / np.sqrt(k * k * cin)).astype("float32")
    weights = [("kernel", kernel)] + ([("bias", rng.standard_normal(cout).astype("float32") * 0.1)] if bias else [])
    cfg = dict(filters=cout, kernel_size=[k, k], strides=[stride, stride], padding=padding,
               data_format="channels_last", dilation_rate=[1, 1], activation=act, use_bias=bias)
    return g.add("Conv2D", name, src, weights, **cfg), (kernel, weights[1][1] if bias else None, cfg)


def _bn(g, rng, name, src, c):
    w = [("gamma", rng.uniform(0.5, 1.5, c)), ("beta", rng.uniform(-0.1, 0.1, c)),
         ("moving_mean", rng.uniform(-0.1, 0.1, c)), ("moving_variance", rng.uniform(0.5, 1.5, c))]
    w = [(n, v.astype("float32")) for n, v in w]
    return g.add("BatchNormalization", name, src, w, axis=[3], epsilon=1.001e-5, center=True, scale=True), \
        [v for _, v in w]


def resnet_like(path, seed=0, image=32, classes=10):
    """ZeroPadding -> 7x7/2 conv -> BN -> relu -> pad + 3x3/2 max pool -> two residual blocks
    (one downsampling with a 1x1 conv) -> global average pool -> dense softmax. Returns the
    numpy forward function."""
    rng = np.random.default_rng(seed)
    g = K.Graph((image, image, 3))
    ops = []
    x = g.add("ZeroPadding2D", "pad1", "input_1", padding=[[3, 3], [3, 3]], data_format="channels_last")
    x, c1 = _conv(g, rng, "conv1", x, 3, 8, 7, 2, "valid")
    x, b1 = _bn(g, rng, "bn1", x, 8)
    x = g.add("Activation", "relu1", x, activation="relu")
    x = g.add("ZeroPadding2D", "pad2", x, padding=[[1, 1], [1, 1]], data_format="channels_last")
    x = g.add("MaxPooling2D", "pool1", x, pool_size=[3, 3], strides=[2, 2], padding="valid",
              data_format="channels_last")
    ops += [("pad", 3), ("conv", c1), ("bn", b1), ("relu",), ("pad", 1), ("maxpool", dict(pool_size=(3, 3),
                                                                                           strides=(2, 2)))]
    blocks = []
    cin = 8
    for i, (cout, stride) in enumerate([(8, 1), (16, 2)]):
        p = f"b{i}"
        y, ca = _conv(g, rng, p + "_conv_a", x, cin, cout, 3, stride, bias=False)
        y, ba = _bn(g, rng, p + "_bn_a", y, cout)
        y = g.add("ReLU", p + "_relu_a", y)
        y, cb = _conv(g, rng, p + "_conv_b", y, cout, cout, 3)
        y, bb = _bn(g, rng, p + "_bn_b", y, cout)
        short, cs = (x, None)
        if stride != 1 or cin != cout:
            short, cs = _conv(g, rng, p + "_short", x, cin, cout, 1, stride, "valid")
        x = g.add("Add", p + "_add", [y, short])
        x = g.add("Activation", p + "_out", x, activation="relu")
        blocks.append((ca, ba, cb, bb, cs))
        cin = cout
    x = g.add("GlobalAveragePooling2D", "gap", x, data_format="channels_last")
    dk = rng.standard_normal((cin, classes)).astype("float32") * 0.3
    db = rng.standard_normal(classes).astype("float32") * 0.1
    x = g.add("Dense", "fc", x, [("kernel", dk), ("bias", db)], units=classes, activation="softmax", use_bias=True)
    g.save(path, x)

    def forward(inp):
        h = np.pad(inp.astype("float64"), ((0, 0), (3, 3), (3, 3), (0, 0)))
        h = K.conv2d(h, *c1)
        h = np.maximum(K.batch_norm(h, *b1, 1.001e-5), 0)
        h = K.pool(np.pad(h, ((0, 0), (1, 1), (1, 1), (0, 0))), dict(pool_size=(3, 3), strides=(2, 2)), "max")
        for ca, ba, cb, bb, cs in blocks:
            y = np.maximum(K.batch_norm(K.conv2d(h, *ca), *ba, 1.001e-5), 0)
            y = K.batch_norm(K.conv2d(y, *cb), *bb, 1.001e-5)
            h = np.maximum(y + (K.conv2d(h, *cs) if cs else h), 0)
        return K.softmax(h.mean(axis=(1, 2)) @ dk + db)
    return forward


def mobilenet_like(path, seed=1, image=16):
    """MobileNetV2 pieces: conv/BN/ReLU6 stem, an inverted residual (1x1 expand, depthwise 3x3,
    1x1 project, Add), a strided depthwise block, Concatenate, 'same' average pooling, Reshape,
    Flatten, Dropout, Dense and a Softmax layer."""
    rng = np.random.default_rng(seed)
    g = K.Graph((image, image, 3), name="images")
    x, c0 = _conv(g, rng, "stem", "images", 3, 8, 3, 2, bias=False)
    x, b0 = _bn(g, rng, "stem_bn", x, 8)
    x = g.add("ReLU", "stem_relu", x, max_value=6.0)
    e, c1 = _conv(g, rng, "expand", x, 8, 16, 1, bias=False)
    e = g.add("ReLU", "expand_relu", e, max_value=6.0)
    dwk = rng.standard_normal((3, 3, 16, 1)).astype("float32") * 0.3
    dwb = rng.standard_normal(16).astype("float32") * 0.1
    e = g.add("DepthwiseConv2D", "dw", e, [("depthwise_kernel", dwk), ("bias", dwb)], kernel_size=[3, 3],
              strides=[1, 1], padding="same", depth_multiplier=1, data_format="channels_last",
              dilation_rate=[1, 1], activation="relu6", use_bias=True)
    p, c2 = _conv(g, rng, "project", e, 16, 8, 1, bias=False)
    p, b2 = _bn(g, rng, "project_bn", p, 8)
    x = g.add("Add", "res_add", [x, p])
    dwk2 = rng.standard_normal((3, 3, 8, 2)).astype("float32") * 0.3
    d2 = g.add("DepthwiseConv2D", "dw2", x, [("depthwise_kernel", dwk2)], kernel_size=[3, 3], strides=[2, 2],
               padding="same", depth_multiplier=2, data_format="channels_last", dilation_rate=[1, 1],
               activation="linear", use_bias=False)
    a = g.add("AveragePooling2D", "avg", x, pool_size=[3, 3], strides=[2, 2], padding="same",
              data_format="channels_last")
    x = g.add("Concatenate", "cat", [d2, a], axis=-1)                        # (4, 4, 24)
    x = g.add("Reshape", "reshape", x, target_shape=[16, 24])
    x = g.add("Flatten", "flat", x, data_format="channels_last")
    x = g.add("Dropout", "drop", x, rate=0.2)
    dk = rng.standard_normal((384, 5)).astype("float32") * 0.1
    x = g.add("Dense", "logits", x, [("kernel", dk)], units=5, activation="linear", use_bias=False)
    x = g.add("Softmax", "prob", x, axis=-1)
    g.save(path, x)

    def forward(inp):
        h = np.clip(K.batch_norm(K.conv2d(inp.astype("float64"), *c0), *b0, 1.001e-5), 0, 6)
        y = np.clip(K.conv2d(h, *c1), 0, 6)
        y = np.clip(K.depthwise(y, dwk, dwb, dict(padding="same")), 0, 6)
        h = h + K.batch_norm(K.conv2d(y, *c2), *b2, 1.001e-5)
        d = K.depthwise(h, dwk2, None, dict(padding="same", strides=(2, 2)))
        a = K.pool(h, dict(pool_size=(3, 3), strides=(2, 2), padding="same"), "avg")
        flat = np.concatenate([d, a], axis=-1).reshape(inp.shape[0], -1)
        return K.softmax(flat @ dk)
    return forward


def test_resnet_like_matches_numpy_keras(tmp_path):
    forward = resnet_like(tmp_path / "resnet.h5")
    x = np.random.default_rng(5).random((2, 32, 32, 3), dtype="float32")
    mod, params = relay.frontend.from_keras(str(tmp_path / "resnet.h5"), {"input_1": x.shape}, layout="NHWC")
    want = forward(x)
    np.testing.assert_allclose(run_reference(mod, params, {"input_1": x})[0], want, **TOL)
    np.testing.assert_allclose(run_built(mod, params, {"input_1": x})[0], want, **TOL)


def test_nchw_layout_takes_nchw_input(tmp_path):
    forward = resnet_like(tmp_path / "resnet.h5", seed=3)
    x = np.random.default_rng(6).random((1, 32, 32, 3), dtype="float32")
    mod, params = relay.frontend.from_keras(str(tmp_path / "resnet.h5"))  # TVM's default: NCHW, shape from the file
    (inp,) = mod["main"].params
    assert inp.checked_type.shape == (1, 3, 32, 32)
    got = run_reference(mod, params, {"input_1": x.transpose(0, 3, 1, 2).copy()})[0]
    np.testing.assert_allclose(got, forward(x), **TOL)


def test_mobilenet_like_matches_numpy_keras(tmp_path):
    forward = mobilenet_like(tmp_path / "mobilenet.h5")
    x = np.random.default_rng(7).standard_normal((1, 16, 16, 3)).astype("float32")
    mod, params = relay.frontend.from_keras(str(tmp_path / "mobilenet.h5"), layout="NHWC")
    want = forward(x)
    np.testing.assert_allclose(run_reference(mod, params, {"images": x})[0], want, **TOL)
    np.testing.assert_allclose(run_built(mod, params, {"images": x})[0], want, **TOL)


def test_errors_name_the_problem(tmp_path):
    import h5py
    with pytest.raises(tvm.KilnError, match="is not a readable HDF5 file"):
        (tmp_path / "x.h5").write_bytes(b"nope")
        relay.frontend.from_keras(str(tmp_path / "x.h5"))
    with h5py.File(tmp_path / "w.h5", "w") as f:
        f.attrs["layer_names"] = []
    with pytest.raises(tvm.KilnError, match="no model_config attribute"):
        relay.frontend.from_keras(str(tmp_path / "w.h5"))
    g = K.Graph((4, 4, 3))
    g.add("Conv3D", "c3", "input_1")
    g.add("LSTM", "l", "c3")
    g.save(tmp_path / "u.h5", "l")
    with pytest.raises(tvm.KilnError, match=r"2 unsupported layer type\(s\):\n  Conv3D: c3\n  LSTM: l"):
        relay.frontend.from_keras(str(tmp_path / "u.h5"))
    g = K.Graph((None, None, 3))
    g.add("Activation", "a", "input_1", activation="relu")
    g.save(tmp_path / "d.h5", "a")
    with pytest.raises(tvm.KilnError, match=r"input 'input_1' has shape \[None, None, None, 3\]; pass shape="):
        relay.frontend.from_keras(str(tmp_path / "d.h5"))
    g = K.Graph((4, 4, 3))
    g.add("Activation", "a", "input_1", activation="mish")
    g.save(tmp_path / "m.h5", "a")
    with pytest.raises(tvm.KilnError, match=r"layer 'a' \(Activation\): activation 'mish' is not supported"):
        relay.frontend.from_keras(str(tmp_path / "m.h5"))


def _real_keras():
    """Keras 3 on its torch backend, when both are installed (the `frontends` extra plus keras)."""
    import os
    os.environ.setdefault("KERAS_BACKEND", "torch")
    pytest.importorskip("torch", reason="real-Keras checks run Keras 3 on its torch backend (pip install torch)")
    return pytest.importorskip("keras", reason="real-Keras checks need keras (pip install keras)")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_h5_saved_by_keras_matches_keras(tmp_path):
    """A ResNet/MobileNet-like model built and saved by Keras itself (its legacy .h5 writer, Keras 3
    spelling of connections and weight names), against Keras' own predict()."""
    keras = _real_keras()
    L = keras.layers
    inp = keras.Input((32, 32, 3), name="image")
    x = L.ZeroPadding2D(3)(inp)
    x = L.Conv2D(8, 7, strides=2, use_bias=False)(x)
    x = L.BatchNormalization(epsilon=1.001e-5)(x)
    x = L.Activation("relu")(x)
    x = L.ZeroPadding2D(1)(x)
    x = L.MaxPooling2D(3, strides=2)(x)
    y = L.Conv2D(8, 3, padding="same")(x)
    y = L.BatchNormalization()(y)
    y = L.ReLU(max_value=6.0)(y)
    y = L.DepthwiseConv2D(3, padding="same", depth_multiplier=2, activation="relu6")(y)
    y = L.Conv2D(8, 1)(y)
    x = L.ReLU()(L.Add()([x, y]))
    z = L.Conv2D(16, 3, strides=2, padding="same")(x)
    p = L.AveragePooling2D(2, padding="same")(x)
    x = L.Concatenate()([z, p])
    g = L.GlobalAveragePooling2D()(x)
    f = L.Dropout(0.3)(L.Flatten()(L.Reshape((4, 4, 24))(L.AveragePooling2D(1)(x))))
    x = L.Concatenate()([g, f])
    out = L.Softmax()(L.Dense(10)(x))
    model = keras.Model(inp, out)
    rng = np.random.default_rng(0)
    for w in model.weights:
        kind = w.path.split("/")[-1]
        value = rng.uniform(0.5, 1.5, w.shape) if kind in ("moving_variance", "gamma") else \
            rng.standard_normal(w.shape) * (0.1 if kind in ("beta", "moving_mean", "bias") else 0.3)
        w.assign(value.astype("float32"))
    path = str(tmp_path / "keras_model.h5")
    model.save(path)
    x = rng.random((2, 32, 32, 3)).astype("float32")
    want = np.asarray(model.predict(x, verbose=0))
    mod, params = relay.frontend.from_keras(path, {"image": x.shape}, layout="NHWC")
    np.testing.assert_allclose(run_reference(mod, params, {"image": x})[0], want, **TOL)
    np.testing.assert_allclose(run_built(mod, params, {"image": x})[0], want, **TOL)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_keras_archive_matches_keras(tmp_path):
    """The Keras 3 native format (.keras zip: config.json + positional weights) loads too."""
    keras = _real_keras()
    L = keras.layers
    inp = keras.Input((12, 12, 3), name="x")
    y = L.Conv2D(6, 3, strides=2, padding="same", activation="relu")(inp)
    y = L.BatchNormalization(scale=False)(y)
    y = L.DepthwiseConv2D(3, padding="same", depth_multiplier=2)(y)
    y = L.GlobalAveragePooling2D()(y)
    model = keras.Model(inp, L.Dense(4, activation="softmax")(y))
    rng = np.random.default_rng(1)
    for w in model.weights:
        kind = w.path.split("/")[-1]
        value = rng.uniform(0.5, 1.5, w.shape) if kind == "moving_variance" else rng.standard_normal(w.shape) * 0.3
        w.assign(value.astype("float32"))
    path = str(tmp_path / "model.keras")
    model.save(path)
    x = rng.random((1, 12, 12, 3)).astype("float32")
    mod, params = relay.frontend.from_keras(path, layout="NHWC")
    np.testing.assert_allclose(run_reference(mod, params, {"x": x})[0], np.asarray(model.predict(x, verbose=0)), **TOL)


def test_sequential_model(tmp_path):
    """A Sequential model (Keras 2 layout: layers chained, the first carries batch_input_shape)."""
    import json

    import h5py
    rng = np.random.default_rng(4)
    k1, b1 = rng.standard_normal((48, 6)).astype("float32"), rng.standard_normal(6).astype("float32")
    k2 = rng.standard_normal((6, 3)).astype("float32")
    layers = [{"class_name": "Flatten", "config": {"name": "flat", "batch_input_shape": [None, 4, 4, 3]}},
              {"class_name": "Dense", "config": {"name": "d1", "units": 6, "activation": "tanh", "use_bias": True}},
              {"class_name": "Dense", "config": {"name": "d2", "units": 3, "activation": "sigmoid",
                                                 "use_bias": False}}]
    weights = {"flat": [], "d1": [("kernel", k1), ("bias", b1)], "d2": [("kernel", k2)]}
    with h5py.File(tmp_path / "seq.h5", "w") as f:
        f.attrs["model_config"] = json.dumps({"class_name": "Sequential",
                                              "config": {"name": "seq", "layers": layers}}).encode()
        g = f.create_group("model_weights")
        g.attrs["layer_names"] = [n.encode() for n in weights]
        for n, pairs in weights.items():
            lg = g.create_group(n)
            lg.attrs["weight_names"] = [f"{n}/{w}:0".encode() for w, _ in pairs]
            for w, v in pairs:
                lg.create_dataset(f"{n}/{w}:0", data=v)
    x = rng.random((1, 4, 4, 3)).astype("float32")
    mod, params = relay.frontend.from_keras(str(tmp_path / "seq.h5"), layout="NHWC")
    want = 1 / (1 + np.exp(-(np.tanh(x.reshape(1, -1).astype("float64") @ k1 + b1) @ k2)))
    np.testing.assert_allclose(run_reference(mod, params, {"flat_input": x})[0], want, **TOL)


_NP_ACTIVATIONS = {
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh, "swish": lambda x: x / (1 + np.exp(-x)),
    "elu": lambda x: np.where(x > 0, x, np.exp(x) - 1), "exponential": np.exp,
    "hard_sigmoid": lambda x: np.clip(0.2 * x + 0.5, 0, 1),  # Keras 2's definition
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2))),
}


def test_activations_merges_and_other_layers(tmp_path):
    """Every activation name, ReLU's negative_slope/threshold/max_value, LeakyReLU, the merge
    layers, dilated and grouped Conv2D, GlobalMaxPooling2D and keepdims average pooling."""
    rng = np.random.default_rng(8)
    g = K.Graph((6, 6, 4))
    acts = [g.add("Activation", f"act_{name}", "input_1", activation=name) for name in _NP_ACTIVATIONS]
    r1 = g.add("ReLU", "relu_leaky", "input_1", negative_slope=0.1, threshold=0.2, max_value=1.5)
    r2 = g.add("LeakyReLU", "leaky", "input_1", alpha=0.3)
    merged = g.add("Average", "avg", [g.add("Subtract", "sub", [acts[0], acts[1]]),
                                      g.add("Multiply", "mul", [acts[2], acts[3]]),
                                      g.add("Maximum", "max", [acts[4], r1]), g.add("Minimum", "min", [acts[5], r2]),
                                      acts[6]])
    kernel = rng.standard_normal((3, 3, 2, 4)).astype("float32") * 0.3
    conv = g.add("Conv2D", "dil", merged, [("kernel", kernel)], filters=4, kernel_size=[3, 3], strides=[1, 1],
                 padding="same", dilation_rate=[2, 2], groups=2, activation="linear", use_bias=False)
    gmp = g.add("GlobalMaxPooling2D", "gmp", conv)
    gap = g.add("Reshape", "gap_flat", g.add("GlobalAveragePooling2D", "gap", conv, keepdims=True), target_shape=[4])
    g.save(tmp_path / "acts.h5", g.add("Concatenate", "out", [gmp, gap], axis=-1))

    x = rng.standard_normal((1, 6, 6, 4)).astype("float32")
    xd = x.astype("float64")
    a = [f(xd) for f in _NP_ACTIVATIONS.values()]
    relu1 = np.minimum(np.where(xd >= 0.2, xd, 0.1 * (xd - 0.2)), 1.5)
    leaky = np.where(xd > 0, xd, 0.3 * xd)
    m = (a[0] - a[1] + a[2] * a[3] + np.maximum(a[4], relu1) + np.minimum(a[5], leaky) + a[6]) / 5
    xp = np.pad(m, ((0, 0), (2, 2), (2, 2), (0, 0)))
    out = np.zeros((1, 6, 6, 4))
    for grp in range(2):
        for i in range(3):
            for j in range(3):
                win = xp[:, 2 * i:2 * i + 6, 2 * j:2 * j + 6, 2 * grp:2 * grp + 2]
                out[..., 2 * grp:2 * grp + 2] += win @ kernel[i, j][:, 2 * grp:2 * grp + 2]
    want = np.concatenate([out.max(axis=(1, 2)), out.mean(axis=(1, 2))], axis=-1)
    mod, params = relay.frontend.from_keras(str(tmp_path / "acts.h5"), layout="NHWC")
    np.testing.assert_allclose(run_reference(mod, params, {"input_1": x})[0], want, **TOL)
    np.testing.assert_allclose(run_built(mod, params, {"input_1": x})[0], want, **TOL)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_keras3_activation_definitions(tmp_path):
    """Keras 3 changed hard_sigmoid (x/6 + 0.5): a file saved by Keras 3 gets Keras 3's."""
    keras = _real_keras()
    inp = keras.Input((5,), name="v")
    outs = [keras.layers.Activation(a)(inp) for a in ("hard_sigmoid", "gelu", "swish", "elu", "relu6")]
    model = keras.Model(inp, keras.layers.Concatenate()(outs))
    path = str(tmp_path / "acts3.h5")
    model.save(path)
    x = np.linspace(-4, 4, 10, dtype="float32").reshape(2, 5)
    mod, params = relay.frontend.from_keras(path, {"v": x.shape}, layout="NHWC")
    np.testing.assert_allclose(run_reference(mod, params, {"v": x})[0], np.asarray(model.predict(x, verbose=0)),
                               **TOL)
