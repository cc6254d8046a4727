"""Each oneDNN node kind against the numpy reference executor, one small graph per op."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.op.contrib.dnnl import partition_for_dnnl
from kiln.runtime.json_runtime import dnnl_available

MISSING = dnnl_available()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"needs oneDNN: {MISSING}")
RNG = np.random.default_rng(7)


def _const(*shape):
    return relay.const(RNG.standard_normal(shape).astype("float32"))


def _x(shape=(1, 6, 9, 9)):
    return relay.var("x", shape=shape)


def _cases():
    x = _x()
    v = relay.var("x", shape=(3, 10))
    y = relay.var("y", shape=(1, 6, 9, 9))
    r = relay.var("r", shape=(3, 7))
    s = relay.var("s", shape=(1, 5, 9, 9))
    a, b, c = relay.var("a", shape=(2, 5, 8)), relay.var("b", shape=(2, 6, 8)), relay.var("c", shape=(2, 8, 3))
    return {
        "sigmoid": ([x], relay.sigmoid(x)), "tanh": ([x], relay.tanh(x)), "exp": ([x], relay.exp(x)),
        "abs": ([x], relay.abs(x)), "sqrt": ([x], relay.sqrt(relay.abs(x))),
        "clip": ([x], relay.clip(x, -0.3, 0.4)),
        "sub_broadcast": ([x], relay.subtract(x, _const(6, 1, 1))),
        "div": ([x, y], relay.divide(x, relay.abs(y) + relay.const(np.float32(1.0)))),
        "max_min": ([x, y], relay.minimum(relay.maximum(x, y), _const(1, 1, 9))),
        "avg_pool_pad": ([x], relay.nn.avg_pool2d(x, (3, 3), (2, 2), padding=(1, 1), count_include_pad=True)),
        "avg_pool_nopad": ([x], relay.nn.avg_pool2d(x, (3, 3), (2, 2), padding=(1, 1))),
        "global_max": ([x], relay.nn.global_max_pool2d(x)),
        "grouped_dilated_conv": ([x], relay.nn.conv2d(x, _const(4, 3, 3, 3), padding=(2, 1, 2, 1), dilation=(2, 1),
                                                      groups=2, strides=(1, 2))),
        "depthwise_conv_relu": ([x], relay.nn.relu(relay.nn.bias_add(
            relay.nn.conv2d(x, _const(6, 1, 3, 3), padding=(1, 1), groups=6), _const(6)))),
        "dense_relu": ([v], relay.nn.relu(relay.nn.bias_add(relay.nn.dense(v, _const(7, 10)), _const(7)))),
        "softmax": ([x], relay.nn.softmax(x, axis=1)),
        "softmax_last": ([v], relay.nn.softmax(v)),
        "conv_softmax": ([x], relay.nn.softmax(relay.nn.conv2d(x, _const(5, 6, 1, 1)), axis=1)),
        "batch_matmul": ([a, b], relay.nn.batch_matmul(a, b)),
        "batch_matmul_nt": ([a, c], relay.nn.batch_matmul(a, c, transpose_b=False)),
        "dense_sum": ([v, r], relay.add(relay.nn.dense(v, _const(7, 10)), r)),
        "conv_sum": ([x, s], relay.add(s, relay.nn.conv2d(x, _const(5, 6, 3, 3), padding=(1, 1)))),
    }


@pytest.mark.parametrize("name", sorted(_cases()))
def test_op_matches_reference(name):
    params, out = _cases()[name]
    names = {p.name_hint: p for p in params}
    mod = tvm.IRModule.from_expr(relay.Function(params, out))
    part = partition_for_dnnl(mod)
    assert any(n.startswith("tvmgen_default_dnnl_main_") for n in part), name
    composites = {"dense_sum": "dnnl.dense_sum", "conv_sum": "dnnl.conv2d_sum", "dense_relu": "dnnl.dense_bias_relu"}
    if name in composites:  # the residual add / bias / relu run as oneDNN post-ops of the layer
        from kiln.relay.backend.contrib.dnnl import dnnl_codegen
        (fn,) = [part[n] for n in part if n.startswith("tvmgen_")]
        assert [n["name"] for n in dnnl_codegen(fn).graph["nodes"]] == [composites[name]]
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(part, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    ins = {k: RNG.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
           for k, p in names.items()}
    for k, val in ins.items():
        m.set_input(k, val)
    m.run()
    want = relay.create_executor("debug", mod).evaluate()(*ins.values())
    want = np.asarray(getattr(want, "numpy", lambda: want)())
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)
