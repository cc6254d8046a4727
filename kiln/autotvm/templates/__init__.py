"""kiln's own tunable templates, written with te (the topi ones register themselves in
kiln.topi). Importing this package registers them:

- ``kiln/matmul`` (M, N, K, dtype): C = A @ B with B packed into column panels, register tiles
  of mr x nr, unrolled k, parallel outer tiles.
- ``kiln/conv2d_nchw`` (N, C, H, W, F, KH, KW, stride, pad, dtype): direct convolution with
  register tiles over output channels x output columns.
- ``conv2d_nchw``, ``depthwise_conv2d_nchw``, ``conv2d_nhwc``, ``dense_nopack``, ``batch_matmul``,
  each ``.x86`` and ``.arm_cpu``: kiln.topi's CPU operators with topi's knobs (what
  ``extract_from_program`` returns for nn.conv2d / nn.dense / nn.batch_matmul).
- the same ops ``.gpu`` and ``.mali`` (topi_gpu.py): kiln.topi's GPU kernels with TVM's GPU
  knobs (``tile_f``, ``tile_y``, ``tile_x``, ``tile_rc``, ...), for OpenCL targets.
- ``conv2d_NCHW4c.adreno``, ``depthwise_conv2d_NCHW4c.adreno`` (adreno.py): the NCHW4c convs of
  adreno graphs at opt_level 3 (textures), knobs for their work-items' tiles and unrolling.
- ``dense_tensorcore.cuda``, ``batch_matmul_tensorcore.cuda`` (topi_cuda.py): float16 products on
  tensor cores, knobs for warps per block, tiles per warp and the k step.
"""

from .conv2d import conv2d_nchw  # noqa: F401
from .matmul import matmul  # noqa: F401
from .topi_cpu import ARM_CPU, X86  # noqa: F401
from . import int8_cpu  # noqa: F401  (the CPU int8 kernels of qnn graphs)
from .topi_gpu import GPU, MALI  # noqa: F401
from . import adreno  # noqa: F401
from .topi_cuda import batch_matmul_tensorcore, dense_tensorcore  # noqa: F401

topi_conv2d_nchw, topi_dense = X86["conv2d_nchw"], X86["dense"]
