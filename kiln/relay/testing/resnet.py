"""ResNet (He et al. 2015) for 18/34/50/101/152 layers: conv-bn-relu blocks, softmax output."""

from __future__ import annotations

from .. import nn
from ..expr import var
from .init import create_workload
from .layers import batch_norm, conv_bn_relu, dense_add_bias

_UNITS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


def _block(x, cin, cout, stride, bottleneck, name, dtype):
    if bottleneck:
        mid = cout // 4
        y = conv_bn_relu(x, cin, mid, 1, name=f"{name}_conv1", dtype=dtype)
        y = conv_bn_relu(y, mid, mid, 3, stride, (1, 1), name=f"{name}_conv2", dtype=dtype)
        y = conv_bn_relu(y, mid, cout, 1, name=f"{name}_conv3", dtype=dtype, relu=False)
    else:
        y = conv_bn_relu(x, cin, cout, 3, stride, (1, 1), name=f"{name}_conv1", dtype=dtype)
        y = conv_bn_relu(y, cout, cout, 3, name=f"{name}_conv2", dtype=dtype, padding=(1, 1), relu=False)
    if stride != (1, 1) or cin != cout:
        x = conv_bn_relu(x, cin, cout, 1, stride, name=f"{name}_sc", dtype=dtype, relu=False)
    return nn.relu(y + x)


def get_net(batch_size, num_classes, num_layers, image_shape, dtype="float32"):
    if num_layers not in _UNITS:
        raise ValueError(f"resnet: num_layers must be one of {sorted(_UNITS)}, got {num_layers}")
    bottleneck = num_layers >= 50
    widths = [256, 512, 1024, 2048] if bottleneck else [64, 128, 256, 512]
    data = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    x = batch_norm(data, image_shape[0], "bn_data", dtype)
    x = conv_bn_relu(x, image_shape[0], 64, 7, (2, 2), (3, 3), name="conv0", dtype=dtype)
    x = nn.max_pool2d(x, (3, 3), (2, 2), padding=(1, 1))
    cin = 64
    for stage, (units, cout) in enumerate(zip(_UNITS[num_layers], widths)):
        for unit in range(units):
            stride = (2, 2) if stage > 0 and unit == 0 else (1, 1)
            x = _block(x, cin, cout, stride, bottleneck, f"stage{stage + 1}_unit{unit + 1}", dtype)
            cin = cout
    x = nn.batch_flatten(nn.global_avg_pool2d(x))
    return nn.softmax(dense_add_bias(x, cin, num_classes, "fc1", dtype))


def get_workload(batch_size=1, num_classes=1000, num_layers=18, image_shape=(3, 224, 224), dtype="float32", **kwargs):
    """``(mod, params)`` of a ResNet with initialized weights."""
    return create_workload(get_net(batch_size, num_classes, num_layers, tuple(image_shape), dtype))
