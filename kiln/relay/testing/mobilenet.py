"""MobileNet v1 (Howard et al. 2017): depthwise-separable conv blocks, softmax output."""

from __future__ import annotations

from .. import nn
from ..expr import var
from .init import create_workload
from .layers import conv_bn_relu, dense_add_bias

# (output channels, stride) of each depthwise-separable block
_BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]


def get_net(batch_size=1, num_classes=1000, image_shape=(3, 224, 224), dtype="float32", alpha=1.0, layout="NCHW"):
    shape = (batch_size, *image_shape) if layout == "NCHW" else (batch_size, image_shape[1], image_shape[2], image_shape[0])
    x = var("data", shape=shape, dtype=dtype)
    width = lambda c: int(c * alpha)  # noqa: E731
    cin = width(32)
    x = conv_bn_relu(x, image_shape[0], cin, 3, (2, 2), (1, 1), name="conv_block_1", dtype=dtype, layout=layout)
    for i, (cout, stride) in enumerate(_BLOCKS):
        name = f"separable_conv_block_{i + 1}"
        x = conv_bn_relu(x, cin, cin, 3, (stride, stride), (1, 1), groups=cin, name=f"{name}_depthwise",
                         dtype=dtype, layout=layout)
        x = conv_bn_relu(x, cin, width(cout), 1, name=f"{name}_pointwise", dtype=dtype, layout=layout)
        cin = width(cout)
    x = nn.batch_flatten(nn.global_avg_pool2d(x, layout=layout))
    return nn.softmax(dense_add_bias(x, cin, num_classes, "fc", dtype))


def get_workload(batch_size=1, num_classes=1000, image_shape=(3, 224, 224), dtype="float32", layout="NCHW"):
    """``(mod, params)`` of MobileNet v1 with initialized weights."""
    return create_workload(get_net(batch_size, num_classes, tuple(image_shape), dtype, layout=layout))
