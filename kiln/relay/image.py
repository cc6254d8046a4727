"""``relay.image``: image ops (resize2d)."""

from .op.image import resize2d

__all__ = ["resize2d"]
