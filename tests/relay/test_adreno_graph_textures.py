"""Adreno graphs whose tensors between operators are images (docs/adreno.md, "Graph entries in
textures"): NCHW4c activations and OIHW4o weights as graph entries in ``global.texture*``,
``storage_scope`` in mod.json, kernels reading and writing ``image2d_t`` with no packing, the
Python graph executor allocating images; on the first OpenCL device (PoCL here), vs numpy."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.topi.testing import conv2d_nchw_python, depthwise_conv2d_nchw_python, pool2d_python

pytestmark = pytest.mark.opencl

ADRENO = "opencl -device=adreno"
RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((8, 3, 3, 3)).astype("float32") * 0.3
B1 = RNG.standard_normal(8).astype("float32")
W2 = RNG.standard_normal((8, 8, 1, 1)).astype("float32") * 0.3
W3 = RNG.standard_normal((8, 1, 3, 3)).astype("float32") * 0.3
W4 = RNG.standard_normal((12, 16, 3, 3)).astype("float32") * 0.2
DATA = RNG.standard_normal((1, 3, 16, 16)).astype("float32")


def network():
    """conv (RGB input) -> 1x1 conv + depthwise conv -> add -> channel concat -> max pool ->
    avg pool -> strided conv -> global avg pool: every texture op of an Adreno graph."""
    x = relay.var("data", shape=DATA.shape)
    a = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, relay.const(W1), padding=(1, 1)), relay.const(B1)))
    b = relay.nn.relu(relay.nn.conv2d(a, relay.const(W2)))
    c = relay.nn.conv2d(a, relay.const(W3), padding=(1, 1), groups=8)
    d = relay.add(b, c)
    e = relay.concatenate([d, a], axis=1)
    f = relay.nn.max_pool2d(e, (2, 2), (2, 2))
    g = relay.nn.avg_pool2d(f, (3, 3), (1, 1), padding=(1, 1))
    h = relay.nn.conv2d(g, relay.const(W4), strides=(2, 2), padding=(1, 1))
    return tvm.IRModule.from_expr(relay.Function([x], relay.nn.global_avg_pool2d(h)))


def reference():
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    a = relu(conv2d_nchw_python(DATA, W1, 1, 1) + B1.reshape(1, 8, 1, 1))
    b = relu(conv2d_nchw_python(a, W2, 1, 0))
    c = depthwise_conv2d_nchw_python(a, W3, 1, 1)
    e = np.concatenate([b + c, a], axis=1)
    f = pool2d_python(e, (2, 2), (2, 2), (0, 0, 0, 0), "max")
    g = pool2d_python(f, (3, 3), (1, 1), (1, 1, 1, 1), "avg", count_include_pad=False)  # relay's default
    h = conv2d_nchw_python(g, W4, 2, 1)
    return h.mean(axis=(2, 3), keepdims=True)


def build(target=ADRENO, textures=True, accumulation=None):
    mod = network()
    if accumulation:
        mod = relay.transform.InferType()(mod)
        mod = relay.transform.ToMixedPrecision("float16", accumulation_dtype=accumulation)(mod)
    with tvm.transform.PassContext(opt_level=3, config={"relay.backend.adreno_textures": textures}):
        return relay.build(mod, target=tvm.target.Target(target, host="llvm"))


def run(lib):
    g = graph_executor.GraphModule(lib["default"](tvm.cl(0)))
    g.set_input("data", DATA.astype(g.get_input(0).dtype))
    g.run()
    return g, g.get_output(0).numpy()


def source(lib) -> str:
    return [m for m in lib.get_lib().imported_modules if m.type_key == "opencl"][0].get_source()


def test_graph_on_textures_matches_numpy():
    lib = build()
    _, got = run(lib)
    np.testing.assert_allclose(got, reference(), rtol=1e-4, atol=1e-4)


def test_storage_scope_records_every_entry():
    graph = json.loads(build().get_graph_json())
    attrs = graph["attrs"]
    kind, scopes = attrs["storage_scope"]
    assert kind == "list_str" and len(scopes) == len(attrs["storage_id"][1]) == graph["node_row_ptr"][-1]
    assert set(scopes) <= {"global", "global.texture", "global.texture-weight"}
    shapes = attrs["shape"][1]
    for e, scope in enumerate(scopes):
        if scope != "global":
            assert len(shapes[e]) == 5 and shapes[e][4] == 4, (e, shapes[e])
    # data in and result out stay NCHW buffers; activations and weights between them are images
    data_entry = graph["node_row_ptr"][graph["arg_nodes"][0]]
    assert scopes[data_entry] == "global"
    for nid, k, _ in graph["heads"]:
        assert scopes[graph["node_row_ptr"][nid] + k] == "global"
    assert scopes.count("global.texture") >= 6
    weights = [e for e, s in enumerate(scopes) if s == "global.texture-weight"]
    assert len(weights) == 4
    # an image is shared only by entries of the same scope, shape and dtype
    by_sid: dict = {}
    for e, sid in enumerate(attrs["storage_id"][1]):
        by_sid.setdefault(sid, set()).add((scopes[e], tuple(shapes[e]) if scopes[e] != "global" else None,
                                           attrs["dltype"][1][e] if scopes[e] != "global" else None))
    for sid, kinds in by_sid.items():
        assert len({k[0] for k in kinds}) == 1, (sid, kinds)
        if next(iter(kinds))[0] != "global":
            assert len(kinds) == 1, (sid, kinds)


def test_kernels_read_and_write_images_without_packing():
    src = source(build())
    convs = [line for line in src.splitlines() if line.startswith("__kernel") and "conv2d" in line]
    assert len(convs) >= 4
    for sig in convs[1:]:  # the first conv reads the RGB graph input from its buffer
        assert sig.count("__read_only image2d_t") >= 2 and "__write_only image2d_t" in sig, sig
    assert "write_imagef" in src and "read_imagef" in src
    assert not re.search(r"\bp\d+_tex\b", src), "a kernel packs its input into a texture per call"


def test_executor_allocates_images_for_texture_entries():
    from kiln.runtime.devices.opencl import API

    lib = build()
    g, _ = run(lib)
    scopes = json.loads(lib.get_graph_json())["attrs"]["storage_scope"][1]
    entries = g.module.entries
    for arr, scope in zip(entries, scopes):
        is_image = API.image_of(arr._tensor.data) is not None
        assert is_image == (scope != "global"), scope


def test_texture_and_buffer_builds_agree():
    tex, plain = build(), build(textures=False)
    assert "storage_scope" not in json.loads(plain.get_graph_json())["attrs"]
    assert "image2d_t" not in source(plain)
    np.testing.assert_allclose(run(tex)[1], run(plain)[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("accumulation", ["float32", "float16"])
def test_float16_graph_on_half_images(accumulation):
    lib = build(accumulation=accumulation)
    scopes = json.loads(lib.get_graph_json())["attrs"]
    images = [(d, s) for d, s in zip(scopes["dltype"][1], scopes["storage_scope"][1]) if s != "global"]
    assert {d for d, s in images if s == "global.texture-weight"} == {"float16"}  # CL_HALF_FLOAT weights
    assert sum(d == "float16" for d, s in images if s == "global.texture") >= 6  # and activations
    _, got = run(lib)
    want = reference()
    np.testing.assert_allclose(got.astype("float32"), want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


def test_small_spatial_limit_keeps_large_entries_in_buffers():
    # 16 texels: the 16x16 activations (N*C*H = 32 rows) no longer fit, the 8x8 and 4x4 ones do.
    lib = build(target=ADRENO + " -texture_spatial_limit=16")
    graph = json.loads(lib.get_graph_json())
    scopes, shapes = graph["attrs"]["storage_scope"][1], graph["attrs"]["shape"][1]
    for scope, shape in zip(scopes, shapes):
        if scope == "global.texture":
            assert shape[0] * shape[1] * shape[2] <= 16 and shape[3] <= 16, shape
    assert "global.texture" in scopes
    assert any(s == "global" and len(shape) == 5 and shape[2] == 16 for s, shape in zip(scopes, shapes))
    np.testing.assert_allclose(run(lib)[1], reference(), rtol=1e-4, atol=1e-4)
