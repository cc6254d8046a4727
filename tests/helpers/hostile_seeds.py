"""Seed files and hypothesis mutations for the hostile-input tests (tests/helpers/hostile.py).

Each ``LOADERS[name]()`` gives ``(load(path), file name, strategy of file bytes)``. Mutations are
both blind (truncate, flip, overwrite with extreme integers) and aware of the format (a protobuf
or JSON field set to an extreme value, a dataset declared huge), since blind flips rarely get
past a checksum-free parser's first field. Files that need the compiler (a kernel library, a
module archive) are made by the test beforehand in ``$KILN_HOSTILE_FIXTURES``.
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


# -- TFLite ---------------------------------------------------------------------------------------
def tflite_loader():
    sys.path.insert(0, FRONTEND_TESTS)
    import tflite_builder

    from kiln.relay.frontend import from_tflite
    seeds = [tflite_builder.mobilenet_like(image=8, classes=3)]
    return (lambda path: from_tflite(path)), "model.tflite", blind(seeds), seeds[0]


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
           "graph": graph_loader, "tar": tar_loader, "script": script_loader}
