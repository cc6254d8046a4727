"""VGG (Simonyan & Zisserman 2014), 11/13/16/19 layers, optional batch norm, softmax output."""

from __future__ import annotations

from .. import nn
from ..expr import var
from .init import create_workload
from .layers import batch_norm, conv2d, dense_add_bias

_SPEC = {11: [1, 1, 2, 2, 2], 13: [2, 2, 2, 2, 2], 16: [2, 2, 3, 3, 3], 19: [2, 2, 4, 4, 4]}
_FILTERS = [64, 128, 256, 512, 512]


def get_net(batch_size, image_shape, num_classes, dtype, num_layers=11, batch_norm_=False):
    if num_layers not in _SPEC:
        raise ValueError(f"vgg: num_layers must be one of {sorted(_SPEC)}, got {num_layers}")
    x = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    cin = image_shape[0]
    for stage, (n, cout) in enumerate(zip(_SPEC[num_layers], _FILTERS)):
        for i in range(n):
            name = f"conv{stage + 1}_{i + 1}"
            x = conv2d(x, cin, cout, 3, padding=(1, 1), name=name, dtype=dtype)
            if batch_norm_:
                x = batch_norm(x, cout, f"{name}_bn", dtype)
            x = nn.relu(x)
            cin = cout
        x = nn.max_pool2d(x, (2, 2), (2, 2))
    h, w = image_shape[1] // 32, image_shape[2] // 32
    x = nn.batch_flatten(x)
    x = nn.dropout(nn.relu(dense_add_bias(x, cin * h * w, 4096, "fc6", dtype)), 0.5)
    x = nn.dropout(nn.relu(dense_add_bias(x, 4096, 4096, "fc7", dtype)), 0.5)
    return nn.softmax(dense_add_bias(x, 4096, num_classes, "fc8", dtype))


def get_workload(batch_size=1, num_classes=1000, image_shape=(3, 224, 224), dtype="float32", num_layers=11,
                 batch_norm=False):
    """``(mod, params)`` of a VGG with initialized weights."""
    return create_workload(get_net(batch_size, tuple(image_shape), num_classes, dtype, num_layers, batch_norm))
