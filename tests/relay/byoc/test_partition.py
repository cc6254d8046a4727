"""Partitioning passes (MergeComposite, AnnotateTarget, MergeCompilerRegions, PartitionGraph) on
small graphs: shared inputs, diamonds, tuples, constants crossing regions. The partitioned module
is checked against the unpartitioned one with the numpy reference executor (no oneDNN needed)."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.relay import transform
from kiln.relay.dataflow_pattern import is_constant, is_op, wildcard
from kiln.relay.expr import Call, Function, TupleGetItem
from kiln.relay.op.contrib.dnnl import partition_for_dnnl, pattern_table
from kiln.relay.ty import TupleType
from kiln.relay.visitor import post_order

RNG = np.random.default_rng(0)


def _mod(out, *params):
    return transform.InferType()(tvm.IRModule.from_expr(relay.Function(list(params), out)))


def _partition(mod, merge=True):
    passes = [transform.MergeComposite(pattern_table()), transform.AnnotateTarget(["dnnl"])]
    passes += [transform.MergeCompilerRegions()] if merge else []
    return tvm.transform.Sequential(passes + [transform.PartitionGraph()])(mod)


def _external(mod):
    return sorted(n for n in mod if n.startswith("tvmgen_"))


def _same_values(before, after, shapes):
    ins = [RNG.standard_normal(s).astype("float32") for s in shapes]
    ref = relay.create_executor("debug", before).evaluate()(*ins)
    got = relay.create_executor("debug", after).evaluate()(*ins)
    ref, got = (ref if isinstance(ref, (list, tuple)) else [ref]), (got if isinstance(got, (list, tuple)) else [got])
    for a, b in zip(ref, got):
        np.testing.assert_allclose(np.asarray(getattr(b, "numpy", lambda: b)()),
                                   np.asarray(getattr(a, "numpy", lambda: a)()), rtol=1e-6, atol=1e-6)


def test_patterns_match_optional_alternatives_and_attrs():
    x = relay.var("x", shape=(1, 4, 8, 8))
    w = relay.const(RNG.standard_normal((4, 4, 3, 3)).astype("float32"))
    conv = relay.nn.conv2d(x, w, padding=(1, 1))
    relu = relay.nn.relu(conv)
    pat = is_op("nn.conv2d")(wildcard(), is_constant()).optional(lambda p: is_op("nn.relu")(p))
    assert pat.match(conv) and pat.match(relu)
    assert not pat.match(relay.nn.relu(x))
    assert is_op("nn.conv2d")(wildcard(), wildcard()).has_attr({"padding": [1, 1, 1, 1]}).match(conv)
    assert not is_op("nn.conv2d")(wildcard(), wildcard()).has_attr({"groups": 2}).match(conv)
    assert not is_op("nn.conv2d")(wildcard(), is_constant()).match(relay.nn.conv2d(x, relay.var("w", shape=(4, 4, 3, 3))))
    either = is_op("add")(wildcard(), wildcard()) | is_op("multiply")(wildcard(), wildcard())
    assert either.match(x * x) and either.match(x + x) and not either.match(x - x)
    same = wildcard()
    assert is_op("add")(same, same).match(x + x) and not is_op("add")(same, same).match(x + relu)
    with pytest.raises(KeyError, match="no op"):
        is_op("nn.conv3x3")


def test_merge_composite_wraps_chains_and_keeps_shared_values_out():
    x = relay.var("x", shape=(1, 4, 8, 8))
    w = relay.const(RNG.standard_normal((4, 4, 3, 3)).astype("float32"))
    b = relay.const(RNG.standard_normal(4).astype("float32"))
    biased = relay.nn.bias_add(relay.nn.conv2d(x, w, padding=(1, 1)), b)
    mod = _mod(relay.nn.relu(biased), x)
    out = transform.MergeComposite(pattern_table())(mod)
    call = out["main"].body
    assert isinstance(call.op, Function) and call.op.attrs["Composite"] == "dnnl.conv2d_bias_relu"
    _same_values(mod, out, [(1, 4, 8, 8)])
    # the biased value is used outside the chain too: only conv+bias can be one composite
    mod2 = _mod(relay.Tuple([relay.nn.relu(biased), relay.negative(biased)]), x)
    out2 = transform.MergeComposite(pattern_table())(mod2)
    names = [n.op.attrs["Composite"] for n in post_order(out2["main"].body)
             if isinstance(n, Call) and isinstance(n.op, Function)]
    assert names == ["dnnl.conv2d_bias"]
    _same_values(mod2, out2, [(1, 4, 8, 8)])


def test_predicates_see_shapes_and_attrs():
    x = relay.var("x", shape=(1, 4, 8, 8))
    nhwc = relay.nn.conv2d(relay.var("y", shape=(1, 8, 8, 4)),
                           relay.const(RNG.standard_normal((3, 3, 4, 4)).astype("float32")),
                           data_layout="NHWC", kernel_layout="HWIO")
    ceil = relay.nn.max_pool2d(x, (3, 3), (2, 2), ceil_mode=True)
    mod = _partition(_mod(relay.Tuple([nhwc, ceil, relay.nn.relu(x)]), x, relay.var("y", shape=(1, 8, 8, 4))))
    ops = [n.op.name for f in _external(mod) for n in post_order(mod[f].body) if isinstance(n, Call)
           and hasattr(n.op, "name")]
    assert ops == ["nn.relu"]  # NHWC conv and ceil-mode pooling stay on kiln


def test_diamond_is_not_merged_into_a_cycle():
    # relu -> negative (kiln) -> add, and relu -> add directly: relu and add are both dnnl, but one
    # region holding both would feed negative and wait for it.
    x = relay.var("x", shape=(2, 8))
    a = relay.nn.relu(x)
    mod = _mod(relay.add(a, relay.negative(a)), x)
    out = _partition(mod)
    assert _external(out) == ["tvmgen_default_dnnl_main_0", "tvmgen_default_dnnl_main_1"]
    _same_values(mod, out, [(2, 8)])


def test_chain_merges_into_one_region_with_one_input_for_a_shared_value():
    x = relay.var("x", shape=(2, 8))
    a = relay.nn.relu(x)
    mod = _mod(relay.sigmoid(relay.add(a, x)), x)
    out = _partition(mod)
    assert _external(out) == ["tvmgen_default_dnnl_main_0"]
    f = out["tvmgen_default_dnnl_main_0"]
    assert len(f.params) == 1 and f.attrs["Compiler"] == "dnnl"
    assert f.attrs["global_symbol"] == "tvmgen_default_dnnl_main_0"
    unmerged = _partition(mod, merge=False)
    assert len(_external(unmerged)) == 3
    _same_values(mod, out, [(2, 8)])
    _same_values(mod, unmerged, [(2, 8)])


def test_region_with_two_outputs_returns_a_tuple():
    x, y = relay.var("x", shape=(2, 8)), relay.var("y", shape=(2, 8))
    a = relay.nn.relu(x)
    b = relay.add(a, y)
    mod = _mod(relay.Tuple([relay.negative(a), b, relay.negative(b)]), x, y)
    out = _partition(mod)
    (name,) = _external(out)
    f = out[name]
    assert isinstance(f.body.checked_type, TupleType) and len(f.body.checked_type.fields) == 2
    gets = [n for n in post_order(out["main"].body) if isinstance(n, TupleGetItem)]
    assert sorted(g.index for g in gets) == [0, 1]  # each output taken once, none duplicated
    _same_values(mod, out, [(2, 8), (2, 8)])


def test_constant_used_inside_and_outside_a_region():
    x = relay.var("x", shape=(2, 8))
    c = relay.const(RNG.standard_normal((2, 8)).astype("float32"))
    mod = _mod(relay.Tuple([relay.add(x, c), relay.concatenate([x, c], axis=0)]), x)
    out = _partition(mod)
    (name,) = _external(out)
    assert len(out[name].params) == 1  # the constant is bound inside, not passed in
    _same_values(mod, out, [(2, 8)])


def test_regions_of_two_compilers_are_numbered_in_graph_order():
    x = relay.var("x", shape=(2, 8))
    tvm.ir.register_op_attr("negative", "target.other", lambda call: True)
    try:
        mod = _mod(relay.nn.relu(relay.negative(relay.nn.relu(x))), x)
        seq = tvm.transform.Sequential([transform.AnnotateTarget(["dnnl", "other"]), transform.MergeCompilerRegions(),
                                        transform.PartitionGraph()])
        out = seq(mod)
    finally:
        relay.op.get("negative").extra.pop("target.other")
    assert _external(out) == ["tvmgen_default_dnnl_main_0", "tvmgen_default_dnnl_main_2", "tvmgen_default_other_main_1"]
    _same_values(mod, out, [(2, 8)])


def test_partition_for_dnnl_folds_batch_norm_into_the_convolution():
    x = relay.var("x", shape=(1, 3, 8, 8))
    w = relay.var("w", shape=(8, 3, 3, 3))
    g, b, m, v = (relay.var(n, shape=(8,)) for n in "gbmv")
    y = relay.nn.batch_norm(relay.nn.conv2d(x, w, padding=(1, 1)), g, b, m, v)[0]
    mod = _mod(relay.nn.relu(y), x, w, g, b, m, v)
    params = {"w": RNG.standard_normal((8, 3, 3, 3)).astype("float32"), "g": RNG.random(8).astype("float32") + 0.5,
              "b": RNG.standard_normal(8).astype("float32"), "m": RNG.standard_normal(8).astype("float32"),
              "v": RNG.random(8).astype("float32") + 0.5}
    out = partition_for_dnnl(mod, params)
    (name,) = _external(out)
    comps = [n.op.attrs["Composite"] for n in post_order(out[name].body) if isinstance(n, Call) and isinstance(n.op, Function)]
    assert comps == ["dnnl.conv2d_bias_relu"]
    data = RNG.standard_normal((1, 3, 8, 8)).astype("float32")
    ref = relay.create_executor("debug", mod).evaluate()(data, *params.values())
    got = relay.create_executor("debug", out).evaluate()(data)
    np.testing.assert_allclose(np.asarray(getattr(got, "numpy", lambda: got)()),
                               np.asarray(getattr(ref, "numpy", lambda: ref)()), rtol=1e-4, atol=1e-4)


def test_hand_merged_cycle_is_refused_not_looped():
    import sys

    from kiln.errors import CompileError

    regions = sys.modules["kiln.relay.transform.merge_compiler_regions"]
    x = relay.var("x", shape=(2, 8))
    a = relay.nn.relu(x)
    mod = _mod(relay.add(a, relay.negative(a)), x)
    real = regions._creates_cycle
    regions._creates_cycle = lambda *args: False  # a merge that ignores the diamond
    try:
        merged = tvm.transform.Sequential([transform.AnnotateTarget(["dnnl"]), transform.MergeCompilerRegions()])(mod)
    finally:
        regions._creates_cycle = real
    with pytest.raises(CompileError, match="its own output"):
        transform.PartitionGraph()(merged)


def test_contrib_tables_load_on_attribute_access():
    assert callable(relay.op.contrib.dnnl.partition_for_dnnl)
    assert callable(relay.op.contrib.clml.partition_for_clml)
    assert callable(relay.op.contrib.cublas.partition_for_cublas)
    with pytest.raises(AttributeError, match="compilers: dnnl"):
        relay.op.contrib.tensorrt
