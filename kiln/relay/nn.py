"""``relay.nn``: constructors of the neural-network ops (see relay/op/nn*.py for the OpDefs)."""

from .op.attention import attention
from .op.nn import (batch_flatten, batch_matmul, bias_add, conv2d, conv2d_transpose, dense, leaky_relu, pad,
                    prelu, relu)
from .op.nn_fused import contrib_conv2d_bias_NCHWc, contrib_conv2d_bias_residual_NCHWc, contrib_expand_depthwise_NCHWc
from .op.nn_norm import batch_norm, dropout, dropout_raw, layer_norm, log_softmax, softmax
from .op.nn_pool import adaptive_avg_pool2d, avg_pool2d, global_avg_pool2d, global_max_pool2d, max_pool2d

__all__ = ["conv2d", "conv2d_transpose", "dense", "batch_matmul", "bias_add", "relu", "leaky_relu", "prelu", "pad",
           "batch_flatten", "batch_norm", "layer_norm", "softmax", "log_softmax", "dropout", "dropout_raw",
           "max_pool2d", "avg_pool2d", "global_avg_pool2d", "global_max_pool2d", "adaptive_avg_pool2d",
           "contrib_expand_depthwise_NCHWc", "contrib_conv2d_bias_NCHWc",
           "contrib_conv2d_bias_residual_NCHWc", "attention"]
