"""Detection operators: non-maximum suppression, RoiAlign, deformable convolution."""

from .deform_conv import deform_conv2d
from .nms import non_max_suppression
from .roi_align import roi_align

__all__ = ["deform_conv2d", "non_max_suppression", "roi_align"]
