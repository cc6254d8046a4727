"""Building blocks of the test networks; each creates its own named weight variables."""

from __future__ import annotations

from .. import nn
from ..expr import var


def conv2d(data, in_channels: int, channels: int, kernel_size, strides=(1, 1), padding=(0, 0), groups: int = 1,
           name: str = "conv", dtype: str = "float32", layout: str = "NCHW"):
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    wshape = (channels, in_channels // groups, kh, kw) if layout == "NCHW" else (kh, kw, in_channels // groups, channels)
    weight = var(f"{name}_weight", shape=wshape, dtype=dtype)
    return nn.conv2d(data, weight, strides=strides, padding=padding, groups=groups, channels=channels,
                     kernel_size=(kh, kw), data_layout=layout, kernel_layout="OIHW" if layout == "NCHW" else "HWIO")


def batch_norm(data, channels: int, name: str, dtype: str = "float32", epsilon: float = 2e-5, axis: int = 1):
    vec = lambda suffix: var(f"{name}_{suffix}", shape=(channels,), dtype=dtype)  # noqa: E731
    return nn.batch_norm(data, vec("gamma"), vec("beta"), vec("moving_mean"), vec("moving_var"),
                         axis=axis, epsilon=epsilon)[0]


def conv_bn_relu(data, in_channels, channels, kernel_size, strides=(1, 1), padding=(0, 0), groups=1, name="conv",
                 dtype="float32", relu=True, layout="NCHW"):
    out = conv2d(data, in_channels, channels, kernel_size, strides, padding, groups, name, dtype, layout)
    out = batch_norm(out, channels, f"{name}_bn", dtype, axis=1 if layout == "NCHW" else 3)
    return nn.relu(out) if relu else out


def dense_add_bias(data, in_units: int, units: int, name: str, dtype: str = "float32"):
    weight = var(f"{name}_weight", shape=(units, in_units), dtype=dtype)
    bias = var(f"{name}_bias", shape=(units,), dtype=dtype)
    return nn.bias_add(nn.dense(data, weight, units), bias, axis=-1)
