"""``topi.cuda``: CUDA-only schedules (tensor cores); everything else is ``topi.gpu``'s."""

from .conv2d_tensorcore import conv2d_nchw_tensorcore, schedule_conv2d_nchw_tensorcore  # noqa: F401
from .tensor_intrin import intrin_wmma_gemm, intrin_wmma_load_matrix, intrin_wmma_store_matrix  # noqa: F401
from .tensorcore import (  # noqa: F401
    batch_matmul_tensorcore, conv2d_nhwc_tensorcore, dense_tensorcore, schedule_batch_matmul_tensorcore,
    schedule_conv2d_nhwc_tensorcore, schedule_dense_tensorcore,
)
