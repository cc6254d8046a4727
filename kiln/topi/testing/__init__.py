"""numpy references for the topi operators: ``topi.testing.conv2d_nchw_python(a, w, stride, padding)``."""

from .conv import (  # noqa: F401
    conv2d_nchw_python, conv2d_nhwc_python, conv2d_transpose_nchw_python, depthwise_conv2d_nchw_python,
    depthwise_conv2d_nhwc_python, dilate_python,
)
from .nn import (  # noqa: F401
    batch_matmul_python, dense_python, layer_norm_python, log_softmax_python, pool2d_python,
    adaptive_pool_python, softmax_python,
)
from .image import resize2d_python  # noqa: F401
