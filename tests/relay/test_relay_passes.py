"""relay.transform passes: structure before/after and numeric equivalence (reference executor)."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.relay import reference
from kiln.relay import transform as T
from kiln.relay.transform import infer
from kiln.relay.visitor import post_order_visit

RNG = np.random.default_rng(0)


def _ops(func) -> list:
    """Op names in post order, entering fused functions."""
    names = []
    post_order_visit(func.body, lambda n: names.append(n.op.name) if isinstance(n, relay.Call)
                     and isinstance(n.op, relay.op.OpDef) else None)
    return names


def _primitive_functions(func) -> list:
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, relay.Function)
                     and n.attrs.get("Primitive") == 1 else None)
    return found


def _rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _conv_bn_relu_module(layout="NCHW"):
    x = relay.var("data", shape=(1, 3, 10, 10))
    w = relay.const(_rand(8, 3, 3, 3))
    vec = lambda: relay.const(RNG.uniform(0.5, 1.5, 8).astype("float32"))  # noqa: E731
    y = relay.nn.conv2d(x, w, padding=(1, 1))
    y = relay.nn.relu(relay.nn.batch_norm(y, vec(), vec(), vec(), vec())[0])
    y = relay.nn.max_pool2d(y, (2, 2), (2, 2))
    y = relay.nn.dropout(y, 0.5)
    return tvm.IRModule.from_expr(relay.nn.batch_flatten(y))


def _same_numbers(before, after, inputs):
    np.testing.assert_allclose(reference.run(after, inputs), reference.run(before, inputs), rtol=1e-5, atol=1e-5)


def test_fold_constant_structure():
    x = relay.var("x", shape=(2,))
    c = relay.add(relay.const(np.array([1, 2], "float32")), relay.const(np.array([3, 4], "float32")))
    before = tvm.IRModule.from_expr(relay.multiply(x, relay.exp(c)))
    after = T.FoldConstant()(before)
    body = after["main"].body
    assert body.op.name == "multiply" and isinstance(body.args[1], relay.Constant)
    np.testing.assert_allclose(body.args[1].data, np.exp([4, 6]).astype("float32"), rtol=1e-6)
    assert body.args[0] is x


def test_fold_constant_folds_tuples_and_leaves_free_parts():
    x = relay.var("x", shape=(4,))
    parts = relay.split(relay.const(np.arange(4, dtype="float32")), 2)
    before = tvm.IRModule.from_expr(relay.concatenate([relay.add(x, relay.const(1.0)), parts[1]], 0))
    after = T.FoldConstant()(before)
    assert _ops(after["main"]) == ["add", "concatenate"]
    _same_numbers(before, after, {"x": _rand(4)})


def test_simplify_inference_removes_batch_norm_and_dropout():
    before = _conv_bn_relu_module()
    after = T.SimplifyInference()(before)
    ops = _ops(after["main"])
    assert "nn.batch_norm" not in ops and "nn.dropout" not in ops
    assert ops.count("multiply") >= 1
    _same_numbers(before, after, {"data": _rand(1, 3, 10, 10)})


def test_fold_scale_axis_moves_bn_scale_into_conv_weights():
    before = _conv_bn_relu_module()
    seq = tvm.transform.Sequential([T.SimplifyInference(), T.FoldConstant(), T.FoldScaleAxis(), T.FoldConstant()])
    with tvm.transform.PassContext(opt_level=3):
        after = seq(before)
    assert _ops(after["main"]) == ["nn.conv2d", "add", "nn.relu", "nn.max_pool2d", "nn.batch_flatten"]
    _same_numbers(before, after, {"data": _rand(1, 3, 10, 10)})
    with tvm.transform.PassContext(opt_level=2):  # FoldScaleAxis is an opt_level 3 pass
        assert "multiply" in _ops(seq(before)["main"])


def test_fold_scale_axis_keeps_conv_with_other_users():
    x = relay.var("x", shape=(1, 2, 4, 4))
    conv = relay.nn.conv2d(x, relay.const(_rand(2, 2, 1, 1)))
    scaled = relay.multiply(conv, relay.const(_rand(2, 1, 1)))
    before = tvm.IRModule.from_expr(relay.add(scaled, conv))
    with tvm.transform.PassContext(opt_level=3):
        after = T.FoldScaleAxis()(before)
    assert "multiply" in _ops(after["main"])


def test_dead_code_elimination_drops_unused_let():
    x = relay.var("x", shape=(2,))
    unused, used = relay.var("unused"), relay.var("used")
    body = relay.Let(unused, relay.exp(x), relay.Let(used, relay.log(x), relay.add(used, x)))
    after = T.DeadCodeElimination()(tvm.IRModule.from_expr(relay.Function([x], body)))
    out = after["main"].body
    assert isinstance(out, relay.Let) and out.var is used and not isinstance(out.body, relay.Let)
    np.testing.assert_allclose(reference.run(after, {"x": np.array([1.0, 2.0], "float32")}),
                               np.log([1, 2]) + [1, 2], rtol=1e-6)


def test_convert_layout_to_nhwc_keeps_layout_through_agnostic_ops():
    x = relay.var("data", shape=(1, 4, 8, 8))
    y = relay.nn.conv2d(x, relay.const(_rand(6, 4, 3, 3)), padding=(1, 1))
    y = relay.nn.relu(relay.nn.bias_add(y, relay.const(_rand(6))))
    a = relay.nn.conv2d(y, relay.const(_rand(6, 6, 1, 1)))
    y = relay.concatenate([relay.add(a, relay.const(_rand(6, 1, 1))), y], axis=1)
    y = relay.nn.batch_flatten(relay.nn.avg_pool2d(y, (2, 2), (2, 2)))
    before = tvm.IRModule.from_expr(y)
    with tvm.transform.PassContext(opt_level=3):
        after = T.ConvertLayout({"nn.conv2d": ["NHWC", "default"]})(before)
    ops = _ops(after["main"])
    assert ops.count("layout_transform") == 2  # once in, once before batch_flatten
    text = after["main"].astext()
    assert 'data_layout="NHWC", kernel_layout="HWIO"' in text and 'layout="NHWC"' in text
    _same_numbers(before, after, {"data": _rand(1, 4, 8, 8)})


def test_convert_layout_rejects_unknown_layouts():
    with pytest.raises(ValueError, match="NCHW or NHWC"):
        T.convert_layout(infer(relay.Function([], relay.const(1.0))), {"nn.conv2d": ["NCHW4c"]})


def test_fuse_ops_groups_epilogues_into_conv():
    x = relay.var("data", shape=(1, 3, 8, 8))
    y = relay.nn.conv2d(x, relay.var("w", shape=(4, 3, 3, 3)), padding=(1, 1))
    y = relay.nn.relu(relay.add(y, relay.var("b", shape=(4, 1, 1))))
    y = relay.nn.max_pool2d(y, (2, 2), (2, 2))
    y = relay.transpose(relay.reshape(y, (1, -1)), (1, 0))
    before = tvm.IRModule.from_expr(y)
    after = T.FuseOps(fuse_opt_level=2)(before)
    funcs = _primitive_functions(after["main"])
    assert sorted(_ops(f) for f in funcs) == [["nn.conv2d", "add", "nn.relu"], ["nn.max_pool2d"], ["reshape", "transpose"]]
    conv_fn = next(f for f in funcs if _ops(f)[0] == "nn.conv2d")
    assert [p.name_hint for p in conv_fn.params] == ["p0", "p1", "p2"]
    inputs = {"data": _rand(1, 3, 8, 8), "w": _rand(4, 3, 3, 3), "b": _rand(4, 1, 1)}
    _same_numbers(before, after, inputs)


def test_fuse_ops_respects_multiple_consumers_and_levels():
    x = relay.var("x", shape=(4, 4))
    e = relay.exp(x)
    before = tvm.IRModule.from_expr(relay.add(relay.sum(e, axis=1, keepdims=True), relay.log(e)))
    after = T.FuseOps(fuse_opt_level=1)(before)
    groups = [_ops(f) for f in _primitive_functions(after["main"])]
    assert ["exp"] in groups  # exp has two consumers, so it stays a kernel of its own
    # add absorbs the reduction (its anchor) and the elementwise log on its other input
    assert sorted(map(sorted, groups)) == [["add", "log", "sum"], ["exp"]]
    _same_numbers(before, after, {"x": _rand(4, 4)})
    with tvm.transform.PassContext(opt_level=0):
        unfused = T.FuseOps()(before)
    assert all(len(_ops(f)) == 1 for f in _primitive_functions(unfused["main"]))


def test_fuse_ops_reduction_absorbs_elementwise_producer_and_inlines_scalars():
    x = relay.var("x", shape=(4, 8))
    before = tvm.IRModule.from_expr(relay.mean(relay.multiply(x, relay.const(2.0)), axis=1))
    after = T.FuseOps()(before)
    (fn,) = _primitive_functions(after["main"])
    assert _ops(fn) == ["multiply", "mean"] and len(fn.params) == 1
    _same_numbers(before, after, {"x": _rand(4, 8)})


def test_full_pipeline_on_a_workload_matches_reference():
    mod, params = relay.testing.resnet.get_workload(num_layers=18, image_shape=(3, 32, 32))
    data = _rand(1, 3, 32, 32)
    want = reference.run(mod, {"data": data}, params)
    bound = T.BindParams(params)(mod)
    with tvm.transform.PassContext(opt_level=3):
        opt = T.optimize_sequence()(bound)
    assert "nn.batch_norm" not in _ops(opt["main"])
    for fn in _primitive_functions(opt["main"]):
        assert sum(op in ("nn.conv2d", "nn.dense", "nn.max_pool2d") for op in _ops(fn)) <= 1
    np.testing.assert_allclose(reference.run(opt, {"data": data}), want, rtol=1e-4, atol=1e-6)


def test_convert_layout_nhwc_model_to_nchw():
    mod, params = relay.testing.mobilenet.get_workload(image_shape=(3, 32, 32), layout="NHWC")
    data = _rand(1, 32, 32, 3)
    bound = T.BindParams(params)(mod)
    with tvm.transform.PassContext(opt_level=3):
        after = T.ConvertLayout({"nn.conv2d": ["NCHW", "default"]})(bound)
    assert 'data_layout="NHWC"' not in after["main"].astext()
    assert _ops(after["main"]).count("layout_transform") == 2
    _same_numbers(bound, after, {"data": data})


def test_debug_executor_runs_the_reference():
    x = relay.var("x", shape=(3,))
    mod = tvm.IRModule.from_expr(relay.nn.relu(x) * relay.const(2.0))
    out = relay.create_executor("debug", mod=mod).evaluate()(np.array([-1, 0, 2], "float32"))
    np.testing.assert_array_equal(out.numpy(), [0, 0, 4])
    with pytest.raises(tvm.KilnError, match="relay.build"):
        relay.create_executor("graph", mod=mod)
