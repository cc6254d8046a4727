"""AlterOpLayout: x86 convolutions on channel-blocked data, checked against the reference
executor (numpy) before and after the pass, and end to end through relay.build."""

import json

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay import reference
from kiln.relay import transform as T
from kiln.relay.backend import dispatch
from kiln.relay.op import layout
from kiln.relay.visitor import post_order_visit

RNG = np.random.default_rng(7)


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def _conv(x, cin, cout, k=3, stride=1, groups=1):
    w = relay.const(_rand(cout, cin // groups, k, k, scale=0.3))
    y = relay.nn.conv2d(x, w, strides=(stride, stride), padding=(k // 2, k // 2), groups=groups)
    return relay.add(y, relay.const(_rand(cout, 1, 1)))


def _mobile_block():
    """A MobileNetV2-like stack: stem, expand, strided depthwise, project, residual, pooling."""
    x = relay.var("x", shape=(1, 3, 20, 20))
    y = relay.clip(_conv(x, 3, 32, stride=2), 0.0, 6.0)                 # 3 plain channels in
    y = relay.clip(_conv(y, 32, 32, groups=32), 0.0, 6.0)               # depthwise, stride 1
    y = _conv(y, 32, 24, k=1)                                           # 24 channels: block 8
    e = relay.clip(_conv(y, 24, 48, k=1), 0.0, 6.0)
    e = relay.clip(_conv(e, 48, 48, groups=48), 0.0, 6.0)
    y = relay.add(y, _conv(e, 48, 24, k=1))                             # residual add, both blocked
    y = relay.clip(_conv(y, 24, 64, k=1), 0.0, 6.0)
    y = relay.clip(_conv(y, 64, 64, stride=2, groups=64), 0.0, 6.0)     # strided depthwise
    y = relay.nn.max_pool2d(y, (3, 3), (1, 1), padding=(1, 1, 1, 1))
    y = relay.nn.global_avg_pool2d(y)
    return tvm.IRModule.from_expr(relay.Function([x], relay.nn.batch_flatten(y)))


def _conv_layouts(func) -> list:
    found = []
    post_order_visit(func.body, lambda n: found.append((n.attrs.data_layout, n.attrs.out_layout))
                     if isinstance(n, relay.Call) and getattr(n.op, "name", "") == "nn.conv2d" else None)
    return found


def _ops(func) -> list:
    names = []
    post_order_visit(func.body, lambda n: names.append(n.op.name) if isinstance(n, relay.Call)
                     and isinstance(n.op, relay.op.OpDef) else None)
    return names


def _altered(mod, target="llvm"):
    with tvm.target.Target(target), tvm.transform.PassContext(opt_level=3):
        return T.AlterOpLayout()(T.InferType()(mod))


def _build_run(mod, inputs, opt_level=3, target="llvm"):
    with tvm.transform.PassContext(opt_level=opt_level):
        lib = relay.build(mod, target=target)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy(), lib


def test_layout_helpers_round_trip_blocked_layouts():
    x = _rand(2, 32, 3, 5)
    b = layout.transform(x, "NCHW", "NCHW16c")
    assert b.shape == (2, 2, 3, 5, 16) and b[1, 1, 2, 3, 4] == x[1, 20, 2, 3]
    np.testing.assert_array_equal(layout.transform(layout.transform(b, "NCHW16c", "NHWC8c"), "NHWC8c", "NCHW"), x)
    assert layout.blocked_shape((1, 48, 7, 7), "NCHW", "NCHW16c") == (1, 3, 7, 7, 16)
    with pytest.raises(ValueError, match="not a multiple of the block 16"):
        layout.blocked_shape((1, 24, 4, 4), "NCHW", "NCHW16c")
    with pytest.raises(ValueError, match="not of the form"):
        layout.parse("NC-HW")


def test_layout_transform_op_types_and_runs_blocked():
    x = relay.var("x", shape=(1, 32, 4, 4))
    y = relay.layout_transform(relay.layout_transform(x, "NCHW", "NCHW8c"), "NCHW8c", "NCHW16c")
    mod = T.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    assert tuple(mod["main"].body.checked_type.shape) == (1, 2, 4, 4, 16)
    data = _rand(1, 32, 4, 4)
    got, _ = _build_run(mod, {"x": data})
    np.testing.assert_array_equal(got, layout.transform(data, "NCHW", "NCHW16c"))
    bad = relay.layout_transform(relay.var("z", shape=(1, 24, 4, 4)), "NCHW", "NCHW16c")
    with pytest.raises(Exception, match="not a multiple of the block 16"):
        T.InferType()(tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(bad), bad)))


def test_alter_op_layout_keeps_data_blocked_between_convolutions():
    mod = _mobile_block()
    after = _altered(mod)
    convs = _conv_layouts(after["main"])
    assert convs[0][0] == "NCHW" and layout.channel_block(convs[0][1])  # the RGB input is read as it is
    # 24 channels: block 8, written by one conv and read by the next two
    assert [o for _, o in convs].count("NCHW8c") == 2 and [d for d, _ in convs].count("NCHW8c") == 2
    assert all(d != "NCHW" for d, _ in convs[1:])
    # Only the result goes back to NCHW (after the global pool, before batch_flatten).
    assert _ops(after["main"]).count("layout_transform") == 1
    inputs = {"x": _rand(1, 3, 20, 20)}
    np.testing.assert_allclose(reference.run(after, inputs), reference.run(mod, inputs), rtol=1e-4, atol=1e-4)


def test_blocked_build_matches_the_reference_executor():
    mod = _mobile_block()
    inputs = {"x": _rand(1, 3, 20, 20)}
    want = reference.run(mod, inputs)
    got, lib = _build_run(mod, inputs, opt_level=3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    shapes = json.loads(lib.get_graph_json())["attrs"]["shape"][1]
    assert any(len(s) == 5 for s in shapes), "the graph should carry blocked tensors between kernels"
    plain, _ = _build_run(mod, inputs, opt_level=2)  # no AlterOpLayout below opt_level 3
    np.testing.assert_allclose(got, plain, rtol=1e-4, atol=1e-4)


def test_tuned_oc_bn_sets_the_block_and_mismatched_residuals_are_converted():
    x = relay.var("x", shape=(1, 16, 8, 8))
    a = relay.nn.relu(_conv(x, 16, 64))
    b = _conv(a, 64, 64, k=1)
    y = relay.nn.relu(_conv(relay.add(a, b), 64, 16, k=1))
    mod = tvm.IRModule.from_expr(relay.Function([x], y))

    def provider(op_name, workload, target):
        # 3x3 convs (workload's kernel shape ends in 3, 3) get 32-channel blocks, 1x1 get 16.
        return {"oc_bn": 32 if workload[2][1][2] == 3 else 16}

    inputs = {"x": _rand(1, 16, 8, 8)}
    with dispatch.use_config_provider(provider):
        after = _altered(mod)
        got, _ = _build_run(mod, inputs)
    # x goes blocked for the first conv (3x3/1: Winograd); the last (1x1) writes NCHW, as
    # nothing after it keeps blocks.
    assert _conv_layouts(after["main"]) == [("NCHW16c", "NCHW32c"), ("NCHW32c", "NCHW16c"), ("NCHW32c", "NCHW")]
    assert _ops(after["main"]).count("layout_transform") == 2  # x in; b from 16c to 32c for the add
    np.testing.assert_allclose(got, reference.run(mod, inputs), rtol=1e-4, atol=1e-4)


def test_channel_concatenation_stays_blocked():
    x = relay.var("x", shape=(1, 16, 10, 10))
    squeeze = relay.nn.relu(_conv(x, 16, 16, k=1))
    fire = relay.concatenate([relay.nn.relu(_conv(squeeze, 16, 32, k=1)), relay.nn.relu(_conv(squeeze, 16, 32))], 1)
    y = relay.nn.global_avg_pool2d(_conv(fire, 64, 16, k=1))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.batch_flatten(y)))
    after = _altered(mod)
    assert _ops(after["main"]).count("layout_transform") == 1  # only the result, after the pool
    inputs = {"x": _rand(1, 16, 10, 10)}
    want = reference.run(mod, inputs)
    np.testing.assert_allclose(reference.run(after, inputs), want, rtol=1e-4, atol=1e-4)
    got, _ = _build_run(mod, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_3x3_stride_1_convolutions_on_blocked_data_use_winograd():
    # 12x12 outputs: 36 Winograd tiles, enough on every CPU (direct_is_faster: fewer than 32 take
    # the direct kernel where 512-bit FMAs run whole)
    x = relay.var("x", shape=(1, 3, 24, 24))
    y = relay.nn.relu(_conv(x, 3, 16, stride=2))                        # direct (RGB input, stride 2)
    z = relay.nn.relu(relay.add(_conv(relay.nn.relu(_conv(y, 16, 16)), 16, 16), y))  # two Winograd
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.global_avg_pool2d(z)))
    inputs = {"x": _rand(1, 3, 24, 24)}
    got, lib = _build_run(mod, inputs)
    np.testing.assert_allclose(got, reference.run(mod, inputs), rtol=1e-4, atol=1e-4)
    weights = [v.numpy().shape for v in lib.get_params().values()]
    # the kernels of the two 3x3/1 convs are stored transformed: (K/bn, 16 frequencies, C/ib, ib, bn)
    assert sum(1 for s in weights if len(s) == 5 and s[1] == 16 and s[0] * s[4] == 16) == 2, weights


def test_operands_that_cannot_be_blocked_fall_back_to_nchw():
    x = relay.var("x", shape=(1, 16, 6, 6))
    scale = relay.var("scale", shape=(16, 1, 1))  # per-channel, but not a constant
    y = relay.multiply(_conv(x, 16, 16), scale)
    y = relay.nn.bias_add(y, relay.const(_rand(16)))  # has an axis: stays NCHW
    mod = tvm.IRModule.from_expr(relay.Function([x, scale], y))
    after = _altered(mod)
    assert _conv_layouts(after["main"]) == [("NCHW16c", "NCHW16c")]  # 3x3/1: Winograd, blocked in and out
    inputs = {"x": _rand(1, 16, 6, 6), "scale": _rand(16, 1, 1)}
    np.testing.assert_allclose(reference.run(after, inputs), reference.run(mod, inputs), rtol=1e-5, atol=1e-5)
    got, _ = _build_run(mod, inputs)
    np.testing.assert_allclose(got, reference.run(mod, inputs), rtol=1e-4, atol=1e-4)


def test_alter_op_layout_leaves_arm_targets_and_no_target_alone():
    mod = _mobile_block()
    arm = _altered(mod, "llvm -mtriple=aarch64-linux-gnu")
    assert all(c == ("NCHW", "") for c in _conv_layouts(arm["main"]))
    with tvm.transform.PassContext(opt_level=3):
        untouched = T.AlterOpLayout()(T.InferType()(mod))
    assert all(c == ("NCHW", "") for c in _conv_layouts(untouched["main"]))


def test_squeeze_excite_scale_keeps_the_data_blocked():
    # MobileNetV3's squeeze-and-excitation: the blocked activations times a computed (1, C, 1, 1)
    # scale; the scale is viewed blocked, so the multiply and the projection conv after it stay blocked
    x = relay.var("x", shape=(1, 16, 10, 10))
    y = relay.nn.relu(_conv(x, 16, 32, k=1))
    s = relay.nn.relu(_conv(relay.nn.global_avg_pool2d(y), 32, 8, k=1))
    s = relay.clip(relay.add(relay.multiply(_conv(s, 8, 32, k=1), relay.const(np.float32(1 / 6))),
                             relay.const(np.float32(0.5))), 0.0, 1.0)
    z = _conv(relay.multiply(y, s), 32, 16, k=1)
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.global_avg_pool2d(z)))
    after = _altered(mod)
    convs = _conv_layouts(after["main"])
    assert convs[-1][0] != "NCHW", convs  # the projection conv reads the product blocked
    # x in, the result out: nothing goes back to NCHW in between
    assert _ops(after["main"]).count("layout_transform") <= 3, _ops(after["main"])
    inputs = {"x": _rand(1, 16, 10, 10)}
    want = reference.run(mod, inputs)
    np.testing.assert_allclose(reference.run(after, inputs), want, rtol=1e-4, atol=1e-4)
    got, _ = _build_run(mod, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
