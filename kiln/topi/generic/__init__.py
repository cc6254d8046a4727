"""``topi.generic``: default schedules that fit any operator (inline, parallel, vectorize)."""

from .default import (  # noqa: F401
    default_schedule, schedule_adaptive_pool, schedule_batch_matmul, schedule_conv2d_nchw, schedule_conv2d_nhwc,
    schedule_conv2d_transpose_nchw, schedule_dense, schedule_depthwise_conv2d_nchw, schedule_depthwise_conv2d_nhwc,
    schedule_extern, schedule_injective, schedule_layer_norm, schedule_pool, schedule_reduce, schedule_softmax,
)
