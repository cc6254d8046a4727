"""The Python graph executor's texture entries (attrs.storage_scope, docs/adreno.md): images
folded as the library's kernels were (within its -texture_spatial_limit), and OpenCL launches
refusing a buffer where a kernel takes an image (and the reverse); on the first OpenCL device."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import graph_executor
from kiln.errors import KilnError
from kiln.ir.module import IRModule
from kiln.te.lower import lower_to_primfunc

pytestmark = pytest.mark.opencl

# global.texture folds N*C*H x W = 40 x 2 texels: wider than 32, so a library built with
# -texture_spatial_limit=32 folds it N*C x H*W = 4 x 20 (what the images must follow too).
SHAPE = (1, 4, 10, 2, 4)
TEX = "global.texture"


def _kernel(name, scopes, fn):
    x = te.placeholder(SHAPE, name="x")
    out = te.compute(SHAPE, lambda *i: fn(x(*i)), name="out")
    s = te.create_schedule(out.op)
    n, c, h, w, k = s[out].op.axis
    s[out].bind(s[out].fuse(s[out].fuse(n, c), h), te.thread_axis("blockIdx.x"))
    s[out].bind(w, te.thread_axis("threadIdx.x"))
    s[out].vectorize(k)
    f = lower_to_primfunc(s, [x, out], name)
    bm = {p: dataclasses.replace(f.buffer_map[p], scope=sc) for p, sc in zip(f.params, scopes)}
    return dataclasses.replace(f, buffer_map=bm).with_attr("global_symbol", name)


def _library(limit):
    if not tvm.cl(0).exist:
        pytest.skip("no OpenCL device")
    mod = IRModule({"to_tex": _kernel("to_tex", ["global", TEX], lambda v: v * 2.0),
                    "from_tex": _kernel("from_tex", [TEX, "global"], lambda v: v + 1.0)})
    target = "opencl -device=adreno" + (f" -texture_spatial_limit={limit}" if limit else "")
    return tvm.build(mod, target=tvm.target.Target(target, host="llvm"))


def _graph():
    nodes = [{"op": "null", "name": "x", "inputs": []}]
    for i, func in enumerate(["to_tex", "from_tex"]):
        nodes.append({"op": "tvm_op", "name": func, "inputs": [[i, 0, 0]],
                      "attrs": {"func_name": func, "flatten_data": "0", "num_inputs": "1", "num_outputs": "1"}})
    return json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": [[2, 0, 0]], "node_row_ptr": [0, 1, 2, 3],
                       "attrs": {"shape": ["list_shape", [list(SHAPE)] * 3],
                                 "dltype": ["list_str", ["float32"] * 3],
                                 "storage_id": ["list_int", [0, 1, 2]],
                                 "storage_scope": ["list_str", ["global", TEX, "global"]]}})


@pytest.mark.parametrize("limit", [None, 32])
def test_images_follow_the_library_texture_limit(limit):
    from kiln.runtime.devices.opencl import API

    lib = _library(limit)
    g = graph_executor.create(_graph(), lib, tvm.cl(0))
    x = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    g.set_input("x", x)
    g.run()
    np.testing.assert_allclose(g.get_output(0).numpy(), x * 2.0 + 1.0, rtol=1e-6)
    image = API.image_of(g.module.entries[1]._tensor.data)
    assert image == ((20, 4) if limit == 32 else (2, 40))


def test_launch_refuses_a_buffer_for_an_image_and_the_reverse():
    lib = _library(None)
    dev = tvm.cl(0)
    buf = tvm.nd.array(np.zeros(SHAPE, "float32"), dev)
    img = tvm.nd.empty(SHAPE, "float32", dev, mem_scope=TEX)
    with pytest.raises(KilnError, match="image"):
        lib["to_tex"](buf, buf)  # its output is an image2d_t
    with pytest.raises(KilnError, match="image"):
        lib["from_tex"](img, img)  # its output is a buffer
    lib["to_tex"](buf, img)  # the right kinds run
