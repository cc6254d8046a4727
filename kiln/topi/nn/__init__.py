"""``topi.nn``: generic compute definitions of the neural-network operators."""

from .conv2d import Conv2DShape, conv2d, conv2d_nchw, conv2d_nhwc, conv2d_shape, group_conv2d_nchw  # noqa: F401
from .pad import mirror_pad, pad  # noqa: F401
