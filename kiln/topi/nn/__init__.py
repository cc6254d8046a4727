"""``topi.nn``: generic compute definitions of the neural-network operators."""

from .batch_matmul import batch_matmul  # noqa: F401
from .conv2d import Conv2DShape, conv2d, conv2d_nchw, conv2d_nhwc, conv2d_shape, group_conv2d_nchw  # noqa: F401
from .conv2d_transpose import conv2d_transpose_nchw, dilate  # noqa: F401
from .dense import add_bias, dense, matmul  # noqa: F401
from .depthwise_conv2d import depthwise_conv2d_nchw, depthwise_conv2d_nhwc  # noqa: F401
from .elemwise import clip, gelu, hard_sigmoid, hard_swish, leaky_relu, prelu, relu, softplus  # noqa: F401
from .layer_norm import batch_norm_inference, instance_norm, layer_norm  # noqa: F401
from .pad import mirror_pad, pad  # noqa: F401
from .pooling import adaptive_pool, avg_pool2d, global_pool, max_pool2d, pool2d  # noqa: F401
from .softmax import log_softmax, softmax  # noqa: F401
from ..transform import flatten as batch_flatten  # noqa: F401
