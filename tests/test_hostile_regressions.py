"""One regression test per hostile-input defect of issue 29 (Python loaders): each failed before the
fix (raw exception, multi-GB allocation or a file left behind). Bomb cases run in a forked child
under RLIMIT_AS (tests/helpers/hostile.py) and assert its peak RSS."""

import os
import sys
import tarfile

import numpy as np
import pytest

from kiln.errors import FileFormatError, KilnError, SizeLimitError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))
import hostile  # noqa: E402

MiB = 1 << 20


def _onnx(nodes, inits, out_shape=(2, 3)):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _bomb(load, name, data, tmp_path):
    result = hostile.run_case(load, name, data, str(tmp_path))
    assert result["outcome"] == "kiln", result
    assert result["peak_rss"] < 64 * MiB, result
    return result


def test_onnx_constant_of_shape_bomb_is_refused_before_allocating(tmp_path):
    from onnx import helper

    from kiln.relay.frontend.onnx import from_onnx
    data = _onnx([helper.make_node("ConstantOfShape", ["s"], ["y"], value=helper.make_tensor("v", 1, [1], [1.0]))],
                 {"s": np.array([20000, 20000], "int64")})
    assert len(data) < 200  # a few bytes declaring 1.6 GB
    path = tmp_path / "cos.onnx"
    path.write_bytes(data)
    with pytest.raises(SizeLimitError, match=r"cos\.onnx: ConstantOfShape .* needs 1\.5 GiB .* KILN_LOAD_EXPANSION"):
        from_onnx(str(path))
    result = _bomb(lambda p: from_onnx(p), "cos.onnx", data, tmp_path)
    assert "SizeLimitError" == result["type"]


def test_onnx_range_bomb_is_refused(tmp_path):
    from onnx import helper

    from kiln.relay.frontend.onnx import from_onnx
    data = _onnx([helper.make_node("Range", ["a", "b", "c"], ["y"])],
                 {"a": np.array(0, "float32"), "b": np.array(1e12, "float32"), "c": np.array(1, "float32")}, (1,))
    _bomb(lambda p: from_onnx(p), "range.onnx", data, tmp_path)


def test_onnx_undefined_tensor_is_named_not_a_key_error():
    from onnx import helper

    from kiln.relay.frontend.onnx import from_onnx
    import onnx
    model = onnx.load_from_string(_onnx([helper.make_node("Relu", ["nowhere"], ["y"])], {}))
    with pytest.raises(FileFormatError, match=r"node 0 \(Relu .*\): reads undefined tensors \['nowhere'\]"):
        from_onnx(model)


def test_onnx_empty_file_and_folder_say_so(tmp_path):
    from kiln.relay.frontend.onnx import from_onnx
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(FileFormatError, match=r"empty\.onnx: file: is empty \(0 bytes\), not an ONNX model"):
        from_onnx(str(tmp_path / "empty.onnx"))
    with pytest.raises(FileFormatError, match="is a directory, not a file"):
        from_onnx(str(tmp_path))
    import onnx
    with pytest.raises(FileFormatError, match=r"from_onnx: model: is empty \(0 bytes"):  # tvmc loads it first
        from_onnx(onnx.load(str(tmp_path / "empty.onnx")))
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 40)
    with pytest.raises(FileFormatError, match=r"junk\.onnx: file: is not an ONNX model"):
        from_onnx(str(tmp_path / "junk.onnx"))


def test_keras_fill_value_bomb_is_refused_before_reading(tmp_path):
    import hostile_seeds

    from kiln.relay.frontend import from_keras
    path = tmp_path / "bomb.h5"
    data = hostile_seeds._keras_seed(str(path), huge=(1 << 16, 1 << 16))  # 16 GiB of float32 fill value
    assert len(data) < 200_000
    with pytest.raises(SizeLimitError, match=r"bomb\.h5: model_weights/dense/dense/kernel:0 \(shape \[65536, 65536\]"):
        from_keras(str(path), layout="NHWC")
    _bomb(lambda p: from_keras(p, layout="NHWC"), "bomb.h5", data, tmp_path)


def _keras_zip_bomb(path, inflated=160 * MiB):
    """A .keras archive whose weights member inflates to ``inflated`` bytes of zeros (DEFLATE
    squeezes them about 1000:1, so the file is a few hundred KB)."""
    import json
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", json.dumps({"class_name": "Sequential", "config": {"layers": []}}))
        with z.open("model.weights.h5", "w", force_zip64=True) as member:
            chunk = bytes(8 * MiB)
            for _ in range(inflated // len(chunk)):
                member.write(chunk)
    with open(path, "rb") as f:
        return f.read()


def test_keras_archive_zip_bomb_is_refused_before_inflating(tmp_path):
    from kiln.relay.frontend import from_keras
    path = tmp_path / "bomb.keras"
    data = _keras_zip_bomb(str(path))
    assert len(data) < 1 * MiB
    with pytest.raises(SizeLimitError, match=r"bomb\.keras: model\.weights\.h5 \(compressed\) needs 160\.0 MiB"):
        from_keras(str(path), layout="NHWC")
    _bomb(lambda p: from_keras(p, layout="NHWC"), "bomb.keras", data, tmp_path)


def test_keras_archive_damage_is_one_kiln_error(tmp_path):
    from kiln.relay.frontend import from_keras
    path = tmp_path / "bomb.keras"
    data = bytearray(_keras_zip_bomb(str(path), inflated=8 * MiB))
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(range(64))  # inside the DEFLATE stream of the weights
    path.write_bytes(bytes(data))
    with pytest.raises(FileFormatError, match=r"bomb\.keras: model\.weights\.h5: cannot be read"):
        from_keras(str(path), layout="NHWC")


def _sparse_tar(path, size=2 << 30):
    """An old-GNU sparse member: one 512-byte chunk at the end of a ``size``-byte file."""
    header = bytearray(512)

    def put(at, value):
        header[at:at + len(value)] = value
    put(0, b"lib0.o")
    put(100, b"0000644\0")
    put(108, b"0000000\0")
    put(116, b"0000000\0")
    put(124, b"%011o\0" % 512)
    put(136, b"00000000000\0")
    put(156, b"S")
    put(257, b"ustar  \0")
    put(386, b"%011o\0" % (size - 512))
    put(398, b"%011o\0" % 512)
    put(483, b"%011o\0" % size)
    put(148, b" " * 8)
    put(148, b"%06o\0 " % sum(header))
    with open(path, "wb") as f:
        f.write(bytes(header) + b"\x7fELF" + b"\0" * 508 + b"\0" * 1024)


def test_sparse_tar_member_is_refused_and_nothing_is_written(tmp_path):
    from kiln.runtime.module import load_module
    path = tmp_path / "sparse.tar"
    _sparse_tar(path)
    with tarfile.open(path) as t:
        assert t.getmembers()[0].issparse() and t.getmembers()[0].size == 2 << 30
    with pytest.raises(KilnError, match=r"sparse\.tar: member 'lib0\.o' is a sparse file \(declares 2147483648 bytes\)"):
        load_module(str(path))
    assert sorted(os.listdir(tmp_path)) == ["sparse.tar"]
    _bomb(lambda p: load_module(p), "sparse.tar", path.read_bytes(), tmp_path)


def test_failed_tar_load_leaves_no_so_behind(tmp_path):
    import io
    import json

    from kiln.runtime.module import load_module
    from kiln.runtime.compiled import host_arch  # noqa: F401  (the archive names this machine's triple)
    import kiln as tvm
    from kiln import te
    a = te.placeholder((4,), name="a")
    b = te.compute((4,), lambda i: a[i] + 1.0, name="b")
    good = tmp_path / "good.tar"
    tvm.build(te.create_schedule(b.op), [a, b], target="llvm", name="inc").export_library(str(good))
    # Same metadata, but an object that is not ELF: the link fails after the .so path was chosen.
    bad = tmp_path / "bad.tar"
    with tarfile.open(good) as src, tarfile.open(bad, "w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.name != "lib0.o" else b"not an object" * 10
            info = tarfile.TarInfo(m.name)
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    with pytest.raises(KilnError):
        load_module(str(bad))
    assert not (tmp_path / "bad.tar.so").exists()
    json  # metadata kept as is


def test_load_module_of_a_folder_says_folder(tmp_path):
    from kiln.runtime.module import load_module
    with pytest.raises(KilnError, match="is a directory"):
        load_module(str(tmp_path))


def test_graph_json_tib_shape_is_refused_before_allocating(tmp_path):
    import json

    import kiln
    from kiln.runtime.graph_executor import GraphExecutor
    graph = {"nodes": [{"op": "null", "name": "x", "inputs": []}], "arg_nodes": [0], "heads": [[0, 0, 0]],
             "node_row_ptr": [0, 1], "attrs": {"shape": ["list_shape", [[1 << 20, 1 << 20]]],
                                               "dltype": ["list_str", ["float32"]], "storage_id": ["list_int", [0]]}}
    with pytest.raises(SizeLimitError, match=r"attrs\.shape\[0\] needs 4096\.0 GiB"):
        GraphExecutor(json.dumps(graph), None, kiln.cpu(0))
    _bomb(lambda p: GraphExecutor(open(p).read(), None, kiln.cpu(0)), "mod.json", json.dumps(graph).encode(), tmp_path)
    graph["heads"] = [[3, 0, 0]]
    with pytest.raises(FileFormatError, match=r"heads\[0\]: reads node 3"):
        GraphExecutor(json.dumps(graph).replace("1048576", "2"), None, kiln.cpu(0))


def test_params_blob_declaring_more_than_it_holds(tmp_path):
    from kiln.runtime.params import load_params, save_params
    blob = bytearray(save_params({"w": np.ones((2, 2), "float32")}))
    blob[8:16] = (1 << 40).to_bytes(8, "little")  # a count of 2**40 arrays in a 70-byte blob
    with pytest.raises(SizeLimitError, match=r"count is 1099511627776, more than the \d+ this file can hold"):
        load_params(bytes(blob))
    blob = bytearray(save_params({"w": np.ones((2, 2), "float32")}))
    with pytest.raises(FileFormatError, match=r"array 'w' data: holds 16 bytes but shape \(\d, \d\) of float32 needs 24"):
        load_params(bytes(blob).replace((2).to_bytes(8, "little") + (2).to_bytes(8, "little"),
                                        (2).to_bytes(8, "little") + (3).to_bytes(8, "little")))


def test_limits_accept_real_model_sizes(tmp_path):
    """Under the default limits: a GPT-2-sized embedding (50257 x 768 float32, 154 MB) imports,
    and a ResNet-50-sized parameter blob (25.6 M float32 values, 102 MB) loads."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from kiln import config
    from kiln.relay.frontend.onnx import from_onnx
    from kiln.runtime.params import load_params, save_params
    assert config.get().load_limit == 4 << 30 and config.get().load_expansion == 64 << 20
    emb = np.zeros((50257, 768), "float32")
    emb[7] = 1.5
    graph = helper.make_graph([helper.make_node("Gather", ["wte", "ids"], ["y"], axis=0)], "gpt2_wte",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 768])],
                              [numpy_helper.from_array(emb, "wte")])
    path = tmp_path / "wte.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    del emb
    assert path.stat().st_size > 154_000_000
    mod, params = from_onnx(str(path), freeze_params=False)
    assert params["wte"].shape == (50257, 768) and params["wte"][7, 0] == 1.5
    del mod, params
    rng = np.random.default_rng(0)
    resnet50 = {f"conv{i}": rng.standard_normal((256, 256, 3, 3)).astype("float32") for i in range(43)}
    resnet50["fc"] = rng.standard_normal((1000, 2048)).astype("float32")
    blob = save_params(resnet50)
    assert len(blob) > 100_000_000
    loaded = load_params(blob, copy=False)
    assert set(loaded) == set(resnet50) and np.array_equal(loaded["fc"], resnet50["fc"])


# -- the converters fuzzed by the onnx_ops and tflite_quant cases (tests/helpers/hostile_seeds.py) --

def _op_seed(index, opset=None):
    """One of hostile_seeds' ONNX op seeds as a ModelProto: 0 QDQ, 1 QOperator, 2 LSTM/GRU/RNN,
    3 bfloat16, 4 Attention/RotaryEmbedding/RMSNormalization, 5 NonZero/Unique/NMS/Conv3D."""
    import hostile_seeds
    import onnx
    m = onnx.load_from_string(hostile_seeds._onnx_op_seeds()[index])
    if opset is not None:
        m.opset_import[0].version = opset
    return m


def _set_init(model, name, value):
    from onnx import numpy_helper
    for i, t in enumerate(model.graph.initializer):
        if t.name == name:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.asarray(value), name))
            return model
    raise KeyError(name)


def _node(model, name):
    return next(n for n in model.graph.node if n.name == name)


@pytest.mark.parametrize("init, node", [("w", "QLinearConv node 'qconv': input w"),
                                        ("m", "QLinearMatMul node 'qmm': input b"),
                                        ("m2", "MatMulInteger node 'mmi': input b")])
def test_onnx_quantized_0d_operand_is_named_not_an_index_error(init, node):
    from kiln.relay.frontend.onnx import from_onnx
    model = _set_init(_op_seed(1), init, np.array(3, "uint8" if init != "w" else "int8"))
    with pytest.raises(FileFormatError, match=node + r" has shape \[\]; it needs \d or more dimensions"):
        from_onnx(model)


def test_onnx_matmul_of_a_0d_initializer_is_named():
    from kiln.relay.frontend.onnx import from_onnx
    model = _set_init(_op_seed(0), "mq", np.array(3, "uint8"))  # DequantizeLinear -> 0-d MatMul operand
    with pytest.raises(FileFormatError, match=r"MatMul node 'mm': inputs of shapes \[1, 64\] and \[\]"):
        from_onnx(model)


def test_onnx_unique_axis_of_a_0d_input_is_named_not_a_zero_division():
    from kiln.relay.frontend.onnx import from_onnx
    model = _set_init(_op_seed(5), "u", np.array(7, "int64"))
    with pytest.raises(FileFormatError, match=r"Unique node 'unique': attribute axis=0 is outside the input's 0 dim"):
        from_onnx(model)


def test_onnx_op_newer_than_the_opset_gets_its_arity_checked():
    # RMSNormalization is opset 23: at opset 17 get_schema had none, so nothing checked its arity
    # and the converter met a short input list (IndexError); now its newest schema checks it
    from kiln.relay.frontend.onnx import from_onnx
    model = _op_seed(4, opset=17)
    del _node(model, "rms").input[1:]
    with pytest.raises(FileFormatError, match=r"node 0 \(RMSNormalization 'rms'\): has 1 inputs; RMSNormalization "
                                              r"takes 2 to 2"):
        from_onnx(model)
    model = _op_seed(4, opset=17)
    _node(model, "rope").input[1] = ""  # an empty required input
    with pytest.raises(FileFormatError, match=r"node 1 \(RotaryEmbedding 'rope'\): leaves required input 1 empty"):
        from_onnx(model)


def test_onnx_attention_0d_mask_is_named():
    from kiln.relay.frontend.onnx import from_onnx
    model = _set_init(_op_seed(4), "mask", np.array(True))
    with pytest.raises(FileFormatError, match=r"Attention node 'attn': attn_mask is 0-d"):
        from_onnx(model)


def test_onnx_tib_graph_input_is_refused_before_inference_allocates(tmp_path):
    """A graph input declared (2**40, 3, 8): relay's slice inference probed it with np.empty
    (a MemoryError of 96 TiB, or worse under overcommit); now refused as the executor's buffer."""
    from kiln.relay.frontend.onnx import from_onnx
    model = _op_seed(4)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1 << 40
    with pytest.raises(SizeLimitError, match=r"graph input 'q' of shape \[1099511627776, 3, 8\] needs 98304\.0 GiB"):
        from_onnx(model)
    result = _bomb(lambda p: from_onnx(p), "tib.onnx", model.SerializeToString(), tmp_path)
    assert result["type"] == "SizeLimitError"


def _tfl(index, edit):
    """hostile_seeds' quantized TFLite spec ``index`` (2: int8 FULLY_CONNECTED x, w, b -> y; 0: int8
    CONV_2D) with ``edit(tensors, ops)`` applied, written as .tflite bytes."""
    import hostile_seeds
    tensors, buffers, ops, codes, inputs, outputs = hostile_seeds._tflite_quant_specs()[index]
    tensors, ops = list(tensors), list(ops)
    edit(tensors, ops)
    return hostile_seeds._tflite_write((tensors, buffers, ops, codes, inputs, outputs))


def _retype(tensors, k, dtype=None, quant=None):
    name, shape, old, buf, q = tensors[k]
    tensors[k] = (name, shape, dtype or old, buf, quant if quant is not None else q)


def test_tflite_quantized_output_of_int32_is_named_not_a_key_error():
    from kiln.relay.frontend import from_tflite
    data = _tfl(2, lambda t, o: _retype(t, 3, "int32"))
    with pytest.raises(FileFormatError, match=r"FULLY_CONNECTED.*reads int8 and writes int32"):  # was KeyError 'int32'
        from_tflite(data)
    # the MobileNet-like network's SOFTMAX (its table lookup read the output's integer range)
    specs = __import__("hostile_seeds")._tflite_quant_specs()
    prob = next(i for i, t in enumerate(specs[-1][0]) if t[0] == "prob")
    with pytest.raises(FileFormatError, match=r"SOFTMAX.*output 'prob' is int32 with quantization parameters"):
        from_tflite(_tfl(len(specs) - 1, lambda t, o: _retype(t, prob, "int32")))


def test_tflite_fully_connected_without_weights_is_named():
    from kiln.relay.frontend import from_tflite

    def drop(tensors, ops):
        code, ins, outs, options, fields = ops[0]
        ops[0] = (code, [ins[0], -1, ins[2]], outs, options, fields)
    with pytest.raises(FileFormatError, match=r"FULLY_CONNECTED.*has no weights \(input 1\)"):
        from_tflite(_tfl(2, drop))


def test_tflite_int32_zero_point_beyond_int32_is_named():
    from kiln.relay.frontend import from_tflite
    data = _tfl(2, lambda t, o: _retype(t, 2, quant=([0.0001], [1 << 40], 0)))
    with pytest.raises(FileFormatError, match=r"zero point \[1099511627776\] does not fit int32"):
        from_tflite(data)


def test_tflite_float_bias_of_a_quantized_conv_is_named():
    from kiln.relay.frontend import from_tflite

    def float_bias(tensors, ops):
        name, shape, _, buf, q = tensors[2]
        tensors[2] = (name, shape, "float32", buf, None)
    with pytest.raises(FileFormatError, match=r"CONV_2D.*the bias is float32; a quantized CONV_2D needs an int32 bias"):
        from_tflite(_tfl(0, float_bias))


def _index_model(op, idx, data_shape=(2, 3), out_shape=(2, 3), **attrs):
    from onnx import TensorProto, helper, numpy_helper
    ins = ["x", "i"] + (["u"] if op.startswith("Scatter") else [])
    inits = [numpy_helper.from_array(np.asarray(idx, "int64"), "i"),
             numpy_helper.from_array(np.ones(np.shape(idx), "float32"), "u")]
    graph = helper.make_graph([helper.make_node(op, ins, ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(data_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("op, idx, out_shape", [
    ("GatherElements", [[0, 5, 1], [1, 0, 0]], (2, 3)),        # read outside x at run time (SIGSEGV)
    ("GatherND", [[0, 7], [1, 1]], (2,)),                        # read outside x at run time (SIGSEGV)
    ("ScatterElements", [[0, 1, 1], [-3, 0, 0]], (2, 3)),        # wrote outside the output
    ("ScatterND", [[1, 3]], (2, 3)),
    ("Gather", [[0, 1], [2, 1]], (2, 2, 3)),                     # wrapped: a wrong answer, not ONNX's error
])
def test_onnx_constant_indices_out_of_range_are_refused_at_import(op, idx, out_shape):
    from kiln.relay.frontend.onnx import from_onnx
    model = _index_model(op, idx, out_shape=out_shape)
    with pytest.raises(FileFormatError, match=rf"{op} node .*: indices hold -?\d+ at \[.*\], outside the data's size"):
        from_onnx(model)


def test_onnx_rotary_positions_beyond_the_cache_are_refused():
    from kiln.relay.frontend.onnx import from_onnx
    model = _set_init(_op_seed(4), "pos", np.array([[0, 2, 5]], "int64"))  # the cos/sin cache has 5 rows
    with pytest.raises(FileFormatError, match=r"RotaryEmbedding node 'rope': position_ids hold 5 at \[0, 2\]"):
        from_onnx(model)


def test_onnx_negative_constant_indices_count_from_the_end():
    """What the check lets through still runs right: negative constant indices of GatherElements
    and GatherND (normalized at import) give numpy's answer."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.relay.frontend.onnx import from_onnx
    x = np.arange(6, dtype="float32").reshape(2, 3)
    for op, idx, out_shape, want in [
            ("GatherElements", [[-1, 0, -2], [1, -1, 0]], (2, 3), np.take_along_axis(x, np.array([[1, 0, 0], [1, 1, 0]]), 0)),
            ("GatherND", [[-1, -1], [0, -3]], (2,), np.array([x[1, 2], x[0, 0]]))]:
        mod, params = from_onnx(_index_model(op, idx, out_shape=out_shape))
        lib = relay.build(mod, target="llvm", params=params)
        gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
        gm.set_input("x", x)
        gm.run()
        np.testing.assert_array_equal(gm.get_output(0).numpy(), want)


@pytest.mark.parametrize("init, what", [("xz", "x_zero_point"), ("xs", "x_scale")])
def test_onnx_qlinear_conv_per_channel_input_params_are_refused_at_import(init, what):
    """x_zero_point of two values imported, then relay.build died in qnn canonicalize (TypeError:
    only 0-dimensional arrays ...); ONNX defines the input's parameters as scalars."""
    from kiln.relay.frontend.onnx import from_onnx
    model = _set_init(_op_seed(1), init, np.array([128, 128], "uint8") if init == "xz" else np.array([0.02, 0.02], "float32"))
    with pytest.raises(FileFormatError, match=rf"QLinearConv node 'qconv': {what} has 2 values \(shape \[2\]\); "
                                              rf"QLinearConv takes one \(per-tensor\) {what}"):
        from_onnx(model)
    model = _set_init(_op_seed(1), "xz", np.array([128, 128], "uint8"))
    convi = _node(model, "convi")  # moved first (it reads only x, w and xz), so it is converted first
    nodes = [convi] + [n for n in model.graph.node if n.name != "convi"]
    nodes = [type(convi).FromString(n.SerializeToString()) for n in nodes]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    with pytest.raises(FileFormatError, match=r"ConvInteger node 'convi': x_zero_point has 2 values"):
        from_onnx(model)


def test_onnx_cast_to_an_unknown_element_type_is_named_not_a_key_error():
    from onnx import helper

    from kiln.relay.frontend.onnx import from_onnx
    model = _op_seed(3)
    cast = _node(model, "cast")
    del cast.attribute[:]
    cast.attribute.append(helper.make_attribute("to", 0))
    with pytest.raises(FileFormatError, match=r"Cast node 'cast': attribute to=0 is not an ONNX element type"):
        from_onnx(model)


def test_onnx_unique_float_axis_is_named_not_an_overflow_error():
    from onnx import helper

    from kiln.relay.frontend.onnx import from_onnx
    model = _op_seed(5)
    unique = _node(model, "unique")
    keep = [a for a in unique.attribute if a.name != "axis"]
    del unique.attribute[:]
    unique.attribute.extend(keep + [helper.make_attribute("axis", float("inf"))])
    with pytest.raises(FileFormatError, match=r"Unique node 'unique': attribute axis=inf is outside"):
        from_onnx(model)


def test_onnx_empty_input_of_a_contrib_op_is_named_not_an_attribute_error():
    """onnxruntime's contrib ops have no ONNX schema: an empty name where QLinearConcat reads its
    second X reached the converter as None (AttributeError in type inference)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from kiln.relay.frontend.onnx import from_onnx
    node = helper.make_node("QLinearConcat", ["ys", "yz", "x", "xs", "xz", "", "xs", "xz"], ["y"], axis=1,
                            domain="com.microsoft", name="qcat")
    inits = [numpy_helper.from_array(np.float32(0.1), "ys"), numpy_helper.from_array(np.uint8(128), "yz"),
             numpy_helper.from_array(np.float32(0.1), "xs"), numpy_helper.from_array(np.uint8(128), "xz")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(FileFormatError, match=r"QLinearConcat node 'qcat': an input it needs is missing"):
        from_onnx(model)
    model.graph.node[0].input[5] = "x"  # the same model with the input named imports
    mod, _ = from_onnx(onnx.load_from_string(model.SerializeToString()))
    assert [int(d) for d in mod["main"].checked_type.ret_type.shape] == [1, 4]


@pytest.mark.parametrize("axis, x_shape", [(-1, []), (3, [1, 3, 8]), (-4, [1, 3, 8])])
def test_onnx_rms_norm_axis_outside_the_input_is_named(axis, x_shape):
    """A 0-d input was a ZeroDivisionError; an axis past the rank wrapped around silently."""
    from onnx import helper

    from kiln.relay.frontend.onnx import from_onnx
    model = _op_seed(4)
    rms = _node(model, "rms")
    keep = [a for a in rms.attribute if a.name != "axis"]
    del rms.attribute[:]
    rms.attribute.extend(keep + [helper.make_attribute("axis", axis)])
    dims = model.graph.input[0].type.tensor_type.shape.dim
    del dims[:]
    for d in x_shape:
        dims.add().dim_value = d
    with pytest.raises(FileFormatError, match=rf"RMSNormalization node 'rms': attribute axis={axis} is outside the "
                                              rf"input's {len(x_shape)} dimensions"):
        from_onnx(model)


@pytest.mark.parametrize("ratio", [float("nan"), -1.0, 1.0])
def test_onnx_training_dropout_with_an_invalid_ratio_is_refused(ratio):
    """training_mode true with ratio NaN or -1 imported as an identity (only ratio > 0 was refused)."""
    from kiln.relay.frontend.onnx import from_onnx
    model = _set_init(_set_init(_op_seed(3), "train", np.array(True)), "ratio", np.float32(ratio))
    with pytest.raises(FileFormatError, match=rf"Dropout node 'dropout': training_mode is true with ratio {ratio:g}, "
                                              r"outside \[0, 1\)"):
        from_onnx(model)
    model = _set_init(_set_init(_op_seed(3), "train", np.array(True)), "ratio", np.float32(0))
    from_onnx(model)  # ratio 0 in training mode is the identity: imported


def test_tflite_quantized_fully_connected_uint8_to_int16_is_refused():
    """uint8 in, int16 out: TFLite's kernel ignores the output zero point, kiln added it (an answer
    32 steps off TFLite's for zero point 32, found building fuzzed models against ai-edge-litert)."""
    from kiln.relay.frontend import from_tflite
    data = _tfl(5, lambda t, o: _retype(t, 3, "int16"))  # 5: uint8 FULLY_CONNECTED
    with pytest.raises(FileFormatError, match=r"FULLY_CONNECTED.*reads uint8 and writes int16; kiln imports a "
                                              r"quantized FULLY_CONNECTED whose input and output types match"):
        from_tflite(data)
    data = _tfl(0, lambda t, o: _retype(t, 3, "int16", quant=([0.05], [0], 0)))  # int8 CONV_2D writing int16
    with pytest.raises(FileFormatError, match=r"CONV_2D.*reads int8 and writes int16"):
        from_tflite(data)


@pytest.mark.parametrize("kind", ["avgpool", "maxpool"])
def test_tflite_quantized_pool_with_other_output_params_equals_tflite(kind):
    """TFLite's pooling kernels keep the stored integers when the output's scale or zero point
    differs from the input's; kiln requantized (7 steps off for a zero point 7 higher, 42 for
    1.5x the scale; found building fuzzed models against ai-edge-litert)."""
    pytest.importorskip("ai_edge_litert")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "relay", "frontend"))
    import hostile_seeds
    import tflite_builder as tb

    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.relay.frontend import from_tflite
    captured = []
    finish = tb.FlatModel.finish
    tb.FlatModel.finish = lambda self, i, o: captured.append((list(self.tensors), list(self.buffers), list(self.ops),
                                                              list(self.codes), list(i), list(o))) or finish(self, i, o)
    try:
        tb.single_op(kind, "int8", seed=1)
    finally:
        tb.FlatModel.finish = finish
    tensors, buffers, ops, codes, ins, outs = captured[0]
    name, shape, dtype, buf, (scales, zps, dim) = tensors[outs[0]]
    for scale, zp in [(scales[0], zps[0] + 7), (scales[0] * 1.5, zps[0])]:
        tensors[outs[0]] = (name, shape, dtype, buf, ([scale], [zp], dim))
        data = hostile_seeds._tflite_write((tensors, buffers, ops, codes, ins, outs))
        x = tb.random_feed(["x"], "int8", seed=2)
        mod, params = from_tflite(data)
        gm = graph_executor.GraphModule(relay.build(mod, target="llvm", params=params)["default"](kiln.cpu()))
        gm.set_input("x", x["x"])
        gm.run()
        np.testing.assert_array_equal(gm.get_output(0).numpy(), tb.run_tflite(data, x)[0])


def test_tflite_output_declared_without_shape_stays_nhwc():
    """A conv output declared with shape [] came back in kiln's internal NCHW, (1, 12, 8, 8): the
    transpose back to the file's NHWC looked at the declared rank (TFLite ignores that shape)."""
    from kiln.relay.frontend import from_tflite
    from kiln.relay.transform.infer_type import infer

    def no_shape(tensors, ops):
        name, _, dtype, buf, quant = tensors[3]
        tensors[3] = (name, (), dtype, buf, quant)
    mod, _ = from_tflite(_tfl(0, no_shape))  # 0: int8 3x3 CONV_2D, 16 -> 12 channels on 8x8
    assert [int(d) for d in infer(mod["main"]).checked_type.ret_type.shape] == [1, 8, 8, 12]


@pytest.mark.parametrize("inputs, match", [([0, 1], r"input tensor 'w' also holds constant data"),
                                           ([0, 0], r"inputs \[0, 0\] name a tensor twice")])
def test_tflite_subgraph_input_that_is_a_constant_or_twice_is_refused(inputs, match):
    """An input with a buffer: kiln read the buffer, TFLite the fed value (255 steps apart)."""
    import hostile_seeds

    from kiln.relay.frontend import from_tflite
    tensors, buffers, ops, codes, _, outputs = hostile_seeds._tflite_quant_specs()[2]  # int8 FULLY_CONNECTED
    with pytest.raises(FileFormatError, match=match):
        from_tflite(hostile_seeds._tflite_write((tensors, buffers, ops, codes, inputs, outputs)))


@pytest.mark.parametrize("spec, k, scale, op", [(3, 0, 1e38, "ADD"), (9, 0, 1e38, "MUL"), (9, 2, 1e-38, "MUL"),
                                                (2, 3, 1e-38, "FULLY_CONNECTED")])
def test_tflite_rescale_beyond_2_30_is_refused_at_import(spec, k, scale, op):
    """An input scale of 1e38 imported; relay.build then raised a bare ValueError ('requantize
    multiplier 3.06e+33 is too large'). 3: int8 ADD, 9: int8 MUL, 2: int8 FULLY_CONNECTED."""
    from kiln.relay.frontend import from_tflite

    def huge(tensors, ops):
        name, shape, dtype, buf, (scales, zps, dim) = tensors[k]
        tensors[k] = (name, shape, dtype, buf, ([scale], zps, dim))
    with pytest.raises(FileFormatError, match=rf"{op} \(output y\): a rescale multiplier made of the tensors' "
                                              r"scales is [0-9.e+]+, beyond the 2\*\*30"):
        from_tflite(_tfl(spec, huge))


@pytest.mark.parametrize("cache", ["cos", "sin"])
def test_onnx_rotary_0d_cache_is_named(cache):
    from kiln.relay.frontend.onnx import from_onnx
    model = _set_init(_op_seed(4), cache, np.float32(1))
    with pytest.raises(FileFormatError, match=rf"RotaryEmbedding node 'rope': {cache}_cache has shape \[\]; it needs"):
        from_onnx(model)


def test_tflite_add_with_one_input_is_named_not_an_index_error():
    from kiln.relay.frontend import from_tflite

    def one_input(tensors, ops):
        code, ins, outs, options, fields = ops[0]
        ops[0] = (code, ins[:1], outs, options, fields)
        for k in (ins[0], outs[0]):  # no quantization parameters: the plain converter, which read ins[1]
            name, shape, dtype, buf, _ = tensors[k]
            tensors[k] = (name, shape, dtype, buf, None)
    with pytest.raises(FileFormatError, match=r"ADD \(output y\): has 1 inputs; ADD takes two"):
        from_tflite(_tfl(3, one_input))  # 3: int8 ADD


def test_tflite_quantized_pool_of_a_float_input_is_named_not_a_key_error():
    import hostile_seeds

    from kiln.relay.frontend import from_tflite
    specs = hostile_seeds._tflite_quant_specs()
    relu6 = next(i for i, t in enumerate(specs[-1][0]) if t[0] == "relu6")  # the avgpool's input
    with pytest.raises(FileFormatError, match=r"AVERAGE_POOL_2D \(output avgpool\): reads float32 and writes int8"):
        from_tflite(_tfl(len(specs) - 1, lambda t, o: _retype(t, relu6, "float32")))


@pytest.mark.parametrize("node, attr, value, match", [
    ("conv3d", "group", 0.0, r"Conv node 'conv3d': attribute group=0.0 must be a positive integer"),  # ZeroDivisionError
    ("conv3d", "group", 0, r"Conv node 'conv3d': attribute group=0 must be a positive integer"),
    ("lstm", "layout", float("inf"), r"LSTM node 'lstm': attribute layout=inf must be 0"),  # OverflowError
])
def test_onnx_conv3d_group_and_recurrent_layout_of_the_wrong_kind_are_named(node, attr, value, match):
    from onnx import helper

    from kiln.relay.frontend.onnx import from_onnx
    model = _op_seed(5 if node == "conv3d" else 2)
    n = _node(model, node)
    keep = [a for a in n.attribute if a.name != attr]
    del n.attribute[:]
    n.attribute.extend(keep + [helper.make_attribute(attr, value)])
    with pytest.raises(FileFormatError, match=match):
        from_onnx(model)
