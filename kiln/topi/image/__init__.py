"""``topi.image``: resize."""

from .resize import resize2d, upsampling  # noqa: F401
