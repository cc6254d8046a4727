"""Seed files and hypothesis mutations for the hostile-input tests (tests/helpers/hostile.py).

Each ``LOADERS[name]()`` gives ``(load(path), file name, strategy of file bytes)``. Mutations are
both blind (truncate, flip, overwrite with extreme integers) and aware of the format (a protobuf
or JSON field set to an extreme value, a dataset declared huge), since blind flips rarely get
past a checksum-free parser's first field. Files that need the compiler (a kernel library, a
module archive) are made by the test beforehand in ``$KILN_HOSTILE_FIXTURES``.

``onnx_ops`` and ``tflite_quant`` aim past the parsers at the converters: valid models of the
quantized, recurrent, transformer, bfloat16 and data-dependent ops, changed where the converters
read them (attributes, initializer dtypes/shapes/values, input dims, wiring; TFLite scales, zero
points, quantized dimension, tensor types and shapes, buffers, options), so that most cases get
through the file checks and reach a converter.
"""

from __future__ import annotations

import io
import json
import os
import struct
import sys

import numpy as np
from hypothesis import strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
FRONTEND_TESTS = os.path.join(os.path.dirname(HERE), "relay", "frontend")

EXTREME_INTS = [0, 1, -1, 2, 3, 255, 256, 65535, 1 << 31, (1 << 31) - 1, 1 << 32, (1 << 32) - 1,
                1 << 40, (1 << 62), (1 << 63) - 1, -(1 << 63), 10 ** 30]


# -- blind byte mutations ---------------------------------------------------------------------------
@st.composite
def _blind(draw, seed: bytes):
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "int32", "int64", "delete", "insert"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind in ("int32", "int64"):
            fmt = "<I" if kind == "int32" else "<Q"
            value = draw(st.sampled_from(EXTREME_INTS)) % (1 << (32 if kind == "int32" else 64))
            packed = struct.pack(fmt, value)
            data[at:at + len(packed)] = packed
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 16))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


def blind(seeds: list) -> st.SearchStrategy:
    return st.sampled_from(seeds).flatmap(_blind) | st.sampled_from([b"", b"\0" * 8] + [s[:n] for s in seeds for n in (1, 16, 64)])


# -- JSON tree mutations --------------------------------------------------------------------------
_JSON_VALUES = st.sampled_from([None, True, -1, 0, 1, 2 ** 31, 2 ** 40, 2 ** 64, -(2 ** 63), 1.5, 1e308,
                                "", "x", "float32", "tvm_op", "null", [], [[]], [-1], [2 ** 40, 2 ** 40], {},
                                {"a": 1}, [0, 0, 0], ["list_int", []]])


def _paths(node, prefix=()):
    stack = [(node, prefix)]
    while stack:  # iterative: a mutated document may nest thousands deep
        node, prefix = stack.pop()
        yield prefix
        if len(prefix) > 40:
            continue
        if isinstance(node, dict):
            stack.extend((v, prefix + (k,)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, prefix + (i,)) for i, v in enumerate(node))


@st.composite
def _json_mutation(draw, doc):
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["set", "set", "delete", "nest"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "nest":
            value = parent[path[-1]]
            for _ in range(draw(st.sampled_from([2, 50, 5000]))):
                value = [value]
            parent[path[-1]] = value
        else:  # a copy: a later mutation must not change the shared sample itself
            parent[path[-1]] = json.loads(json.dumps(draw(_JSON_VALUES)))
    try:
        return json.dumps(doc).encode()
    except (ValueError, RecursionError):
        return b"[" * 100000


def json_mutations(docs: list) -> st.SearchStrategy:
    return st.sampled_from(docs).flatmap(_json_mutation)


# -- ONNX -----------------------------------------------------------------------------------------
def _onnx_seeds() -> list:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def model(nodes, inputs, outputs, inits=()):
        graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()

    f32 = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f32, [1, 3, 8, 8])
    rng = np.random.default_rng(0)
    conv = model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                  helper.make_node("Relu", ["c"], ["y"], name="relu")],
                 [x], [helper.make_tensor_value_info("y", f32, [1, 4, 8, 8])],
                 [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype("float32"), "w"),
                  numpy_helper.from_array(np.zeros(4, "float32"), "b")])
    cos = model([helper.make_node("ConstantOfShape", ["shape"], ["z"], name="cos",
                                  value=helper.make_tensor("v", f32, [1], [1.0])),
                 helper.make_node("Add", ["v", "z"], ["y"], name="add")],
                [helper.make_tensor_value_info("v", f32, [2, 3])], [helper.make_tensor_value_info("y", f32, [2, 3])],
                [numpy_helper.from_array(np.array([2, 3], "int64"), "shape")])
    rng_model = model([helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
                       helper.make_node("Reshape", ["r", "shape"], ["r2"], name="reshape"),
                       helper.make_node("Gather", ["v", "idx"], ["g"], axis=0, name="gather"),
                       helper.make_node("Mul", ["g", "r2"], ["y"], name="mul")],
                      [helper.make_tensor_value_info("v", f32, [4, 6])], [helper.make_tensor_value_info("y", f32, [2, 6])],
                      [numpy_helper.from_array(np.array(0, "float32"), "start"),
                       numpy_helper.from_array(np.array(12, "float32"), "limit"),
                       numpy_helper.from_array(np.array(1, "float32"), "delta"),
                       numpy_helper.from_array(np.array([2, 6], "int64"), "shape"),
                       numpy_helper.from_array(np.array([0, 3], "int64"), "idx")])
    mm = model([helper.make_node("MatMul", ["v", "w"], ["m"], name="mm"),
                helper.make_node("Softmax", ["m"], ["s"], axis=-1, name="sm"),
                helper.make_node("Tile", ["s", "reps"], ["t"], name="tile"),
                helper.make_node("Expand", ["t", "eshape"], ["y"], name="expand")],
               [helper.make_tensor_value_info("v", f32, [2, 5])], [helper.make_tensor_value_info("y", f32, [2, 4, 6])],
               [numpy_helper.from_array(rng.standard_normal((5, 3)).astype("float32"), "w"),
                numpy_helper.from_array(np.array([2, 2], "int64"), "reps"),
                numpy_helper.from_array(np.array([2, 4, 6], "int64"), "eshape")])
    for m in (conv, cos, rng_model, mm):
        onnx.checker.check_model(onnx.load_from_string(m))
    return [conv, cos, rng_model, mm]


def _repeated(desc) -> bool:
    return desc.is_repeated if hasattr(desc, "is_repeated") else desc.label == desc.LABEL_REPEATED


def _proto_fields(msg, prefix=""):
    """(message, field descriptor, index or None) for every scalar field set in msg, recursively."""
    for desc, value in msg.ListFields():
        if desc.type == desc.TYPE_MESSAGE:
            items = value if _repeated(desc) else [value]
            for item in items:
                yield from _proto_fields(item)
        elif _repeated(desc):
            for i in range(len(value)):
                yield msg, desc, i
            yield msg, desc, None
        else:
            yield msg, desc, None


@st.composite
def _onnx_mutation(draw, seed: bytes):
    import onnx
    m = onnx.load_from_string(seed)
    for _ in range(draw(st.integers(1, 3))):
        fields = list(_proto_fields(m))
        msg, desc, index = draw(st.sampled_from(fields))
        container = getattr(msg, desc.name)
        if desc.type == desc.TYPE_STRING:
            value = draw(st.sampled_from(["", "x", "y", "shape", "v", "Conv", "ConstantOfShape", "Range", "\x00", "ai.onnx"]))
        elif desc.type == desc.TYPE_BYTES:
            value = draw(st.sampled_from([b"", b"\x00", b"\xff" * 7, np.array([1 << 20, 1 << 20], "int64").tobytes(),
                                          np.array([1e9], "float32").tobytes()]))
        elif desc.type in (desc.TYPE_FLOAT, desc.TYPE_DOUBLE):
            value = draw(st.sampled_from([0.0, -1.0, 1e30, float("inf"), float("nan"), 1e-30]))
        elif desc.type == desc.TYPE_BOOL:
            value = draw(st.booleans())
        else:
            bits = 64 if desc.type in (desc.TYPE_INT64, desc.TYPE_UINT64, desc.TYPE_SINT64) else 32
            signed = desc.type not in (desc.TYPE_UINT64, desc.TYPE_UINT32)
            value = draw(st.sampled_from(EXTREME_INTS))
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            value = min(max(value, lo), hi)
            if desc.type == desc.TYPE_ENUM:
                value = draw(st.integers(0, 20))
        try:
            if index is None and _repeated(desc):
                if draw(st.booleans()) and len(container):
                    del container[-1]
                else:
                    container.append(value)
            elif index is None:
                setattr(msg, desc.name, value)
            else:
                container[index] = value
        except (TypeError, ValueError):
            pass
    try:
        return m.SerializeToString()
    except Exception:  # a mutation protobuf itself refuses to encode: the seed instead
        return seed


def onnx_loader():
    from kiln.relay.frontend.onnx import from_onnx

    def load(path):
        from_onnx(path)
    seeds = _onnx_seeds()
    return load, "model.onnx", st.sampled_from(seeds).flatmap(_onnx_mutation) | blind(seeds), seeds[0]


# -- ONNX: the ops changed last (quantized, recurrent, transformer, bfloat16, data-dependent) ----
def _onnx_op_seeds() -> list:
    """Small valid models of the converters that landed last: 0 QDQ and 1 QOperator quantized
    graphs, 2 LSTM/GRU/RNN, 3 bfloat16 tensors (initializer, Cast/CastLike, Range) and Dropout,
    4 opset-23 Attention/RotaryEmbedding/RMSNormalization, 5 NonZero/Unique/NonMaxSuppression and
    Conv3D, 6 LSTM/GRU/RNN as onnxruntime runs them (other activations, no layout=1)."""
    import onnx
    from onnx import TensorProto as T, helper, numpy_helper

    rng = np.random.default_rng(3)

    def model(nodes, inputs, outputs, inits=(), opset=13, ms=False):
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                                  [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                                  [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
        opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
        return helper.make_model(graph, opset_imports=opsets)

    def w(*shape, dtype="float32"):
        return rng.standard_normal(shape).astype(dtype)

    n = helper.make_node
    f32, u8, i8, i32 = T.FLOAT, T.UINT8, T.INT8, T.INT32
    seeds = []
    # QDQ: per-tensor activations, per-channel int8 conv weights, int32 bias, QDQ around MatMul
    seeds.append(model([
        n("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
        n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
        n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0, name="dqw"),
        n("DequantizeLinear", ["bq", "bs"], ["bd"], name="dqb"),
        n("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        n("QuantizeLinear", ["c", "ys", "yz"], ["cq"], name="qc"),
        n("DequantizeLinear", ["cq", "ys", "yz"], ["cd"], name="dqc"),
        n("Reshape", ["cd", "flat"], ["f"], name="reshape"),
        n("DequantizeLinear", ["mq", "ms", "mz"], ["md"], name="dqm"),
        n("MatMul", ["f", "md"], ["m"], name="mm"),
        n("QuantizeLinear", ["m", "ys", "yz"], ["y"], name="qy")],
        [("x", f32, [1, 2, 4, 4])], [("y", u8, [1, 3])],
        [("xs", np.float32(0.02)), ("xz", np.uint8(128)), ("wq", rng.integers(-127, 128, (4, 2, 3, 3)).astype("int8")),
         ("ws", np.array([0.01, 0.02, 0.015, 0.03], "float32")), ("wz", np.zeros(4, "int8")),
         ("bq", rng.integers(-50, 50, 4).astype("int32")), ("bs", np.float32(0.0002)),
         ("ys", np.float32(0.05)), ("yz", np.uint8(120)), ("flat", np.array([1, 64], "int64")),
         ("mq", rng.integers(0, 255, (64, 3)).astype("uint8")), ("ms", np.float32(0.01)), ("mz", np.uint8(127))]))
    # QOperator: QLinearConv, QLinearMatMul, com.microsoft QLinearAdd, MatMulInteger, ConvInteger, DynamicQuantizeLinear
    seeds.append(model([
        n("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["c"], pads=[1, 1, 1, 1], name="qconv"),
        n("QLinearAdd", ["c", "ys", "yz", "c", "ys", "yz", "ys", "yz"], ["a"], domain="com.microsoft", name="qadd"),
        n("Reshape", ["a", "flat"], ["f"], name="reshape"),
        n("QLinearMatMul", ["f", "ys", "yz", "m", "ms", "mz", "ys", "yz"], ["y"], name="qmm"),
        n("DynamicQuantizeLinear", ["v"], ["vq", "vs", "vz"], name="dql"),
        n("MatMulInteger", ["vq", "m2", "vz", "mz"], ["vi"], name="mmi"),
        n("ConvInteger", ["x", "w", "xz"], ["ci"], pads=[0, 0, 0, 0], name="convi")],
        [("x", u8, [1, 2, 4, 4]), ("v", f32, [2, 6])], [("y", u8, [1, 3]), ("vi", i32, [2, 3]), ("ci", i32, [1, 4, 2, 2])],
        [("xs", np.float32(0.02)), ("xz", np.uint8(128)), ("w", rng.integers(-127, 128, (4, 2, 3, 3)).astype("int8")),
         ("ws", np.array([0.01, 0.02, 0.015, 0.03], "float32")), ("wz", np.zeros(4, "int8")),
         ("ys", np.float32(0.05)), ("yz", np.uint8(120)), ("b", rng.integers(-50, 50, 4).astype("int32")),
         ("flat", np.array([1, 64], "int64")), ("m", rng.integers(0, 255, (64, 3)).astype("uint8")),
         ("ms", np.float32(0.01)), ("mz", np.uint8(127)), ("m2", rng.integers(0, 255, (6, 3)).astype("uint8"))], ms=True))
    # LSTM (bidirectional, bias, initial states, peepholes), GRU (linear_before_reset), RNN (reverse, layout 1)
    h = 3
    seeds.append(model([
        n("LSTM", ["x", "lw", "lr", "lb", "", "h0", "c0", "lp"], ["ly", "lh", "lc"], hidden_size=h,
          direction="bidirectional", name="lstm"),
        n("GRU", ["x", "gw", "gr", "gb", "lens"], ["gy", "gh"], hidden_size=h, linear_before_reset=1, name="gru"),
        n("Transpose", ["x"], ["xt"], perm=[1, 0, 2], name="tr"),
        n("RNN", ["xt", "rw", "rr", "rb"], ["ry"], hidden_size=h, direction="reverse", layout=1,
          activations=["Relu"], clip=5.0, name="rnn")],
        [("x", f32, [4, 2, 5])], [("ly", f32, [4, 2, 2, h]), ("lh", f32, [2, 2, h]), ("lc", f32, [2, 2, h]),
                                  ("gy", f32, [4, 1, 2, h]), ("gh", f32, [1, 2, h]), ("ry", f32, [2, 4, 1, h])],
        [("lw", w(2, 4 * h, 5)), ("lr", w(2, 4 * h, h)), ("lb", w(2, 8 * h)), ("h0", w(2, 2, h)), ("c0", w(2, 2, h)),
         ("lp", w(2, 3 * h)), ("gw", w(1, 3 * h, 5)), ("gr", w(1, 3 * h, h)), ("gb", w(1, 6 * h)),
         ("lens", np.array([4, 2], "int32")), ("rw", w(1, h, 5)), ("rr", w(1, h, h)), ("rb", w(1, 2 * h))], opset=14))
    # bfloat16: an initializer, Cast/CastLike to bfloat16, a bfloat16 graph output; Dropout (inference) and Range
    bf16 = numpy_helper.from_array(np.array([1.5, -2.0, 0.25, 3.0], "float32"), "wb")
    bf16 = helper.make_tensor("wb", T.BFLOAT16, [4], [1.5, -2.0, 0.25, 3.0])
    m = model([
        n("Cast", ["x"], ["xb"], to=T.BFLOAT16, name="cast"),
        n("Mul", ["xb", "wb"], ["p"], name="mul"),
        n("Dropout", ["p", "ratio", "train"], ["d"], name="dropout"),
        n("CastLike", ["d", "x"], ["df"], name="castlike"),
        n("Range", ["start", "limit", "delta"], ["r"], name="range"),
        n("Add", ["df", "r"], ["y"], name="add"),
        n("Cast", ["y"], ["yb"], to=T.BFLOAT16, name="cast2")],
        [("x", f32, [2, 4])], [("yb", T.BFLOAT16, [2, 4])],
        [("ratio", np.float32(0.5)), ("train", np.array(False)), ("start", np.float32(0)), ("limit", np.float32(4)),
         ("delta", np.float32(1))], opset=15)
    m.graph.initializer.append(bf16)
    seeds.append(m)
    # opset 23: Attention (grouped heads, a mask), RotaryEmbedding (positions), RMSNormalization
    seeds.append(model([
        n("RMSNormalization", ["q", "g"], ["qn"], axis=-1, epsilon=1e-5, name="rms"),
        n("RotaryEmbedding", ["qn", "cos", "sin", "pos"], ["qr"], num_heads=2, name="rope"),
        n("Attention", ["qr", "k", "v", "mask"], ["y"], q_num_heads=2, kv_num_heads=1, name="attn")],
        [("q", f32, [1, 3, 8]), ("k", f32, [1, 3, 4]), ("v", f32, [1, 3, 4])], [("y", f32, [1, 3, 8])],
        [("g", w(8)), ("cos", w(5, 2)), ("sin", w(5, 2)), ("pos", np.array([[0, 2, 4]], "int64")),
         ("mask", np.tril(np.ones((3, 3), bool)))], opset=23))
    # data-dependent output shapes and Conv3D
    seeds.append(model([
        n("NonZero", ["x"], ["nz"], name="nonzero"),
        n("Unique", ["u"], ["uy", "ui", "uinv", "uc"], sorted=1, axis=0, name="unique"),
        n("NonMaxSuppression", ["boxes", "scores", "maxo", "iou", "sth"], ["sel"], name="nms"),
        n("Conv", ["v", "w3"], ["c3"], pads=[1, 1, 1, 1, 1, 1], strides=[1, 2, 1], name="conv3d")],
        [("x", f32, [2, 3]), ("boxes", f32, [1, 4, 4]), ("scores", f32, [1, 1, 4]), ("v", f32, [1, 2, 3, 4, 4])],
        [("nz", T.INT64, [2, None]), ("uy", T.INT64, [None, 2]), ("sel", T.INT64, [None, 3]), ("c3", f32, [1, 2, 3, 2, 4])],
        [("u", np.array([[1, 2], [3, 4], [1, 2]], "int64")), ("maxo", np.array([2], "int64")),
         ("iou", np.array([0.5], "float32")), ("sth", np.array([0.0], "float32")), ("w3", w(2, 2, 3, 3, 3))]))
    # the same ops as onnxruntime runs them (it has no layout=1): a reference for built mutants
    seeds.append(model([
        n("LSTM", ["x", "lw2", "lr2", "lb2"], ["ly2"], hidden_size=h, input_forget=1, name="lstm2"),
        n("GRU", ["x", "gw2", "gr2", "", "", "gh0"], ["gy2"], hidden_size=h, direction="bidirectional",
          activations=["HardSigmoid", "Tanh", "HardSigmoid", "Tanh"], activation_alpha=[0.3, 0.0, 0.3, 0.0],
          activation_beta=[0.4, 0.0, 0.4, 0.0], name="gru2"),
        n("RNN", ["x", "rw", "rr", "rb"], ["ry2"], hidden_size=h, activations=["LeakyRelu"], activation_alpha=[0.2],
          name="rnn2")],
        [("x", f32, [4, 2, 5])], [("ly2", f32, [4, 1, 2, h]), ("gy2", f32, [4, 2, 2, h]), ("ry2", f32, [4, 1, 2, h])],
        [("lw2", w(1, 4 * h, 5)), ("lr2", w(1, 4 * h, h)), ("lb2", w(1, 8 * h)), ("gw2", w(2, 3 * h, 5)),
         ("gr2", w(2, 3 * h, h)), ("gh0", w(2, 2, h)), ("rw", w(1, h, 5)), ("rr", w(1, h, h)), ("rb", w(1, 2 * h))],
        opset=14))
    out = []
    for m in seeds:
        onnx.checker.check_model(m)
        out.append(m.SerializeToString())
    return out


_ATTR_VALUES = [0, 1, -1, 2, 3, 7, -(1 << 31), (1 << 31) - 1, 1 << 40, 0.0, -1.0, 1e30, float("nan"), float("inf"),
                "", "forward", "reverse", "bidirectional", "bogus", [], [0], [-1], [1, 1], [0, 0, 0, 0],
                [1 << 40, 1], [1, 1, 1, 1, 1, 1], ["Relu"], ["Tanh", "Tanh"], ["Bogus", "Sigmoid", "Tanh"],
                [0.5, 0.5], np.zeros((0,), "float32"), np.array(1.0, "float32"), np.array([3, 3], "int64")]
_ATTR_NAMES = ["axis", "hidden_size", "direction", "layout", "activations", "activation_alpha", "activation_beta",
               "clip", "linear_before_reset", "input_forget", "num_heads", "q_num_heads", "kv_num_heads", "scale",
               "is_causal", "softcap", "qk_matmul_output_mode", "rotary_embedding_dim", "interleaved", "epsilon",
               "stash_type", "to", "saturate", "block_size", "output_dtype", "pads", "strides", "dilations",
               "group", "kernel_shape", "auto_pad", "sorted", "center_point_box", "seed", "perm"]
_INIT_DTYPES = ["float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "int64", "bool", "bfloat16"]


def _new_tensor(draw, name, old):
    """A replacement initializer for ``old`` (a numpy array): another dtype, shape or content."""
    from onnx import TensorProto, helper, numpy_helper
    kind = draw(st.sampled_from(["dtype", "shape", "empty", "scalar", "grow", "values", "raw_short", "huge_dims"]))
    if kind == "dtype":
        dtype = draw(st.sampled_from(_INIT_DTYPES))
        if dtype == "bfloat16":
            return helper.make_tensor(name, TensorProto.BFLOAT16, list(old.shape), old.astype("float32").ravel().tolist())
        return numpy_helper.from_array(np.asarray(old).astype(dtype), name)
    if kind == "shape" and old.size:
        shape = draw(st.sampled_from([(old.size,), (1, old.size), (old.size, 1)] +
                                     ([tuple(reversed(old.shape))] if old.ndim > 1 else [])))
        return numpy_helper.from_array(np.asarray(old).reshape(shape), name)
    if kind == "empty":
        shape = draw(st.sampled_from([(0,), (0, 3), old.shape[:-1] + (0,) if old.ndim else (0,)]))
        return numpy_helper.from_array(np.zeros(shape, old.dtype), name)
    if kind == "scalar":
        return numpy_helper.from_array(np.asarray(old).reshape(-1)[:1].reshape(()) if old.size else np.zeros((), old.dtype), name)
    if kind == "grow":
        arr = np.asarray(old).reshape(old.shape or (1,))
        axis = draw(st.integers(0, arr.ndim - 1))
        extra = arr.take([0], axis) if arr.shape[axis] else np.zeros(arr.shape[:axis] + (1,) + arr.shape[axis + 1:], arr.dtype)
        return numpy_helper.from_array(np.concatenate([arr, extra], axis), name)
    if kind == "values" and old.size:
        vals = draw(st.sampled_from([0, -1, 1, 255, 256, -129, 1 << 31, -(1 << 40), 1e30, float("nan"), float("inf"), -0.5]))
        arr = np.asarray(old).copy().reshape(-1)
        with np.errstate(all="ignore"):
            try:
                arr[draw(st.integers(0, arr.size - 1))] = vals
            except (OverflowError, ValueError):
                arr[:] = 0
        return numpy_helper.from_array(arr.reshape(old.shape), name)
    t = numpy_helper.from_array(np.asarray(old) if old.dtype.name != "bfloat16" else np.zeros(old.shape, "float32"), name)
    if kind == "raw_short":
        t.raw_data = t.raw_data[:max(0, len(t.raw_data) - draw(st.integers(1, 8)))]
    else:
        del t.dims[:]
        t.dims.extend(draw(st.sampled_from([[1 << 20, 1 << 20], [-1], [-3, 4], [0, 1 << 40], [1 << 62, 4]])))
    return t


@st.composite
def _onnx_op_mutation(draw, seed: bytes):
    """Mutations that keep the protobuf well-formed and change what the converters read: attribute
    values and types, initializer dtypes/shapes/values (scales of the wrong length, zero points of
    another dtype, empty tensors), graph input dims and dtypes, node inputs swapped or dropped."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load_from_string(seed)
    g = m.graph
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["attr", "attr", "init", "init", "input", "wire", "opset"]))
        if kind == "attr" and len(g.node):
            node = g.node[draw(st.integers(0, len(g.node) - 1))]
            names = [a.name for a in node.attribute]
            name = draw(st.sampled_from(names + _ATTR_NAMES))
            for i, a in enumerate(node.attribute):
                if a.name == name:
                    del node.attribute[i]
                    break
            if draw(st.integers(0, 5)):  # else: the attribute deleted
                value = draw(st.sampled_from(_ATTR_VALUES))
                try:
                    attr = helper.make_attribute(name, numpy_helper.from_array(value) if isinstance(value, np.ndarray) else value)
                except (ValueError, TypeError):
                    attr = helper.make_attribute(name, 1)
                node.attribute.append(attr)
        elif kind == "init" and len(g.initializer):
            i = draw(st.integers(0, len(g.initializer) - 1))
            old = g.initializer[i]
            try:
                arr = numpy_helper.to_array(old)
            except Exception:
                arr = np.zeros(1, "float32")
            if arr.dtype.kind == "V" or arr.dtype.name not in _INIT_DTYPES:  # bfloat16 as ml_dtypes
                arr = arr.astype("float32")
            g.initializer[i].CopyFrom(_new_tensor(draw, old.name, arr))
        elif kind == "input" and len(g.input):
            vi = g.input[draw(st.integers(0, len(g.input) - 1))]
            tt = vi.type.tensor_type
            what = draw(st.sampled_from(["dim", "dim", "rank", "dtype"]))
            if what == "dim" and len(tt.shape.dim):
                d = tt.shape.dim[draw(st.integers(0, len(tt.shape.dim) - 1))]
                d.dim_value = draw(st.sampled_from([0, 1, 2, 5, 7, 64, 1 << 20, 1 << 40]))
            elif what == "rank":
                if draw(st.booleans()) and len(tt.shape.dim):
                    del tt.shape.dim[-1]
                else:
                    tt.shape.dim.add().dim_value = draw(st.sampled_from([1, 2, 3]))
            else:
                tt.elem_type = draw(st.sampled_from([1, 2, 3, 5, 6, 7, 9, 10, 11, 16]))
        elif kind == "wire" and len(g.node):
            node = g.node[draw(st.integers(0, len(g.node) - 1))]
            ins = list(node.input)
            what = draw(st.sampled_from(["swap", "drop", "empty", "other", "extra"]))
            known = [t.name for t in g.initializer] + [v.name for v in g.input] + [o for nd in g.node for o in nd.output]
            if what == "swap" and len(ins) > 1:
                a, b = draw(st.integers(0, len(ins) - 1)), draw(st.integers(0, len(ins) - 1))
                ins[a], ins[b] = ins[b], ins[a]
            elif what == "drop" and ins:
                ins = ins[:draw(st.integers(0, len(ins) - 1))]
            elif what == "empty" and ins:
                ins[draw(st.integers(0, len(ins) - 1))] = ""
            elif what == "other" and ins and known:
                ins[draw(st.integers(0, len(ins) - 1))] = draw(st.sampled_from(known))
            elif what == "extra" and known:
                ins.append(draw(st.sampled_from(known)))
            del node.input[:]
            node.input.extend(ins)
        elif kind == "opset":
            m.opset_import[0].version = draw(st.sampled_from([7, 10, 11, 13, 17, 19, 21, 23, 27]))
    try:
        return m.SerializeToString()
    except Exception:
        return seed


# -- TFLite ---------------------------------------------------------------------------------------
def tflite_loader():
    sys.path.insert(0, FRONTEND_TESTS)
    import tflite_builder

    from kiln.relay.frontend import from_tflite
    seeds = [tflite_builder.mobilenet_like(image=8, classes=3)]
    return (lambda path: from_tflite(path)), "model.tflite", blind(seeds), seeds[0]


# -- TFLite: quantized models as descriptions, mutated before they are written -----------------
def _tflite_quant_specs() -> list:
    """(tensors, buffers, ops, inputs, outputs) of small quantized models, captured from the test
    builder: one op per model (per-channel int8 conv and depthwise conv, FC, ADD in int8, uint8 and
    int16x8) and a MobileNet-like int8 network (QUANTIZE ... DEQUANTIZE) with made-up ranges."""
    import collections
    sys.path.insert(0, FRONTEND_TESTS)
    import tflite_builder as tb

    specs = []
    finish = tb.FlatModel.finish

    def capture(self, inputs, outputs):
        specs.append((list(self.tensors), list(self.buffers), list(self.ops), list(self.codes), list(inputs), list(outputs)))
        return finish(self, inputs, outputs)
    tb.FlatModel.finish = capture
    try:
        for kind, dtype in [("conv3", "int8"), ("dw", "int8"), ("fc", "int8"), ("add", "int8"), ("conv1", "uint8"),
                            ("fc", "uint8"), ("conv1", "int16"), ("dw", "int16"), ("fc", "int16"), ("mul", "int8")]:
            tb.single_op(kind, dtype, seed=len(specs), channels=16)
        ranges = collections.defaultdict(lambda: (-3.0, 5.0), input=(-1.0, 1.0))  # non-empty: Net tests its truth
        tb.mobilenet_like(ranges=ranges, image=8, classes=3)
    finally:
        tb.FlatModel.finish = finish
    return specs


def _tflite_write(spec) -> bytes:
    sys.path.insert(0, FRONTEND_TESTS)
    import tflite_builder as tb
    tensors, buffers, ops, codes, inputs, outputs = spec
    m = tb.FlatModel()
    m.tensors, m.buffers, m.ops, m.codes = list(tensors), list(buffers), list(ops), list(codes)
    return m.finish(inputs, outputs)


_TFL_DTYPES = ["float32", "int32", "uint8", "int64", "int16", "int8"]
_TFL_SCALES = [[], [0.0], [-0.5], [float("nan")], [float("inf")], [1e-45], [1e38], [0.1, 0.2], [0.05] * 3, [0.01] * 64]
_TFL_ZPS = [[], [0], [-1], [255], [256], [-129], [1 << 40], [0, 0], [0] * 3, [0] * 64]
_TFL_FIELDS = {"Padding": [0, 1, 2, 100], "StrideW": [0, -1, 1, 2, 1 << 30], "StrideH": [0, -1, 2, 1 << 30],
               "DilationWFactor": [0, -1, 2, 1 << 30], "DilationHFactor": [0, 3], "DepthMultiplier": [0, -1, 2, 3, 1 << 30],
               "FusedActivationFunction": [0, 1, 2, 3, 4, 5, 6, 7, 100], "FilterWidth": [0, -1, 9, 1 << 30],
               "FilterHeight": [0, 100], "KeepNumDims": [0, 1], "Axis": [-5, -1, 0, 3, 4, 100], "Beta": [0.0, -1.0, 1e30],
               "KeepDims": [0, 1]}


@st.composite
def _tflite_quant_mutation(draw, spec):
    """Change what the quantized converters read: scales and zero points (wrong length, zero,
    negative, non-finite, outside the dtype), quantized_dimension, tensor dtypes and shapes,
    buffer lengths, op options, operator inputs and outputs."""
    tensors, buffers, ops, codes, inputs, outputs = spec
    tensors, buffers, ops, inputs, outputs = list(tensors), list(buffers), list(ops), list(inputs), list(outputs)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["scale", "zp", "qdim", "noquant", "dtype", "shape", "buffer", "option", "wire", "io"]))
        t = draw(st.integers(0, len(tensors) - 1))
        name, shape, dtype, buf, quant = tensors[t]
        if kind in ("scale", "zp", "qdim", "noquant"):
            scales, zps, dim = quant if quant is not None else ([0.1], [0], 0)
            if kind == "scale":
                scales = draw(st.sampled_from(_TFL_SCALES + [list(scales)[:-1], list(scales) + [0.1]]))
                zps = zps if len(zps) == len(scales) or draw(st.booleans()) else [0] * len(scales)
            elif kind == "zp":
                zps = draw(st.sampled_from(_TFL_ZPS + [[1] * len(scales), [-128] * len(scales), [200] * len(scales)]))
            elif kind == "qdim":
                dim = draw(st.sampled_from([-1, 1, 2, 3, 4, 100]))
            quant = None if kind == "noquant" else (scales, zps, dim)
        elif kind == "dtype":
            dtype = draw(st.sampled_from(_TFL_DTYPES))
            if buf and draw(st.booleans()):  # the data reinterpreted, its length kept
                pass
        elif kind == "shape":
            what = draw(st.sampled_from(["dim", "drop", "add", "empty"]))
            shape = list(shape)
            if what == "dim" and shape:
                shape[draw(st.integers(0, len(shape) - 1))] = draw(st.sampled_from([0, -1, -7, 1, 2, 3, 5, 1 << 20, (1 << 31) - 1]))
            elif what == "drop" and shape:
                shape = shape[:-1]
            elif what == "add":
                shape = shape + [draw(st.sampled_from([1, 2]))]
            else:
                shape = []
            shape = tuple(shape)
        elif kind == "buffer" and buf:
            data = buffers[buf]
            buffers[buf] = draw(st.sampled_from([b"", data[:len(data) // 2], data[:-1], data + b"\0" * 4, data * 2]))
        elif kind == "option" and ops:
            i = draw(st.integers(0, len(ops) - 1))
            code, ins, outs, options, fields = ops[i]
            if fields:
                field = draw(st.sampled_from(sorted(fields)))
                fields = {**fields, field: draw(st.sampled_from(_TFL_FIELDS.get(field, [0, -1, 1 << 30])))}
                ops[i] = (code, ins, outs, options, fields)
        elif kind == "wire" and ops:
            i = draw(st.integers(0, len(ops) - 1))
            code, ins, outs, options, fields = ops[i]
            ins = list(ins)
            what = draw(st.sampled_from(["swap", "drop", "none", "other", "extra", "out"]))
            if what == "swap" and len(ins) > 1:
                a, b = draw(st.integers(0, len(ins) - 1)), draw(st.integers(0, len(ins) - 1))
                ins[a], ins[b] = ins[b], ins[a]
            elif what == "drop" and ins:
                ins = ins[:-1]
            elif what == "none" and ins:
                ins[draw(st.integers(0, len(ins) - 1))] = -1
            elif what == "other" and ins:
                ins[draw(st.integers(0, len(ins) - 1))] = draw(st.integers(0, len(tensors) - 1))
            elif what == "extra":
                ins.append(draw(st.integers(-1, len(tensors) - 1)))
            else:
                outs = [draw(st.integers(0, len(tensors) - 1))]
            ops[i] = (code, ins, outs, options, fields)
        elif kind == "io":
            which = draw(st.sampled_from(["in", "out"]))
            idx = draw(st.sampled_from([-1, 0, 1, len(tensors) - 1, len(tensors), 1 << 20]))
            if which == "in":
                inputs = (inputs + [idx])[-draw(st.integers(1, 2)):]
            else:
                outputs = [idx] + outputs[1:]
        tensors[t] = (name, shape, dtype, buf, quant)
    try:
        return _tflite_write((tensors, buffers, ops, codes, inputs, outputs))
    except Exception:  # a value the flatbuffer builder cannot pack (an int32 field out of range)
        return _tflite_write(spec)


def tflite_quant_loader():
    from kiln.relay.frontend import from_tflite
    specs = _tflite_quant_specs()
    seeds = [_tflite_write(s) for s in specs]
    return ((lambda path: from_tflite(path)), "model.tflite",
            st.sampled_from(specs).flatmap(_tflite_quant_mutation) | blind(seeds[-1:]), seeds[-1])


def onnx_ops_loader():
    from kiln.relay.frontend.onnx import from_onnx

    def load(path):
        from_onnx(path)
    seeds = _onnx_op_seeds()
    return load, "model.onnx", st.sampled_from(seeds).flatmap(_onnx_op_mutation), seeds[0]


# -- Keras ----------------------------------------------------------------------------------------
def _keras_seed(path, huge=None, config_override=None):
    sys.path.insert(0, FRONTEND_TESTS)
    import h5py
    import keras_h5

    g = keras_h5.Graph((6, 6, 3))
    rng = np.random.default_rng(1)
    c = g.add("Conv2D", "conv", g.input, [("kernel", rng.standard_normal((3, 3, 3, 4)).astype("float32")),
                                          ("bias", np.zeros(4, "float32"))],
              filters=4, kernel_size=[3, 3], strides=[1, 1], padding="same", activation="relu", use_bias=True,
              dilation_rate=[1, 1], groups=1, data_format="channels_last")
    p = g.add("GlobalAveragePooling2D", "gap", c, data_format="channels_last")
    d = g.add("Dense", "dense", p, [("kernel", rng.standard_normal((4, 2)).astype("float32")),
                                    ("bias", np.zeros(2, "float32"))], units=2, activation="softmax", use_bias=True)
    g.save(path, d)
    if huge is not None or config_override is not None:
        with h5py.File(path, "r+") as f:
            if huge is not None:
                name = "model_weights/dense/dense/kernel:0"
                del f[name]
                f.create_dataset(name, shape=huge, dtype="float32", chunks=(1, min(huge[-1], 1024)),
                                 compression="gzip", fillvalue=1.0)
            if config_override is not None:
                f.attrs["model_config"] = config_override
    with open(path, "rb") as f:
        return f.read()


@st.composite
def _keras_mutation(draw, paths):
    import h5py
    seed_path = draw(st.sampled_from(paths))
    buf = io.BytesIO(open(seed_path, "rb").read())
    with h5py.File(buf, "r+") as f:
        kind = draw(st.sampled_from(["config", "config", "dataset", "attr"]))
        if kind == "config":
            doc = json.loads(f.attrs["model_config"])
            f.attrs["model_config"] = draw(_json_mutation(doc))
        elif kind == "dataset":
            name = draw(st.sampled_from(["model_weights/conv/conv/kernel:0", "model_weights/conv/conv/bias:0",
                                         "model_weights/dense/dense/kernel:0", "model_weights/dense/dense/bias:0"]))
            old = f[name]
            shape = draw(st.sampled_from([(), (0,), (1,), (7,), (3, 3), (1 << 14, 1 << 14), (4, 2, 1, 1)]))
            dtype = draw(st.sampled_from(["float32", "int8", "float64", "S4"]))
            del f[name]
            if len(shape) and shape[0] >= 1 << 14:
                f.create_dataset(name, shape=shape, dtype=dtype, chunks=(1, 1024), compression="gzip")
            else:
                f.create_dataset(name, shape=shape, dtype=dtype)
            del old
        else:
            target = draw(st.sampled_from(["layer_names", "weight_names"]))
            value = draw(st.sampled_from([[], [b"nope"], [b"conv", b"conv"], b"x", 5]))
            where = f["model_weights"] if target == "layer_names" else f["model_weights/conv"]
            where.attrs[target] = value
    return buf.getvalue()


def keras_loader():
    from kiln.relay.frontend import from_keras
    folder = os.environ.get("KILN_HOSTILE_FIXTURES") or os.getcwd()
    paths = []
    for i, kwargs in enumerate([{}, {"huge": (1 << 15, 1 << 15)}]):
        path = os.path.join(folder, f"seed{i}.h5")
        _keras_seed(path, **kwargs)
        paths.append(path)
    seeds = [open(p, "rb").read() for p in paths]
    return ((lambda path: from_keras(path, layout="NHWC")), "model.h5",
            _keras_mutation(paths) | blind(seeds[:1]), seeds[0])


# -- parameter blobs, graph JSON, module archives ------------------------------------------------
def params_loader():
    from kiln.runtime.params import load_params, save_params
    rng = np.random.default_rng(2)
    seeds = [save_params({"w": rng.standard_normal((3, 4)).astype("float32"), "b": np.arange(5, dtype="int64"),
                          "s": np.float32(2.0), "flag": np.array([True, False])}), save_params({})]

    def load(path):
        with open(path, "rb") as f:
            load_params(f.read())
    return load, "mod.params", blind(seeds), seeds[0]


def graph_loader():
    import kiln
    from kiln.runtime.graph_executor import GraphExecutor
    from kiln.runtime.module import load_module
    folder = os.environ["KILN_HOSTILE_FIXTURES"]
    lib = load_module(os.path.join(folder, "graph_lib.so"))
    doc = json.load(open(os.path.join(folder, "graph.json")))

    def load(path):
        with open(path, "rb") as f:
            GraphExecutor(f.read().decode("utf-8", "replace"), lib, kiln.cpu(0))
    return load, "mod.json", json_mutations([doc]) | blind([json.dumps(doc).encode()]), json.dumps(doc).encode()


def tar_loader():
    from kiln.runtime.module import load_module
    folder = os.environ["KILN_HOSTILE_FIXTURES"]
    seeds = [open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder)) if n.endswith(".tar")]
    return (lambda path: load_module(path)), "lib.tar", blind(seeds), None  # loading links: no warm-up


# -- TVMScript ------------------------------------------------------------------------------------
SCRIPT = '''@T.prim_func
def main(a: T.handle, b: T.handle):
    T.func_attr({"global_symbol": "main"})
    A = T.match_buffer(a, (16,), "float32")
    B = T.match_buffer(b, (16,), "float32")
    for i in T.serial(16):
        B[i] = A[i] * T.float32(2) + T.float32(1)
'''


@st.composite
def _script_mutation(draw):
    text = SCRIPT
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        piece = draw(st.sampled_from(["\x00", "(", ")", "[" * 2000, "(" * 300 + "1" + ")" * 300, "99999999999999999999999",
                                      "-9223372036854775809", "T.float32(", "\n    ", ":", "\t", "\ufeff", "\\", "'''",
                                      "lambda: 0", "A[i, i, i]", "T.grid(", "1e400", "0x" + "f" * 40]))
        if draw(st.booleans()):
            text = text[:at] + piece + text[at:]
        else:
            text = text[:at] + piece + text[at + draw(st.integers(0, 10)):]
    return text.encode("utf-8", "surrogatepass")


def script_loader():
    from kiln.script import from_source

    def load(path):
        with open(path, "rb") as f:
            from_source(f.read().decode("utf-8"), filename=path)
    return load, "kernel.py", _script_mutation(), SCRIPT.encode()


LOADERS = {"onnx": onnx_loader, "tflite": tflite_loader, "keras": keras_loader, "params": params_loader,
           "graph": graph_loader, "tar": tar_loader, "script": script_loader,
           "onnx_ops": onnx_ops_loader, "tflite_quant": tflite_quant_loader}
