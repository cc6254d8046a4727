"""``topi.x86``: vectorized, parallel, register-tiled computes and schedules for x86 CPUs."""

from .conv2d import conv2d_nchw, schedule_conv2d_nchw  # noqa: F401
