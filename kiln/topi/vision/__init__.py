"""Detection operators: non-maximum suppression, RoiAlign."""

from .nms import non_max_suppression
from .roi_align import roi_align

__all__ = ["non_max_suppression", "roi_align"]
