"""ai.onnx.ml Binarizer and ArrayFeatureExtractor, MelWeightMatrix (computed at import) and N-d Col2Im,
against onnxruntime (Col2Im against a numpy loop)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

ort = pytest.importorskip("onnxruntime")


def _run_both(model, feed):
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.run(**feed)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())], want


def test_binarizer_and_array_feature_extractor():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7)).astype("float32")
    idx = np.array([6, 0, 3, 3], "int64")
    nodes = [helper.make_node("Binarizer", ["x"], ["b"], domain="ai.onnx.ml", threshold=0.25),
             helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["f"], domain="ai.onnx.ml")]
    graph = helper.make_graph(nodes, "ml", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("f", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(idx, "i")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)])
    got, want = _run_both(model, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("bins, dft, rate, lo, hi", [(8, 16, 8192, 0.0, 4096.0), (20, 400, 16000, 60.0, 7600.0)])
def test_mel_weight_matrix(bins, dft, rate, lo, hi):
    inits = [numpy_helper.from_array(np.array(v, d), n) for v, d, n in
             ((bins, "int32", "n"), (dft, "int32", "d"), (rate, "int32", "r"), (lo, "float32", "lo"), (hi, "float32", "hi"))]
    x = np.ones((1, dft // 2 + 1), "float32")
    nodes = [helper.make_node("MelWeightMatrix", ["n", "d", "r", "lo", "hi"], ["m"]),
             helper.make_node("MatMul", ["x", "m"], ["y"])]
    graph = helper.make_graph(nodes, "mel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


def _col2im_numpy(x, image, block, strides, dil, pads):
    d = len(image)
    n, ckk, _ = x.shape
    kvol = int(np.prod(block))
    padded = [image[a] + pads[a] + pads[a + d] for a in range(d)]
    span = [(padded[a] - dil[a] * (block[a] - 1) - 1) // strides[a] + 1 for a in range(d)]
    out = np.zeros((n, ckk // kvol, *padded), x.dtype)
    for row in range(ckk):
        ch, k = divmod(row, kvol)
        koff = np.unravel_index(k, block)
        for col in range(x.shape[2]):
            pos = np.unravel_index(col, span)
            at = tuple(pos[a] * strides[a] + koff[a] * dil[a] for a in range(d))
            out[(slice(None), ch) + at] += x[:, row, col]
    return out[(slice(None), slice(None)) + tuple(slice(pads[a], pads[a] + image[a]) for a in range(d))]


def test_col2im_3d_with_pads_strides_dilations():
    from kiln.relay.frontend.onnx.backend import KilnBackend

    image, block, strides, dil, pads = [5, 6, 4], [2, 3, 2], [1, 2, 1], [2, 1, 1], [1, 0, 1, 0, 1, 1]
    span = [(image[a] + pads[a] + pads[a + 3] - dil[a] * (block[a] - 1) - 1) // strides[a] + 1 for a in range(3)]
    x = np.random.default_rng(1).standard_normal((2, 2 * 12, int(np.prod(span)))).astype("float32")
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=strides, dilations=dil, pads=pads)
    (y,) = KilnBackend.run_node(node, [x, np.array(image, "int64"), np.array(block, "int64")], opset_version=18)
    np.testing.assert_allclose(y, _col2im_numpy(x, image, block, strides, dil, pads), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_vectorizer_matches_onnxruntime(mode):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 5, (3, 12)).astype("int32")
    unigrams, bigrams, trigrams = [1, 3], [0, 1, 2, 2, 4, 0], [1, 1, 2]
    pool = np.array(unigrams + bigrams + trigrams, "int64")
    counts = [0, len(unigrams), len(unigrams) + len(bigrams)]
    n_grams = len(unigrams) + len(bigrams) // 2 + len(trigrams) // 3
    index = rng.permutation(n_grams)  # output column of each pool n-gram
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=1, max_gram_length=3,
                            max_skip_count=2, ngram_counts=counts, ngram_indexes=index.tolist(), pool_int64s=pool.tolist(),
                            weights=rng.uniform(0.5, 2, n_grams).astype("float32").tolist())  # per output column
    graph = helper.make_graph([node], "tfidf", [helper.make_tensor_value_info("x", TensorProto.INT32, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
