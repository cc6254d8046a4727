"""Each relay op (or a small group fused around it) compiled by relay.build and run by the graph
executor, against the numpy reference executor: every entry of the backend's compute table."""

import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay import reference
from kiln.relay.backend.op_impl import OP_IMPLS
from kiln.relay.op import math_ops
from kiln.relay.op.grid_sample import grid_sample
from kiln.relay.op.rnn import rnn_recurrence
from kiln.relay.op.scatter import cumprod, cumsum, gather_nd, scatter_elements, scatter_nd
from kiln.relay.op.sort import topk_indices
from kiln.relay.op.activation import gelu, hardswish
from kiln.relay.op.dynamic import non_max_suppression, nonzero, unique, with_length
from kiln.relay.op.linear_attention import linear_attention
from kiln.relay.op.vision import deform_conv2d, roi_align
from kiln.relay.qnn.avg_pool_int import QAVG_POOL2D as contrib_qavg_pool2d

RNG = np.random.default_rng(1)


def v(name, *shape, dtype="float32"):
    return relay.var(name, shape=shape, dtype=dtype)


def arr(*shape, dtype="float32", low=-2.0, high=2.0):
    if dtype.startswith("int"):
        return RNG.integers(int(low), int(high), size=shape).astype(dtype)
    if dtype == "bool":
        return RNG.random(shape) > 0.5
    return RNG.uniform(low, high, size=shape).astype(dtype)


def c(*shape, scale=0.3):
    return relay.const((RNG.standard_normal(shape) * scale).astype("float32"))


X = v("x", 2, 3, 4, 5)
X_IN = {"x": arr(2, 3, 4, 5)}
Y = v("y", 5)
XY_IN = {**X_IN, "y": arr(5)}
I6 = v("i", 6, dtype="int32")
B3 = v("b", 3)
BMM = v("b", 2, 20, 24)
I3 = v("i", 3, dtype="int64")
J6 = v("j", 6, dtype="int32")
G2 = v("g2", 1, 4, 6, 2)
S5, T5 = v("s", 5, dtype="uint8"), v("t", 5, dtype="uint8")
IMG = v("x", 1, 8, 10, 10)
IMG_IN = {"x": arr(1, 8, 10, 10)}

def _data_dependent_case():
    """Outputs of data-dependent size (bound-sized buffers and counts; with_length cuts one), the
    detection ops, GELU and LinearAttention's recurrence."""
    r, img = relay.round(X), v("im", 1, 8, 10, 10)
    nz, u = nonzero(relay.greater(X, relay.const(0.5))), unique(r, axis=2)
    boxes, scores = v("bx", 1, 12, 4), v("sc", 1, 2, 12)
    nms = non_max_suppression(boxes, scores, relay.const(np.array([0.3], "float32")),
                              relay.const(np.array([0.1], "float32")), 4)
    rois = relay.const(np.array([[1, 1, 6, 8], [0, 2.5, 9, 4]], "float32"))
    offset, mask = v("off", 1, 18, 8, 8), v("msk", 1, 9, 8, 8)
    la = linear_attention(v("lq", 2, 5, 8), v("lk", 2, 5, 4), v("lv", 2, 5, 6), v("ls", 2, 1, 4, 6),
                          v("ld", 2, 5, 4), v("lb", 2, 5, 1), q_heads=2, kv_heads=1, scale=0.5, gating=True,
                          delta=True, decay_per_row=True, beta_per_head=False)
    return relay.Tuple([nz[0], nz[1], with_length(nz[0], nz[1], axis=1), unique(relay.round(X))[0], u[0], u[1],
                        u[2], u[3], u[4], nms[0], nms[1], with_length(nms[0], nms[1]),
                        roi_align(img, rois, relay.const(np.array([0, 0], "int64")), (3, 2), 0.5, 2),
                        roi_align(img, rois, relay.const(np.array([0, 0], "int64")), (2, 2), 1.0, 0, "max", False),
                        deform_conv2d(img, c(4, 8, 3, 3), offset, mask, c(4), pads=(0, 0)),
                        gelu(X), gelu(X, "tanh"), la[0], la[1],
                        hardswish(relay.multiply(X, relay.const(2.5, "float32")))])  # X*2.5 spans both kinks (+-3)


DATA_DEPENDENT_IN = {**X_IN, "im": arr(1, 8, 10, 10), "bx": np.sort(arr(1, 12, 4, low=0, high=9), axis=-1),
                     "sc": arr(1, 2, 12, low=0, high=1), "off": arr(1, 18, 8, 8), "msk": arr(1, 9, 8, 8, low=0, high=1),
                     "lq": arr(2, 5, 8), "lk": arr(2, 5, 4), "lv": arr(2, 5, 6), "ls": arr(2, 1, 4, 6),
                     "ld": arr(2, 5, 4, low=-0.5, high=0), "lb": arr(2, 5, 1, low=0, high=1)}


def _attention_case():
    """nn.attention with a padding mask (1, 1, N), a causal-like one (1, M, N), and none."""
    q, k, w, kk, ww = v("q", 4, 19, 8), v("k", 4, 8, 21), v("w", 4, 21, 16), v("kk", 4, 21, 8), v("ww", 4, 16, 21)
    pad = relay.const(np.where(np.arange(21) < 15, 0.0, -3e38).astype("float32").reshape(1, 1, 21))
    causal = relay.const(np.triu(np.full((19, 21), -3e38, "float32"), 3)[None])
    return relay.Tuple([relay.nn.attention(q, k, w, pad, scale=0.35, key_transposed=True),
                        relay.nn.attention(q, kk, ww, causal, scale=0.5, value_transposed=True),
                        relay.nn.attention(q, kk, w)])


CASES = {
    "unary": (lambda: relay.Tuple([relay.exp(X), relay.log(relay.abs(X) + relay.const(0.1)), relay.sqrt(relay.abs(X)),
                                   relay.rsqrt(relay.abs(X) + relay.const(0.5)), relay.tanh(X), relay.sigmoid(X),
                                   relay.erf(X), relay.sin(X), relay.cos(X), relay.floor(X), relay.ceil(X),
                                   relay.round(X), relay.sign(X), relay.negative(X), relay.reciprocal(X + relay.const(5.0)),
                                   relay.copy(X), relay.nn.relu(X), relay.nn.leaky_relu(X, 0.2), relay.clip(X, -1, 1)]),
              X_IN),
    "binary": (lambda: relay.Tuple([relay.add(X, Y), relay.subtract(X, Y), relay.multiply(X, Y), X / (relay.abs(Y) + relay.const(1.0)),
                                    relay.maximum(X, Y), relay.minimum(X, Y),
                                    relay.power(relay.abs(X), Y),
                                    relay.floor_divide(X, relay.const(0.7)), relay.floor_mod(X, relay.const(0.7)),
                                    relay.mod(X, relay.const(0.7))]),
               XY_IN),
    "compare_logic": (lambda: relay.Tuple([relay.cast(relay.logical_xor(relay.greater(X, Y), relay.less_equal(X, relay.const(0.0))), "float32"),
                                           relay.where(relay.logical_and(relay.greater_equal(X, relay.const(0.0)),
                                                                         relay.not_equal(X, Y)), X, Y),
                                           relay.cast(relay.logical_or(relay.equal(X, X), relay.less(X, X)), "int32"),
                                           relay.cast(relay.logical_not(relay.isnan(X)), "float32")]),
                      XY_IN),
    "int_ops": (lambda: relay.Tuple([relay.divide(I6, relay.const(np.int32(4))),
                                     relay.mod(I6, relay.const(np.int32(4))),
                                     relay.floor_divide(I6, relay.const(np.int32(4))),
                                     relay.floor_mod(I6, relay.const(np.int32(4)))]),
                {"i": np.array([-7, -4, -1, 0, 5, 9], "int32")}),
    "reductions": (lambda: relay.Tuple([relay.sum(X, axis=[1, 3]), relay.max(X, axis=[2], keepdims=True),
                                        relay.min(X), relay.mean(X, axis=[0], exclude=True), relay.prod(X, axis=[3]),
                                        relay.variance(X, axis=[2, 3]),
                                        relay.cast(relay.all(relay.greater(X, relay.const(-1.5)), axis=[1]), "float32"),
                                        relay.cast(relay.any(relay.greater(X, relay.const(1.5)), axis=[1]), "float32"),
                                        relay.cast(relay.argmax(X, axis=[3]), "float32"),
                                        relay.cast(relay.argmin(X, axis=[1], keepdims=True), "float32")]),
                   X_IN),
    "shapes": (lambda: relay.Tuple([relay.reshape(X, (6, -1)), relay.transpose(X, (3, 1, 0, 2)),
                                    relay.squeeze(relay.expand_dims(X, 1), axis=[1]), relay.nn.batch_flatten(X),
                                    relay.broadcast_to(Y, (2, 3, 5)), relay.tile(Y, (2, 2)),
                                    relay.reverse(X, axis=2), relay.concatenate([X, X * relay.const(2.0)], axis=3),
                                    relay.layout_transform(X, "NCHW", "NHWC")]),
               XY_IN),
    "slicing": (lambda: relay.Tuple([relay.strided_slice(X, [0, 1], [2, 3]), relay.strided_slice(X, [3], [0], [-2], axes=[2]),
                                     relay.take(X, I3, axis=3), relay.take(X, relay.const(np.int64(-1)), axis=1),
                                     relay.take(X, I3, axis=1, mode="wrap"),
                                     relay.take(X, relay.const(np.array([[7, -3]], "int32"))),
                                     relay.gather(X, 2, v("g", 2, 3, 2, 5, dtype="int64")),
                                     relay.split(X, [1, 3], axis=2)[2], relay.split(X, 5, axis=3)[4]]),
                {**X_IN, "i": np.array([4, 0, -2], "int64"), "g": arr(2, 3, 2, 5, dtype="int64", low=-4, high=4)}),
    "pad": (lambda: relay.Tuple([relay.nn.pad(X, ((0, 0), (1, 0), (2, 1), (0, 3)), 1.5),
                                 relay.nn.pad(X, ((0, 0), (0, 0), (2, 1), (1, 3)), pad_mode="reflect"),
                                 relay.nn.pad(X, ((0, 1), (0, 0), (2, 1), (1, 3)), pad_mode="edge")]),
            X_IN),
    "conv2d_grouped_dilated": (lambda: relay.nn.conv2d(IMG, c(12, 4, 3, 3), strides=(2, 1), padding=(1, 2, 0, 1),
                                                       dilation=(2, 1), groups=2), IMG_IN),
    "conv2d_depthwise_multiplier": (lambda: relay.nn.relu(relay.nn.conv2d(IMG, c(16, 1, 3, 3), padding=(1, 1), groups=8)),
                                    IMG_IN),
    "conv2d_nhwc": (lambda: relay.nn.conv2d(v("x", 1, 10, 10, 8), c(3, 3, 8, 6), padding=(1, 1), data_layout="NHWC",
                                            kernel_layout="HWIO"), {"x": arr(1, 10, 10, 8)}),
    "conv2d_ohwi_kernel": (lambda: relay.nn.conv2d(IMG, c(6, 3, 3, 8), padding=(1, 1), kernel_layout="OHWI"), IMG_IN),
    "conv2d_variable_weight": (lambda: relay.nn.conv2d(IMG, v("w", 6, 8, 1, 1)), {**IMG_IN, "w": arr(6, 8, 1, 1)}),
    "conv2d_transpose": (lambda: relay.nn.conv2d_transpose(IMG, c(8, 4, 3, 3), strides=(2, 2), padding=(1, 1),
                                                           output_padding=(1, 1)), IMG_IN),
    "expand_depthwise": (lambda: relay.clip(relay.nn.contrib_expand_depthwise_NCHWc(
        v("x", 1, 2, 9, 9, 4), c(3, 2, 1, 1, 4, 8), c(1, 3, 1, 1, 8), c(3, 3, 3, 8), strides=2, act_min=0.0,
        act_max=6.0) + c(1, 3, 1, 1, 8), 0.0, 6.0), {"x": arr(1, 2, 9, 9, 4)}),
    "pooling": (lambda: relay.Tuple([relay.nn.max_pool2d(IMG, (3, 3), (2, 2), padding=(1, 1)),
                                     relay.nn.avg_pool2d(IMG, (2, 2), (2, 2), ceil_mode=True, count_include_pad=True),
                                     relay.nn.avg_pool2d(IMG, (3, 3), (1, 1), padding=(1, 1)),
                                     relay.nn.global_avg_pool2d(IMG), relay.nn.global_max_pool2d(IMG),
                                     relay.nn.adaptive_avg_pool2d(IMG, (3, 2))]), IMG_IN),
    "dense_batch_matmul": (lambda: relay.Tuple([relay.nn.dense(v("a", 20, 24), c(7, 24)),
                                                relay.nn.batch_matmul(BMM, v("d", 2, 9, 24)),
                                                relay.nn.batch_matmul(BMM, v("e", 2, 24, 9), transpose_b=False)]),
                           {"a": arr(20, 24), "b": arr(2, 20, 24), "d": arr(2, 9, 24), "e": arr(2, 24, 9)}),
    "data_dependent_vision": (lambda: _data_dependent_case(), DATA_DEPENDENT_IN),
    "attention": (lambda: _attention_case(), {"q": arr(4, 19, 8), "k": arr(4, 8, 21), "w": arr(4, 21, 16),
                                              "kk": arr(4, 21, 8), "ww": arr(4, 16, 21)}),
    "norms_softmax": (lambda: relay.Tuple([relay.nn.softmax(X, axis=1), relay.nn.log_softmax(X),
                                           relay.nn.softmax(Y),
                                           relay.nn.layer_norm(X, c(5, scale=1.0), c(5), axis=-1, epsilon=1e-5),
                                           relay.nn.bias_add(X, B3), relay.nn.prelu(X, B3)]),
                      {**X_IN, "y": arr(5), "b": arr(3)}),
    "resize": (lambda: relay.Tuple([relay.image.resize2d(IMG, (15, 7), method="linear"),
                                    relay.image.resize2d(IMG, (20, 20), method="nearest_neighbor",
                                                         coordinate_transformation_mode="asymmetric")]), IMG_IN),
    "cast_types": (lambda: relay.Tuple([relay.cast(X, "int32"), relay.cast(relay.cast(X, "float16"), "float32")]), X_IN),
    "index_ops": (lambda: relay.Tuple([
        gather_nd(X, v("gn", 2, 2, dtype="int64")),
        gather_nd(X, v("gb", 2, 3, 1, dtype="int64"), batch_dims=1),
        scatter_nd(X, relay.const(np.array([[1, 2], [0, -1], [1, 0]], "int64")), v("u", 3, 4, 5)),
        scatter_nd(X, v("sd", 4, 1, dtype="int64"), v("w", 4, 3, 4, 5), reduction="add"),
        scatter_elements(X, v("se", 2, 3, 4, 2, dtype="int64"), v("z", 2, 3, 4, 2), axis=3, reduction="max"),
        scatter_elements(X, relay.const(np.array([[[[4, -5]]]], "int64")), v("q", 1, 1, 1, 2), axis=-1),
        cumsum(X, axis=2), cumsum(X, axis=-1, exclusive=True, reverse=True),
        cumprod(X, axis=1), cumprod(X, axis=-1, exclusive=True, reverse=True),
        topk_indices(X, 3, axis=-1), topk_indices(relay.round(X), 2, axis=1, largest=False)]),
        {**X_IN, "gn": np.array([[1, 2], [-1, 0]], "int64"), "gb": arr(2, 3, 1, dtype="int64", low=-3, high=3),
         "u": arr(3, 4, 5), "sd": np.array([[1], [0], [1], [-1]], "int64"), "w": arr(4, 3, 4, 5),
         "se": arr(2, 3, 4, 2, dtype="int64", low=-5, high=5), "z": arr(2, 3, 4, 2), "q": arr(1, 1, 1, 2)}),
    "math_ops": (lambda: relay.Tuple([
        math_ops.tan(X * relay.const(0.5)), math_ops.asin(X * relay.const(0.4)), math_ops.acos(X * relay.const(0.4)),
        math_ops.atan(X), math_ops.sinh(X), math_ops.cosh(X),
        relay.cast(math_ops.isinf(relay.const(np.array([1.0, np.inf, -np.inf, np.nan], "float32"))), "int32"),
        math_ops.bitwise_not(I6), math_ops.bitwise_and(I6, J6), math_ops.bitwise_or(I6, J6),
        math_ops.bitwise_xor(I6, J6), math_ops.left_shift(S5, T5), math_ops.right_shift(S5, T5),
        math_ops.reinterpret(X, "int32"), math_ops.reinterpret(I6, "float32")]),
        {**X_IN, "i": np.array([-7, -4, -1, 0, 5, 9], "int32"), "j": np.array([3, -2, 12, 7, -9, 5], "int32"),
         "s": np.array([1, 200, 17, 255, 3], "uint8"), "t": np.array([1, 3, 0, 8, 9], "uint8")}),
    "qavg_pool2d": (lambda: relay.Tuple([  # Cortex-M's integer qnn.avg_pool2d: even count (ties), odd count
        contrib_qavg_pool2d(v("q", 1, 3, 6, 7, dtype="int8"), pool_size=(2, 2), strides=(2, 2), zi=-3, zo=5),
        contrib_qavg_pool2d(v("u", 1, 2, 5, 5, dtype="uint8"), pool_size=(3, 3), strides=(1, 2), zi=128, zo=120,
                            out_dtype="uint8")]),
        {"q": arr(1, 3, 6, 7, dtype="int8", low=-128, high=128), "u": arr(1, 2, 5, 5, dtype="uint8", low=0, high=256)}),
    "grid_sample": (lambda: relay.Tuple([
        grid_sample(IMG, G2, "linear", "zeros"), grid_sample(IMG, G2, "cubic", "border", align_corners=True),
        grid_sample(IMG, G2, "nearest", "reflection"),
        grid_sample(v("vol", 1, 2, 3, 4, 5), v("g3", 1, 2, 3, 2, 3), "linear", "reflection")]),
        {**IMG_IN, "g2": arr(1, 4, 6, 2, low=-1.6, high=1.6), "vol": arr(1, 2, 3, 4, 5),
         "g3": arr(1, 2, 3, 2, 3, low=-1.6, high=1.6)}),
    "rnn_recurrence": (lambda: relay.Tuple([
        rnn_recurrence(v("xp", 5, 3, 2, 16), c(2, 4, 16), c(2, 16), v("h", 2, 3, 4), v("c", 2, 3, 4),
                       v("n", 3, dtype="int32"), c(2, 12), "lstm", (False, True),
                       (("sigmoid", None, None), ("tanh", None, None), ("tanh", None, None)) * 2, clip=1.5,
                       use_peepholes=True),
        rnn_recurrence(v("xg", 5, 3, 1, 12), c(1, 4, 12), c(1, 12), v("g", 1, 3, 4), c(1, 3, 4),
                       v("m", 3, dtype="int32"), c(1, 12), "gru", (True,),
                       (("hardsigmoid", 0.3, 0.4), ("tanh", None, None)))]),
        {"xp": arr(5, 3, 2, 16), "h": arr(2, 3, 4), "c": arr(2, 3, 4), "n": np.array([5, 2, 0], "int32"),
         "xg": arr(5, 3, 1, 12), "g": arr(1, 3, 4), "m": np.array([1, 5, 3], "int32")}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_ops_match_reference(name):
    make, inputs = CASES[name]
    body = make()
    func = relay.Function(relay.analysis.free_vars(body), body)
    mod = tvm.IRModule.from_expr(func)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    want = reference.run(mod, inputs)
    want = list(want) if isinstance(want, tuple) else [want]
    assert m.get_num_outputs() == len(want)
    for i, w in enumerate(want):
        got = m.get_output(i).numpy()
        assert got.dtype == w.dtype, f"output {i}"
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4, err_msg=f"{name}: output {i}")


def test_inputs_with_one_name_are_rejected():
    a, b = v("x", 3), v("x", 3)
    mod = tvm.IRModule.from_expr(relay.Function([a, b], relay.add(a, b)))
    with pytest.raises(Exception, match="two inputs named 'x'"):
        relay.build(mod, target="llvm")


def test_every_compute_in_the_table_is_exercised():
    """Keep this file in step with op_impl.OP_IMPLS: each op there appears in some case above."""
    import inspect
    source = inspect.getsource(inspect.getmodule(test_ops_match_reference))
    spelled = {"nn.relu": "nn.relu", "image.resize2d": "image.resize2d"}
    missing = [op for op in OP_IMPLS if spelled.get(op, op.split(".")[-1]) + "(" not in source]
    assert not missing, f"ops without a test case: {missing}"


def _contrib_conv2d_int8(x, rng, depthwise=False):
    """qnn.conv2d (per-channel s8 weights) + bias + requantize to u8: what CanonicalizeOps turns
    into nn.contrib_conv2d_int8 / nn.contrib_depthwise_conv2d_int8 on CPUs (relay/qnn/cpu_int8.py)."""
    from kiln.relay import qnn
    c = 8
    w = rng.integers(-127, 128, (c, 1 if depthwise else c, 3, 3)).astype("int8")
    ws = rng.uniform(0.002, 0.01, c).astype("float32")
    y = qnn.op.conv2d(x, relay.const(w), relay.const(37), relay.const(0), relay.const(0.05), relay.const(ws),
                      kernel_size=(3, 3), channels=c, padding=(1, 1), groups=c if depthwise else 1)
    y = relay.nn.bias_add(y, relay.const(rng.integers(-3000, 3000, c).astype("int32")))
    return qnn.op.requantize(y, relay.const(0.05 * ws), relay.const(0), relay.const(0.08), relay.const(11),
                             axis=1, out_dtype="uint8")


def _contrib_depthwise_conv2d_int8(x, rng):
    return _contrib_conv2d_int8(x, rng, depthwise=True)


def _contrib_dense_int8(x, rng):
    """qnn.dense + bias + requantize to s8: nn.contrib_dense_int8 on CPUs."""
    from kiln.relay import qnn
    w = rng.integers(-127, 128, (10, 8 * 5 * 5)).astype("int8")
    d = qnn.op.dense(relay.reshape(x, (1, -1)), relay.const(w), relay.const(11), relay.const(0), relay.const(0.08),
                     relay.const(np.float32(0.004)), units=10)
    d = relay.add(d, relay.const(rng.integers(-500, 500, 10).astype("int32")))
    return qnn.op.requantize(d, relay.const(np.float32(0.08 * 0.004)), relay.const(0), relay.const(0.3),
                             relay.const(-5), out_dtype="int8")


def _contrib_qlinear_add(a, b):
    """qnn.add with onnxruntime's rounding (the ONNX importer's): nn.contrib_qlinear_add."""
    from kiln.relay import qnn
    return qnn.op.add(a, b, relay.const(0.08), relay.const(11), relay.const(0.08), relay.const(11),
                      relay.const(0.11), relay.const(3), rounding="FLOAT32", out_dtype="uint8")


def _contrib_batch_matmul_int8(x, rng):
    """qnn.batch_matmul of two u8 tensors: nn.contrib_batch_matmul_int8 on x86 with VNNI."""
    from kiln.relay import qnn
    y = relay.const(rng.integers(0, 256, (1, 16, 8)).astype("uint8"))
    return qnn.op.batch_matmul(relay.reshape(x, (1, 25, 8)), y, relay.const(5), relay.const(130), relay.const(0.08),
                               relay.const(0.02), transpose_b=True)


def test_int8_kernels_match_the_reference():
    """The CPU int8 kernels the qnn chains become: the same integers as the reference executor."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "qnn"))
    from qnn_run import anchor_ops, reference

    rng = np.random.default_rng(8)
    x = relay.var("x", shape=(1, 8, 5, 5), dtype="uint8")
    conv = _contrib_conv2d_int8(x, rng)
    body = relay.Tuple([_contrib_depthwise_conv2d_int8(conv, rng), _contrib_dense_int8(conv, rng),
                        _contrib_qlinear_add(conv, conv), _contrib_batch_matmul_int8(conv, rng)])
    mod = tvm.IRModule.from_expr(relay.Function([x], body))
    inputs = {"x": rng.integers(0, 256, (1, 8, 5, 5)).astype("uint8")}
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    ops = {name for name, *_ in anchor_ops(lib)}
    assert {"nn.contrib_conv2d_int8", "nn.contrib_depthwise_conv2d_int8", "nn.contrib_dense_int8"} <= ops, ops
    from kiln.topi.x86.conv2d_int8 import int8_tier
    if int8_tier("llvm")[0] == "vnni":
        assert "nn.contrib_batch_matmul_int8" in ops, ops
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    for i, want in enumerate(reference(mod, inputs)):
        np.testing.assert_array_equal(m.get_output(i).numpy(), want, err_msg=f"output {i}")


def _contrib_conv2d_int8_mixed(x, rng):
    """qnn.conv2d with weights ~ N(0, 40) (some 4-channel units fit vpmaddubsw, some not) + bias
    + requantize: nn.contrib_conv2d_int8_mixed on x86 without VNNI."""
    from kiln.relay import qnn
    c = int(x.type_annotation.shape[1])
    w = np.clip(rng.normal(0, 40, (16, c, 1, 1)), -127, 127).astype("int8")
    ws = rng.uniform(0.002, 0.01, 16).astype("float32")
    y = qnn.op.conv2d(x, relay.const(w), relay.const(37), relay.const(0), relay.const(0.05), relay.const(ws),
                      kernel_size=(1, 1), channels=16)
    y = relay.nn.bias_add(y, relay.const(rng.integers(-3000, 3000, 16).astype("int32")))
    return qnn.op.requantize(y, relay.const(0.05 * ws), relay.const(0), relay.const(0.08), relay.const(11),
                             axis=1, out_dtype="uint8")


def test_int8_mixed_conv_matches_the_reference():
    """x86 without VNNI (haswell code): the conv whose weights only partly fit vpmaddubsw, against
    the reference executor."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "qnn"))
    from qnn_run import anchor_ops, reference
    from kiln.target.cpu_facts import why_host_cannot_run

    rng = np.random.default_rng(3)
    x = relay.var("x", shape=(1, 64, 6, 6), dtype="uint8")
    mod = tvm.IRModule.from_expr(relay.Function([x], _contrib_conv2d_int8_mixed(x, rng)))
    target = tvm.target.Target("llvm -mcpu=haswell")
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    assert "nn.contrib_conv2d_int8_mixed" in {name for name, *_ in anchor_ops(lib)}
    if why_host_cannot_run(target):
        pytest.skip(f"haswell code: {why_host_cannot_run(target)}")
    inputs = {"x": rng.integers(0, 256, (1, 64, 6, 6)).astype("uint8")}
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), reference(mod, inputs)[0])


def _run(body, inputs):
    func = relay.Function(relay.analysis.free_vars(body), body)
    lib = relay.build(tvm.IRModule.from_expr(func), target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_integer_power_is_exact_and_keeps_its_dtype(dtype):
    base = RNG.integers(-6 if dtype[0] == "i" else 0, 7, size=40).astype(dtype)
    expo = RNG.integers(0, 13, size=40).astype(dtype)
    base[:3], expo[:3] = 3, (39 if dtype == "int64" else 19, 0, 1)  # 3**39 needs more than float64's 53 bits
    (got,) = _run(relay.power(v("a", 40, dtype=dtype), v("b", 40, dtype=dtype)), {"a": base, "b": expo})
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.power(base, expo))


def test_integer_power_with_negative_exponent_truncates():
    base = np.array([1, -1, -1, 2, -3, 0], "int32")
    expo = np.array([-3, -3, -2, -1, -2, -1], "int32")
    (got,) = _run(relay.power(v("a", 6, dtype="int32"), v("b", 6, dtype="int32")), {"a": base, "b": expo})
    # trunc(x ** -n): numpy refuses negative integer powers; 0 ** -1 has no value and gives 0.
    np.testing.assert_array_equal(got, [1, -1, 1, 0, 0, 0])


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_max_and_min_over_an_empty_axis_give_the_identity(dtype):
    # ONNX ReduceMax/ReduceMin over an empty set: -inf / +inf for floats (numpy's initial=).
    x = np.zeros((2, 0, 4), dtype)
    lo, hi = (-np.inf, np.inf) if dtype == "float32" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    want = [np.max(x, axis=1, keepdims=True, initial=lo), np.min(x, axis=1, initial=hi)]
    e = v("e", 2, 0, 4, dtype=dtype)
    body = relay.Tuple([relay.max(e, axis=1, keepdims=True), relay.min(e, axis=1)])
    for got, w in zip(_run(body, {"e": x}), want):
        np.testing.assert_array_equal(got, w)
    ref = reference.run(tvm.IRModule.from_expr(relay.Function([e], body)), {"e": x})
    for got, w in zip(ref, want):
        np.testing.assert_array_equal(got, w)


def test_amx_conv_bias_ops_match_reference():
    """The AMX-BF16 ops FuseConvEpilogue makes (tests/relay/transform/test_fuse_conv_epilogue.py):
    nn.contrib_conv2d_bias_residual_NCHWc (stride 2, relu) and nn.contrib_conv2d_bias_NCHWc
    (plain RGB input), built for sapphirerapids, run where the host has AMX, against the reference
    within what the float32 sum leaves (the kernel's float32 sums vs the reference's float64
    ones, then one bfloat16 rounding each)."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays for the reference")
    from kiln.target.cpu_facts import why_host_cannot_run
    from kiln.topi.x86.conv2d_bf16 import prepack_kernel_nchwc_bf16
    from kiln.topi.x86.conv2d_nchwc import prepack_kernel_nchwc

    amx = "llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids"
    why_not = why_host_cannot_run(tvm.target.Target(amx))
    rng = np.random.default_rng(2)

    def bf(*shape):
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)

    x = relay.var("x", shape=(1, 2, 9, 9, 32), dtype="bfloat16")
    r = relay.var("r", shape=(1, 2, 5, 5, 32), dtype="bfloat16")
    img = relay.var("img", shape=(1, 3, 12, 12), dtype="bfloat16")
    w = relay.const(prepack_kernel_nchwc_bf16(bf(64, 64, 3, 3), 32, 32))
    w_img = relay.const(prepack_kernel_nchwc(bf(32, 3, 7, 7), 1, 32))
    body = relay.Tuple([
        relay.nn.contrib_conv2d_bias_residual_NCHWc(x, w, relay.const(bf(1, 2, 1, 1, 32)), r, strides=2,
                                                    padding=(1, 1), relu=True),
        relay.nn.contrib_conv2d_bias_NCHWc(img, w_img, relay.const(bf(1, 1, 1, 1, 32)), strides=2, padding=(3, 3))])
    mod = tvm.IRModule.from_expr(relay.Function([x, r, img], body))
    inputs = {"x": bf(1, 2, 9, 9, 32), "r": bf(1, 2, 5, 5, 32), "img": bf(1, 3, 12, 12)}
    want = reference.run(mod, inputs)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=amx)
    if why_not:
        pytest.skip(f"AMX code cannot run here: {why_not}")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**{k: v.view(np.uint16) for k, v in inputs.items()})
    m.run()
    for i, terms in enumerate((64 * 9, 3 * 49)):
        got = m.get_output(i).numpy().view(ml_dtypes.bfloat16).astype(np.float64)
        ref = np.asarray(want[i]).astype(np.float64)
        # the kernel's float32 sum of `terms` products (plus bias and residual) is within
        # (terms + 2) * 2^-24 of the exact one, relative to the sum of |terms| (<= ~16 each here);
        # then both round once to bfloat16: one step (at most 2^-7 relative) apart
        assert np.all(np.abs(got - ref) <= 2.0 ** -7 * np.abs(ref) + (terms + 2) * 16 * 2.0 ** -24), i
