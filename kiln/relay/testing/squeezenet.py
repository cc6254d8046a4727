"""SqueezeNet 1.0 and 1.1 (Iandola et al. 2016): fire modules, softmax output."""

from __future__ import annotations

from .. import nn
from ..expr import var
from ..op.transform import concatenate
from .init import create_workload
from .layers import conv2d


def _conv_relu(x, cin, cout, k, name, dtype, strides=(1, 1), padding=(0, 0)):
    weight_out = conv2d(x, cin, cout, k, strides, padding, name=name, dtype=dtype)
    bias = var(f"{name}_bias", shape=(cout,), dtype=dtype)
    return nn.relu(nn.bias_add(weight_out, bias))


def _fire(x, cin, squeeze, expand, name, dtype):
    s = _conv_relu(x, cin, squeeze, 1, f"{name}_squeeze", dtype)
    e1 = _conv_relu(s, squeeze, expand, 1, f"{name}_expand1x1", dtype)
    e3 = _conv_relu(s, squeeze, expand, 3, f"{name}_expand3x3", dtype, padding=(1, 1))
    return concatenate([e1, e3], axis=1), 2 * expand


def get_net(batch_size, image_shape, num_classes, version, dtype):
    if version not in ("1.0", "1.1"):
        raise ValueError(f"squeezenet: version must be '1.0' or '1.1', got {version!r}")
    x = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    pool = lambda t: nn.max_pool2d(t, (3, 3), (2, 2), ceil_mode=True)  # noqa: E731
    if version == "1.0":
        x, c = _conv_relu(x, image_shape[0], 96, 7, "conv1", dtype, (2, 2)), 96
        plan = [pool, (16, 64), (16, 64), (32, 128), pool, (32, 128), (48, 192), (48, 192), (64, 256), pool, (64, 256)]
    else:
        x, c = _conv_relu(x, image_shape[0], 64, 3, "conv1", dtype, (2, 2)), 64
        plan = [pool, (16, 64), (16, 64), pool, (32, 128), (32, 128), pool, (48, 192), (48, 192), (64, 256), (64, 256)]
    fire = 0
    for step in plan:
        if callable(step):
            x = step(x)
        else:
            fire += 1
            x, c = _fire(x, c, step[0], step[1], f"fire{fire}", dtype)
    x = nn.dropout(x, 0.5)
    x = _conv_relu(x, c, num_classes, 1, "conv_final", dtype)
    return nn.softmax(nn.batch_flatten(nn.global_avg_pool2d(x)))


def get_workload(batch_size=1, num_classes=1000, version="1.0", image_shape=(3, 224, 224), dtype="float32"):
    """``(mod, params)`` of SqueezeNet ``version`` ("1.0" or "1.1") with initialized weights."""
    return create_workload(get_net(batch_size, tuple(image_shape), num_classes, version, dtype))
