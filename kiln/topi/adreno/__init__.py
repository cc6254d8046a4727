"""``topi.adreno``: topi.gpu's schedules, with convolutions and pooling reading through textures.

Adreno GPUs read images through a texture cache of their own (4 channels per fetch, borders in
hardware), so here conv2d, depthwise conv2d, pooling and global pooling pack their NCHW inputs
into NCHW4c images and their OIHW weights into OIHW4o images, then read those with
``read_imagef`` (docs/adreno.md). Other operators (elementwise chains, concatenate, dense...)
are topi.gpu's, on buffers. Picked by relay for targets with the key ``adreno``
(``opencl -device=adreno``).
"""

from ..gpu import (  # noqa: F401
    batch_matmul, conv2d_nhwc, conv2d_transpose_nchw, default_schedule, dense, layer_norm, log_softmax, matmul,
    schedule_adaptive_pool, schedule_batch_matmul, schedule_conv2d_nhwc,
    schedule_conv2d_transpose_nchw, schedule_dense, schedule_layer_norm,
    schedule_matmul, schedule_reduce, schedule_resize, schedule_softmax, softmax,
)
from .nchw4c import conv2d_NCHW4c, schedule_injective, schedule_nchw4c  # noqa: F401
from .conv2d import (  # noqa: F401
    conv2d_nchw, depthwise_conv2d_nchw, schedule_conv2d_nchw, schedule_depthwise_conv2d_nchw,
)
from .pooling import global_pool, pool2d, schedule_global_pool, schedule_pool  # noqa: F401
from .texture import PACK_TAG, pack_activation, pack_weight, schedule_packs  # noqa: F401

schedule_elemwise = schedule_broadcast = schedule_concatenate = schedule_injective  # NCHW4c: texels
schedule_conv2d_NCHW4c = schedule_nchw4c
