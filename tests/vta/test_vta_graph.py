"""Graph packing: a QNN ResNet-18 with its convs (all but the 3-channel stem) on the accelerator
and the rest on the CPU, bit-exact with kiln's int8 CPU build of the whole graph."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.vta import graph


def _cpu(mod, x):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(data=x)
    m.run()
    return m.get_output(0).numpy()


def _check(image, width):
    mod = graph.resnet18_qnn(image=image, width=width, classes=10)
    x = np.random.default_rng(1).integers(-128, 128, (1, 3, image, image)).astype(np.int8)
    want = _cpu(mod, x)
    packed = graph.graph_pack(mod)
    convs = [c.shape for c in packed.chains]
    assert len(convs) == 19 and all(s.c != 3 for s in convs)  # every conv but the stem
    got = packed.run(data=x)[0]
    assert len(np.unique(want)) > 5  # logits that differ: the comparison means something
    np.testing.assert_array_equal(got, want)
    return packed


def test_small_resnet18_packed_matches_cpu_build():
    _check(32, 16)


@pytest.mark.heavy
def test_resnet18_224_packed_matches_cpu_build():
    _check(224, 64)


def _quantized_resnet18(image):
    from kiln.relay import transform as T
    from kiln.relay.testing import resnet
    mod, params = resnet.get_workload(num_layers=18, image_shape=(3, image, image), num_classes=10)
    mod = T.BindParams(params)(mod)
    with tvm.transform.PassContext(opt_level=3):  # batch norms folded into the convs, as VTA's flow
        mod = T.Sequential([T.InferType(), T.SimplifyInference(), T.FoldConstant(), T.FoldScaleAxis(),
                            T.FoldConstant()])(mod)
    with relay.quantize.qconfig(weight_scale="power2", calibrate_mode="global_scale", global_scale=8.0):
        qmod = relay.quantize.quantize(mod)  # the stem (conv 0) stays float
    return qmod, T.Sequential([T.InferType(), T.FakeQuantizationToInteger(), T.InferType()])(qmod)


@pytest.mark.heavy
def test_relay_quantize_power2_resnet18_packed():
    qmod, fq = _quantized_resnet18(32)
    imod = graph.realize_power2(fq)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = _cpu(imod, x)
    qdq = _cpu(qmod, x)  # the realized graph stays close to the QDQ model it came from
    assert np.abs(want - qdq).max() < 0.05 and want.argmax() == qdq.argmax()
    packed = graph.graph_pack(imod)
    assert len(packed.chains) == 19
    np.testing.assert_array_equal(packed.run(data=x)[0], want)


def test_relay_quantize_power2_small_residual_net():
    """stem conv (float) -> [conv relu conv + residual, relu] x 2 -> pool -> dense, quantized by
    relay.quantize(power2), realized, packed: both inner convs of each block on the accelerator."""
    from kiln.ir.module import IRModule
    rng = np.random.default_rng(4)
    x = relay.var("data", shape=(1, 3, 16, 16), dtype="float32")

    def conv(y, cin, cout, k=3, stride=1):
        w = relay.const((rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32))
        b = relay.const((0.1 * rng.standard_normal((cout, 1, 1))).astype(np.float32))
        return relay.add(relay.nn.conv2d(y, w, strides=(stride, stride), padding=(k // 2, k // 2), channels=cout,
                                         kernel_size=(k, k)), b)

    y = relay.nn.relu(conv(x, 3, 16))
    for _ in range(2):
        y = relay.nn.relu(relay.add(conv(relay.nn.relu(conv(y, 16, 16)), 16, 16), y))
    y = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(y))
    y = relay.nn.dense(y, relay.const(rng.standard_normal((10, 16)).astype(np.float32)))
    mod = IRModule.from_expr(relay.Function([x], y))
    from kiln.relay import transform as T
    with relay.quantize.qconfig(weight_scale="power2", calibrate_mode="global_scale", global_scale=4.0):
        qmod = relay.quantize.quantize(mod)
    fq = T.Sequential([T.InferType(), T.FakeQuantizationToInteger(), T.InferType()])(qmod)
    imod = graph.realize_power2(fq)
    data = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = _cpu(imod, data)
    assert np.abs(want - _cpu(qmod, data)).max() < 0.1 * np.abs(want).max()
    packed = graph.graph_pack(imod)
    assert len(packed.chains) == 4 and all(c.shape.c == 16 for c in packed.chains)
    np.testing.assert_array_equal(packed.run(data=data)[0], want)


def test_qnn_dense_chains_on_the_accelerator():
    """Two power-of-two requantized qnn.dense layers (bias, ReLU clip) with a CPU op between: both
    on the accelerator, bit-exact with the CPU int8 build; a 10-unit dense (not whole blocks) stays
    on the CPU."""
    from kiln.ir.module import IRModule
    from kiln.relay import qnn

    rng = np.random.default_rng(5)
    C = relay.const
    sa, sw = 2.0 ** -4, 2.0 ** -6

    def dense(x, k, n, relu):
        w = rng.integers(-60, 61, (n, k)).astype(np.int8)
        y = qnn.op.dense(x, C(w), C(0), C(0), C(sa), C(sw), units=n)
        y = relay.add(y, C(rng.integers(-3000, 3000, (n,)).astype(np.int32)))
        y = qnn.op.requantize(y, C(sa * sw), C(0), C(sa), C(0), rounding="UPWARD", out_dtype="int8")
        return relay.clip(y, 0, 127) if relu else y

    x = relay.var("data", shape=(4, 64), dtype="int8")
    y = dense(x, 64, 32, True)
    y = relay.maximum(y, C(np.full((32,), 5, np.int8)))  # a CPU op between
    y = dense(y, 32, 48, False)
    logits = qnn.op.dense(y, C(rng.integers(-20, 21, (10, 48)).astype(np.int8)), C(0), C(0), C(sa), C(sw), units=10)
    mod = IRModule.from_expr(relay.Function([x], logits))
    data = rng.integers(-128, 128, (4, 64)).astype(np.int8)
    want = _cpu(mod, data)
    packed = graph.graph_pack(mod)
    assert sorted((c.kind, (c.shape.m, c.shape.k, c.shape.n)) for c in packed.chains) == \
        [("dense", (4, 32, 48)), ("dense", (4, 64, 32))]
    assert [kind for kind, _ in packed.steps] == ["vta", "cpu", "vta", "cpu"]
    assert len(np.unique(want)) > 10
    for mode in ("functional", "cycle"):
        np.testing.assert_array_equal(packed.set_mode(mode).run(data=data)[0], want)
