"""kiln's own tunable templates, written with te (the topi ones register themselves in
kiln.topi). Importing this package registers them:

- ``kiln/matmul`` (M, N, K, dtype): C = A @ B with B packed into column panels, register tiles
  of mr x nr, unrolled k, parallel outer tiles.
- ``kiln/conv2d_nchw`` (N, C, H, W, F, KH, KW, stride, pad, dtype): direct convolution with
  register tiles over output channels x output columns.
- ``conv2d_nchw.x86`` and ``dense_nopack.x86``: kiln.topi's x86 operators with topi's knobs
  (what ``extract_from_program`` returns for nn.conv2d / nn.dense on CPU targets).
"""

from .conv2d import conv2d_nchw  # noqa: F401
from .matmul import matmul  # noqa: F401
from .topi_x86 import conv2d_nchw as topi_conv2d_nchw, dense as topi_dense  # noqa: F401
