"""Document 002's model: Keras' ResNet-50 (``keras.applications.ResNet50``, channels last,
224x224, 1000 classes), written as Keras 2 saves it (tests/relay/frontend/keras_h5.py) with
random weights -- same layers, names and shapes, nothing downloaded.

``python tests/driver/keras_resnet50.py resnet50.h5`` writes it (about 100 MB)."""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "relay", "frontend"))
import keras_h5 as K  # noqa: E402


def resnet50_h5(path: str, image: int = 224, classes: int = 1000, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    g = K.Graph((image, image, 3))

    def conv(name, src, cin, cout, k, stride=1, padding="valid"):
        kernel = (rng.standard_normal((k, k, cin, cout)) * np.sqrt(2.0 / (k * k * cin))).astype("float32")
        bias = (rng.standard_normal(cout) * 0.01).astype("float32")
        return g.add("Conv2D", name, src, [("kernel", kernel), ("bias", bias)], filters=cout,
                     kernel_size=[k, k], strides=[stride, stride], padding=padding, data_format="channels_last",
                     dilation_rate=[1, 1], activation="linear", use_bias=True)

    def bn(name, src, c):
        w = [("gamma", rng.uniform(0.5, 1.0, c)), ("beta", rng.uniform(-0.1, 0.1, c)),
             ("moving_mean", rng.uniform(-0.1, 0.1, c)), ("moving_variance", rng.uniform(0.8, 1.2, c))]
        return g.add("BatchNormalization", name, src, [(n, v.astype("float32")) for n, v in w], axis=[3],
                     epsilon=1.001e-5, center=True, scale=True)

    x = g.add("ZeroPadding2D", "conv1_pad", "input_1", padding=[[3, 3], [3, 3]], data_format="channels_last")
    x = bn("conv1_bn", conv("conv1_conv", x, 3, 64, 7, 2), 64)
    x = g.add("Activation", "conv1_relu", x, activation="relu")
    x = g.add("ZeroPadding2D", "pool1_pad", x, padding=[[1, 1], [1, 1]], data_format="channels_last")
    x = g.add("MaxPooling2D", "pool1_pool", x, pool_size=[3, 3], strides=[2, 2], padding="valid",
              data_format="channels_last")
    cin = 64
    for stage, (filters, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], 2):
        for b in range(1, blocks + 1):
            p, s = f"conv{stage}_block{b}", (stride if b == 1 else 1)
            if b == 1:
                short = bn(p + "_0_bn", conv(p + "_0_conv", x, cin, 4 * filters, 1, s), 4 * filters)
            else:
                short = x
            y = bn(p + "_1_bn", conv(p + "_1_conv", x, cin, filters, 1, s), filters)
            y = g.add("Activation", p + "_1_relu", y, activation="relu")
            y = bn(p + "_2_bn", conv(p + "_2_conv", y, filters, filters, 3, padding="same"), filters)
            y = g.add("Activation", p + "_2_relu", y, activation="relu")
            y = bn(p + "_3_bn", conv(p + "_3_conv", y, filters, 4 * filters, 1), 4 * filters)
            x = g.add("Activation", p + "_out", g.add("Add", p + "_add", [short, y]), activation="relu")
            cin = 4 * filters
    x = g.add("GlobalAveragePooling2D", "avg_pool", x, data_format="channels_last")
    dk = (rng.standard_normal((cin, classes)) / np.sqrt(cin)).astype("float32")
    x = g.add("Dense", "predictions", x, [("kernel", dk), ("bias", np.zeros(classes, "float32"))], units=classes,
              activation="softmax", use_bias=True)
    g.save(path, x)
    return path


if __name__ == "__main__":
    resnet50_h5(sys.argv[1])
