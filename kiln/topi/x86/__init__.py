"""``topi.x86``: vectorized, parallel, register-tiled computes and schedules for x86 CPUs.

Each fast op is a compute + schedule pair taking an optional ``cfg`` mapping of knobs (the
compute records the knobs it used in its op's attrs, so the schedule agrees with it):

    out = topi.x86.conv2d_nchw(data, kernel, strides, padding, dilation, "float32", cfg={"tile_ow": 14})
    s = topi.x86.schedule_conv2d_nchw([out])
"""

from .attention import attention, schedule_attention  # noqa: F401
from .batch_matmul import batch_matmul, schedule_batch_matmul  # noqa: F401
from .conv2d import conv2d_nchw, schedule_conv2d_nchw  # noqa: F401
from .conv2d_nchwc import conv2d_NCHWc, schedule_conv2d_NCHWc  # noqa: F401
from .conv2d_winograd import conv2d_winograd_NCHWc, schedule_conv2d_winograd_NCHWc  # noqa: F401
from .conv2d_nhwc import conv2d_nhwc, schedule_conv2d_nhwc  # noqa: F401
from .conv2d_transpose import conv2d_transpose_nchw, schedule_conv2d_transpose_nchw  # noqa: F401
from .default import (  # noqa: F401
    schedule_adaptive_pool, schedule_concatenate, schedule_injective, schedule_reduce,
)
from .layer_norm import layer_norm, schedule_layer_norm  # noqa: F401
from .pooling import pool2d, schedule_pool  # noqa: F401
from .pooling import schedule_global_pool_NCHWc, schedule_pool_NCHWc  # noqa: F401
from .softmax import log_softmax, schedule_softmax, softmax  # noqa: F401
from .dense import dense, schedule_dense  # noqa: F401
from .depthwise_conv2d import depthwise_conv2d_nchw, schedule_depthwise_conv2d_nchw  # noqa: F401
from .depthwise_conv2d_nchwc import (  # noqa: F401
    depthwise_conv2d_NCHWc, prepack_depthwise_kernel, schedule_depthwise_conv2d_NCHWc,
)
from .expand_depthwise import expand_depthwise_NCHWc, schedule_expand_depthwise_NCHWc  # noqa: F401
