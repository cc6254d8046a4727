"""FuseExpandDepthwise: a 1x1 expand conv, its bias and clip, and the depthwise conv after it run
as one kernel on x86; checked against the numpy reference executor and the unfused build."""

import importlib

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import ShapeError
from kiln.relay import reference
from kiln.relay import transform as T
from kiln.relay.visitor import post_order_visit

fed = importlib.import_module("kiln.relay.transform.fuse_expand_depthwise")  # the module, not the pass function
RNG = np.random.default_rng(11)
FUSED = "nn.contrib_expand_depthwise_NCHWc"


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def _conv(x, cin, cout, k=1, stride=1, groups=1):
    w = relay.const(_rand(cout, cin // groups, k, k, scale=0.3))
    y = relay.nn.conv2d(x, w, strides=(stride, stride), padding=(k // 2, k // 2), groups=groups)
    return relay.nn.bias_add(y, relay.const(_rand(cout)))


def _block(hw=16, cin=16, expand=96, stride=2, act=lambda y: relay.clip(y, 0.0, 6.0), extra_user=False):
    """A 1x1 conv (so the block reads blocked data, as in a network), then a MobileNetV2 block:
    expand 1x1, act, depthwise 3x3, ReLU6, project 1x1."""
    x = relay.var("x", shape=(1, cin, hw, hw))
    e = act(_conv(_conv(x, cin, cin), cin, expand))
    y = relay.clip(_conv(e, expand, expand, k=3, stride=stride, groups=expand), 0.0, 6.0)
    y = _conv(y, expand, 24)
    if extra_user:  # the expanded tensor is needed by someone else: nothing to fuse
        y = relay.add(relay.nn.global_avg_pool2d(y), relay.nn.global_avg_pool2d(_conv(e, expand, 24)))
    return tvm.IRModule.from_expr(relay.Function([x], y))


def _ops(mod, target="llvm"):
    with tvm.target.Target(target), tvm.transform.PassContext(opt_level=3):
        opt, _ = relay.build_module.optimize(mod, tvm.target.Target(target))
    names = []
    post_order_visit(opt["main"].body, lambda n: names.append(n.op.name) if isinstance(n, relay.Call)
                     and isinstance(n.op, relay.op.OpDef) else None)
    return names


def _build_run(mod, inputs, **ctx):
    with tvm.transform.PassContext(opt_level=3, **ctx):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


@pytest.fixture
def small_tensors_fuse(monkeypatch):
    monkeypatch.setattr(fed, "MIN_EXPANDED_BYTES", 0)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("act", ["clip", "relu", "none"])
def test_fused_block_matches_the_reference_and_the_unfused_build(small_tensors_fuse, stride, act):
    acts = {"clip": lambda y: relay.clip(y, 0.0, 6.0), "relu": relay.nn.relu, "none": lambda y: y}
    mod = _block(hw=15, stride=stride, act=acts[act])
    assert _ops(mod).count(FUSED) == 1 and _ops(mod).count("nn.conv2d") == 2  # first and project
    inputs = {"x": _rand(1, 16, 15, 15)}
    want = reference.run(mod, inputs)
    got = _build_run(mod, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    split = _build_run(mod, inputs, disabled_pass=["FuseExpandDepthwise"])
    np.testing.assert_allclose(got, split, rtol=1e-5, atol=1e-5)


def test_only_large_expanded_tensors_are_fused():
    # 96 x 56 x 56 floats = 1.2 MB expanded: fused; at 14 x 14 (75 KB) the two kernels stay.
    assert _ops(_block(hw=56)).count(FUSED) == 1
    assert _ops(_block(hw=14)).count(FUSED) == 0
    assert 96 * 14 * 14 * 4 < fed.MIN_EXPANDED_BYTES <= 96 * 56 * 56 * 4


def test_pass_leaves_what_it_cannot_fuse(small_tensors_fuse):
    assert _ops(_block(extra_user=True)).count(FUSED) == 0        # the expanded tensor has two users
    assert _ops(_block(), target="llvm -mtriple=aarch64-linux-gnu").count(FUSED) == 0  # x86 only
    with tvm.transform.PassContext(opt_level=2):                   # opt_level 3 pass (as AlterOpLayout)
        opt, _ = relay.build_module.optimize(_block(), tvm.target.Target("llvm"))
    assert FUSED not in str(opt["main"])
    x = relay.var("x", shape=(1, 16, 16, 16))
    w = relay.var("w", shape=(96, 16, 1, 1))                       # a weight that is not a constant
    y = relay.nn.conv2d(relay.clip(relay.nn.conv2d(x, w), 0.0, 6.0), relay.const(_rand(96, 1, 3, 3)),
                        padding=(1, 1), groups=96)
    assert _ops(tvm.IRModule.from_expr(relay.Function([x, w], y))).count(FUSED) == 0


def test_fused_op_types_and_names_the_bad_input():
    x = relay.var("x", shape=(1, 2, 8, 8, 8))
    ew, eb = relay.const(_rand(4, 2, 1, 1, 8, 8)), relay.const(_rand(1, 4, 1, 1, 8))
    ok = relay.nn.contrib_expand_depthwise_NCHWc(x, ew, eb, relay.const(_rand(4, 3, 3, 8)), strides=2)
    mod = T.InferType()(tvm.IRModule.from_expr(relay.Function([x], ok)))
    assert tuple(mod["main"].body.checked_type.shape) == (1, 4, 4, 4, 8)
    bad = relay.nn.contrib_expand_depthwise_NCHWc(x, ew, relay.const(_rand(1, 2, 1, 1, 8)),
                                                  relay.const(_rand(4, 3, 3, 8)))
    with pytest.raises(ShapeError, match="'expand_bias' has shape \\(1, 2, 1, 1, 8\\); expected \\(1, 4, 1, 1, 8\\)"):
        T.InferType()(tvm.IRModule.from_expr(relay.Function([x], bad)))


def test_fused_op_reference_agrees_with_the_build(small_tensors_fuse):
    # The op itself (as the pass writes it) through the numpy reference and through relay.build.
    x = relay.var("x", shape=(1, 2, 9, 9, 8))
    args = [relay.const(_rand(6, 2, 1, 1, 8, 8)), relay.const(_rand(1, 6, 1, 1, 8)), relay.const(_rand(6, 3, 3, 8))]
    y = relay.nn.contrib_expand_depthwise_NCHWc(x, *args, strides=1, act_min=0.0, act_max=6.0)
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    inputs = {"x": _rand(1, 2, 9, 9, 8)}
    np.testing.assert_allclose(_build_run(mod, inputs), reference.run(mod, inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_mixed_precision_blocks_fuse_and_stay_as_close_as_the_unfused_build(small_tensors_fuse, precision):
    """ToMixedPrecision's bfloat16 (conv out_dtype float32, cast back) and float16 (all half)
    blocks fuse; the fused kernel computes in float32 and rounds once, so its output is no
    further from the float32 model's (the numpy reference) than the unfused build's, give or take
    one rounding of the output's largest value, and within 8 such steps of it."""
    pytest.importorskip("ml_dtypes", reason="ToMixedPrecision rounds constants with ml_dtypes")
    from helpers.ranking import bfloat16_step, float16_step

    mod = T.InferType()(_block(hw=15))
    inputs = {"x": _rand(1, 16, 15, 15)}
    want = reference.run(mod, inputs).astype(np.float64)
    low = relay.transform.ToMixedPrecision(precision)(mod)
    assert _ops(low).count(FUSED) == 1
    fused = _build_run(low, inputs).astype(np.float64)
    split = _build_run(low, inputs, disabled_pass=["FuseExpandDepthwise"]).astype(np.float64)
    step = (bfloat16_step if precision == "bfloat16" else float16_step)(want)
    err, split_err = np.abs(fused - want).max(), np.abs(split - want).max()
    assert err <= split_err + 2 * step and err <= 8 * step, (err / step, split_err / step)
