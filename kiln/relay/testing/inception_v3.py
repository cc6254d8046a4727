"""Inception v3 (Szegedy et al. 2015) on 299x299 inputs, softmax output."""

from __future__ import annotations

from .. import nn
from ..expr import var
from ..op.transform import concatenate
from .init import create_workload
from .layers import conv_bn_relu, dense_add_bias


class _Net:
    """Tracks channel counts so each conv knows its input width."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.n = 0

    def conv(self, x, cin, cout, kernel, strides=(1, 1), padding=(0, 0)):
        self.n += 1
        return conv_bn_relu(x, cin, cout, kernel, strides, padding, name=f"conv{self.n}", dtype=self.dtype), cout

    def chain(self, x, cin, steps):
        for cout, kernel, strides, padding in steps:
            x, cin = self.conv(x, cin, cout, kernel, strides, padding)
        return x, cin


def _cat(branches):
    return concatenate([b for b, _ in branches], axis=1), sum(c for _, c in branches)


def _avg_branch(net, x, cin, cout):
    pooled = nn.avg_pool2d(x, (3, 3), (1, 1), padding=(1, 1), count_include_pad=True)
    return net.conv(pooled, cin, cout, 1)


def _block_a(net, x, cin, pool_features):
    return _cat([net.conv(x, cin, 64, 1),
                 net.chain(x, cin, [(48, 1, 1, 0), (64, 5, 1, 2)]),
                 net.chain(x, cin, [(64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 1, 1)]),
                 _avg_branch(net, x, cin, pool_features)])


def _block_b(net, x, cin):
    return _cat([net.conv(x, cin, 384, 3, (2, 2)),
                 net.chain(x, cin, [(64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 2, 0)]),
                 (nn.max_pool2d(x, (3, 3), (2, 2)), cin)])


def _block_c(net, x, cin, c7):
    one_by_seven, seven_by_one = ((1, 7), 1, (0, 3)), ((7, 1), 1, (3, 0))
    return _cat([net.conv(x, cin, 192, 1),
                 net.chain(x, cin, [(c7, 1, 1, 0), (c7, *one_by_seven), (192, *seven_by_one)]),
                 net.chain(x, cin, [(c7, 1, 1, 0), (c7, *seven_by_one), (c7, *one_by_seven), (c7, *seven_by_one),
                                    (192, *one_by_seven)]),
                 _avg_branch(net, x, cin, 192)])


def _block_d(net, x, cin):
    return _cat([net.chain(x, cin, [(192, 1, 1, 0), (320, 3, 2, 0)]),
                 net.chain(x, cin, [(192, 1, 1, 0), (192, (1, 7), 1, (0, 3)), (192, (7, 1), 1, (3, 0)),
                                    (192, 3, 2, 0)]),
                 (nn.max_pool2d(x, (3, 3), (2, 2)), cin)])


def _block_e(net, x, cin):
    def fork(t, c):
        return _cat([net.conv(t, c, 384, (1, 3), padding=(0, 1)), net.conv(t, c, 384, (3, 1), padding=(1, 0))])

    b3, c3 = net.conv(x, cin, 384, 1)
    dbl, cd = net.chain(x, cin, [(448, 1, 1, 0), (384, 3, 1, 1)])
    return _cat([net.conv(x, cin, 320, 1), fork(b3, c3), fork(dbl, cd), _avg_branch(net, x, cin, 192)])


def get_net(batch_size, num_classes, image_shape, dtype):
    net = _Net(dtype)
    x = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    x, c = net.chain(x, image_shape[0], [(32, 3, 2, 0), (32, 3, 1, 0), (64, 3, 1, 1)])
    x = nn.max_pool2d(x, (3, 3), (2, 2))
    x, c = net.chain(x, c, [(80, 1, 1, 0), (192, 3, 1, 0)])
    x = nn.max_pool2d(x, (3, 3), (2, 2))
    for pool_features in (32, 64, 64):
        x, c = _block_a(net, x, c, pool_features)
    x, c = _block_b(net, x, c)
    for c7 in (128, 160, 160, 192):
        x, c = _block_c(net, x, c, c7)
    x, c = _block_d(net, x, c)
    x, c = _block_e(net, x, c)
    x, c = _block_e(net, x, c)
    x = nn.batch_flatten(nn.dropout(nn.global_avg_pool2d(x), 0.2))
    return nn.softmax(dense_add_bias(x, c, num_classes, "fc1", dtype))


def get_workload(batch_size=1, num_classes=1000, image_shape=(3, 299, 299), dtype="float32"):
    """``(mod, params)`` of Inception v3 with initialized weights."""
    return create_workload(get_net(batch_size, num_classes, tuple(image_shape), dtype))
