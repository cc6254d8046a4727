"""Detection operators: non-maximum suppression."""

from .nms import non_max_suppression

__all__ = ["non_max_suppression"]
