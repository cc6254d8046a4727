"""nn.attention and the FuseAttention pass (issue 32).

The models are ``transformers`` BERT (padding mask), GPT-2 (causal mask), ViT (no mask) and
Whisper's encoder with random weights, one layer of width 32, exported by ``torch.onnx.export``
(TorchScript exporter; BERT also by the dynamo one)
(tests/relay/data/transformers/, written by ``python bench/transformer_models.py``). Each must get
exactly one nn.attention per layer from relay.build's passes on x86, and its output must match
onnxruntime's; the op alone is checked against its float64 numpy reference for several CPUs.
"""

from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.errors import ShapeError
from kiln.relay.analysis import op_calls
from kiln.relay.transform import infer

DATA = Path(__file__).parent / "data" / "transformers"
MODELS = ["bert", "bert_dynamo", "gpt2", "vit", "whisper"]  # bert_dynamo: torch.onnx.export(dynamo=True)


def _load(name):
    import onnx

    inputs = dict(np.load(DATA / f"{name.split('_')[0]}_inputs.npz"))
    return onnx.load(str(DATA / f"{name}.onnx")), inputs


def _optimized(mod, params, target="llvm"):
    from kiln.relay import build_module

    with tvm.transform.PassContext(opt_level=3), tvm.target.Target(target):
        return build_module.optimize(mod, target, params)[0]


@pytest.mark.parametrize("name", MODELS)
def test_attention_is_formed_and_matches_onnxruntime(name):
    ort = pytest.importorskip("onnxruntime")
    model, inputs = _load(name)
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in inputs.items()})
    fused = _optimized(mod, params)
    calls = op_calls(fused["main"], ["nn.attention"])
    assert len(calls) == 1, f"{name}: {len(calls)} nn.attention ops (one layer: want 1)"
    assert not op_calls(fused["main"], ["nn.softmax"]), f"{name}: a softmax was left unfused"
    mask = calls[0].args[3].checked_type.shape
    # BERT: a padding mask over keys; GPT-2: the causal mask (a row per query); ViT, Whisper: none.
    want = {"bert": 3, "bert_dynamo": 3, "gpt2": 3, "vit": 0, "whisper": 0}[name]
    assert len(mask) == want, f"{name}: mask shape {mask}"
    if name == "gpt2":
        assert int(mask[1]) == int(mask[2]), mask
    if name.startswith("bert"):  # (1, 1, M, N) in the graph, one row in value: one row read
        assert int(mask[1]) == 1, mask
    # x86: the heads stay in the dense layers' rows (no head-split or head-join copy kernels);
    # GPT-2's key and value pass a one-input concatenate (its cache) and two transposes
    assert int(calls[0].attrs.heads) == 2, calls[0].attrs

    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    from kiln.contrib import graph_executor

    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    got = m.get_output(0).numpy()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want_out = sess.run(None, inputs)[0]
    # Layer-normed outputs of order 1; float32 sums over at most 64 terms of order 1 each.
    np.testing.assert_allclose(got, want_out, rtol=1e-4, atol=1e-4)


def test_chain_with_extra_use_is_left_alone():
    """Scores read by another op too: nothing to gain, the chain stays."""
    q = relay.var("q", shape=(2, 8, 16))
    k = relay.var("k", shape=(2, 8, 16))
    v = relay.var("v", shape=(2, 8, 16))
    s = relay.nn.batch_matmul(q, k)
    p = relay.nn.softmax(relay.multiply(s, relay.const(0.25)))
    out = relay.Tuple([relay.nn.batch_matmul(p, v, transpose_b=False), s])
    mod = tvm.IRModule.from_expr(relay.Function([q, k, v], out))
    fused = _optimized(mod, {})
    assert not op_calls(fused["main"], ["nn.attention"])


def test_not_formed_for_gpu_targets():
    q = relay.var("q", shape=(2, 8, 16))
    p = relay.nn.softmax(relay.nn.batch_matmul(q, q))
    mod = tvm.IRModule.from_expr(relay.Function([q], relay.nn.batch_matmul(p, q, transpose_b=False)))
    assert op_calls(_optimized(mod, {}, "llvm")["main"], ["nn.attention"])
    assert not op_calls(_optimized(mod, {}, "opencl")["main"], ["nn.attention"])


def test_relay_op_type_errors():
    q = relay.var("q", shape=(2, 8, 16))
    k = relay.var("k", shape=(2, 9, 16))
    v = relay.var("v", shape=(2, 8, 16))
    with pytest.raises(ShapeError, match="nn.attention: input 'value' .* has 8 positions; 'key' .* has 9"):
        infer(relay.Function([q, k, v], relay.nn.attention(q, k, v)))


@pytest.mark.parametrize("kind", ["zeros", "same-rows", "per-row"])
def test_constant_mask_is_shrunk(kind):
    """A constant mask loses the axes it repeats along, and is dropped when all zero (the dynamo
    exporter's ViT adds a (1, 1, M, N) mask of zeros); the result is the chain's."""
    from kiln.contrib import graph_executor

    b, m, n, d = 2, 6, 10, 8
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, b, r, d)).astype("float32") for r in (m, n, n))
    row = np.where(rng.random(n) < 0.3, np.finfo("float32").min, 0.0).astype("float32")
    mask = {"zeros": np.zeros((1, 1, m, n), "float32"), "same-rows": np.broadcast_to(row, (1, 1, m, n)).copy(),
            "per-row": np.triu(np.full((m, n), -1e4, "float32"), 1)[None, None]}[kind]
    xs = [relay.var(name, shape=x.shape) for name, x in zip("qkv", (q, k, v))]
    r3 = [relay.reshape(x, (b, -1, d)) for x in xs]
    s = relay.reshape(relay.nn.batch_matmul(r3[0], r3[1]), (1, b, m, n))
    p = relay.nn.softmax(relay.add(relay.multiply(s, relay.const(0.25)), relay.const(mask)))
    out = relay.nn.batch_matmul(relay.reshape(p, (b, m, n)), r3[2], transpose_b=False)
    mod = tvm.IRModule.from_expr(relay.Function(xs, out))
    (call,) = op_calls(_optimized(mod, {})["main"], ["nn.attention"])
    got_shape = tuple(int(x) for x in call.args[3].checked_type.shape)
    assert got_shape == {"zeros": (), "same-rows": (1, 1, n), "per-row": (1, m, n)}[kind]
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.set_input(q=q, k=k, v=v)
    gm.run()
    sc = (q[0].astype(np.float64) @ k[0].transpose(0, 2, 1)) * 0.25 + mask[0]
    e = np.exp(sc - sc.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ v[0]
    # softmax weights sum to 1 (a convex mix of value rows ~1); scores of d float32 terms
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["vit"])
def test_x86_transformer_rows_without_reshape_kernels(name):
    """FlattenRows runs for x86 transformers too: the residual adds join their dense kernels and
    no kernel only reshapes (ViT-B/16: 207 -> 160 kernels); the outputs are checked against
    onnxruntime above (test_attention_is_formed_and_matches_onnxruntime builds with it)."""
    import json

    model, _ = _load(name)
    mod, params = relay.frontend.from_onnx(model)

    def kernels(disabled):
        with tvm.transform.PassContext(opt_level=3, disabled_pass=disabled):
            lib = relay.build(mod, target="llvm -mcpu=haswell", params=params)
        return [n["name"] for n in json.loads(lib.get_graph_json())["nodes"] if n["op"] == "tvm_op"]

    before, after = kernels(["FlattenRows"]), kernels([])
    residual = [k for k in after if "nn_dense" in k and k.rstrip("_0123456789").endswith("add_add")]
    assert len(residual) == 2, after
    # one reshape may be left: the model's output keeps its 3-D shape
    assert len([k for k in after if k.rstrip("_0123456789").endswith(("fused_reshape", "fused_reshape_add"))]) <= 1, after
    assert len(after) <= len(before) - 3, (before, after)


def test_x86_flatten_rows_leaves_models_without_attention_alone():
    """A layer norm over rows without attention or batched products (ConvNeXt's blocks) keeps its
    3-D graph on x86: FlattenRows is for transformers there."""
    from kiln.relay import build_module

    x = relay.var("x", shape=(1, 12, 16))
    w = relay.const(np.ones((8, 16), "float32"))
    y = relay.nn.dense(relay.reshape(relay.nn.layer_norm(x, relay.const(np.ones(16, "float32")),
                                                         relay.const(np.zeros(16, "float32"))), (12, 16)), w)
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    with tvm.transform.PassContext(opt_level=3), tvm.target.Target("llvm -mcpu=haswell"):
        fused = build_module.optimize(mod, "llvm -mcpu=haswell", {})[0]
    (norm,) = op_calls(fused["main"], ["nn.layer_norm"])
    assert len(norm.checked_type.shape) == 3


def test_relay_op_heads_in_rows():
    """nn.attention(heads=H) on rows (M, H*D): built for x86, against the float64 numpy result of
    splitting the heads; its type errors name the problem."""
    from kiln.contrib import graph_executor
    from kiln.relay.reference import call_function

    h, m, n, d = 3, 10, 7, 8
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((r, h * d)).astype("float32") for r in (m, n, n))
    xs = [relay.var(name, shape=x.shape) for name, x in zip("qkv", (q, k, v))]
    mod = tvm.IRModule.from_expr(relay.Function(xs, relay.nn.attention(*xs, scale=0.5, heads=h)))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.set_input(q=q, k=k, v=v)
    gm.run()
    split = lambda x: x.reshape(x.shape[0], h, d).transpose(1, 0, 2).astype(np.float64)  # noqa: E731
    sc = split(q) @ split(k).transpose(0, 2, 1) * 0.5
    p = np.exp(sc - sc.max(-1, keepdims=True))
    want = ((p / p.sum(-1, keepdims=True)) @ split(v)).transpose(1, 0, 2).reshape(m, h * d)
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)
    # the op's numpy reference (the reference executor's and FoldConstant's; it raised
    # AttributeError for heads > 0): float64 sums, one rounding to float32
    np.testing.assert_allclose(call_function(mod["main"], [q, k, v]), want, rtol=1e-6, atol=1e-6)

    with pytest.raises(ShapeError, match="heads=5 must divide the query's 24"):
        infer(relay.Function(xs, relay.nn.attention(*xs, heads=5)))
    with pytest.raises(ShapeError, match="key_transposed and value_transposed must be False"):
        infer(relay.Function(xs, relay.nn.attention(*xs, heads=h, key_transposed=True)))


@pytest.mark.parametrize("batch", [1, 2])
def test_rows_form_only_for_one_sequence(batch):
    """The exporters' head split of rows (reshape -> transpose -> reshape) becomes heads=H for one
    sequence; a batch of two keeps the head-major op. Both match numpy."""
    from kiln.contrib import graph_executor

    h, s, d = 2, 9, 8
    rng = np.random.default_rng(5)
    xs_np = [rng.standard_normal((batch, s, h * d)).astype("float32") for _ in range(3)]
    xs = [relay.var(name, shape=x.shape) for name, x in zip("qkv", xs_np)]

    def split(x, axes):
        t = relay.transpose(relay.reshape(x, (batch, s, h, d)), axes)
        return relay.reshape(t, (batch * h,) + ((d, s) if axes == (0, 2, 3, 1) else (s, d)))

    sc = relay.reshape(relay.nn.batch_matmul(split(xs[0], (0, 2, 1, 3)), split(xs[1], (0, 2, 3, 1)),
                                             transpose_b=False), (batch, h, s, s))
    p = relay.reshape(relay.nn.softmax(relay.multiply(sc, relay.const(0.25))), (batch * h, s, s))
    o = relay.nn.batch_matmul(p, split(xs[2], (0, 2, 1, 3)), transpose_b=False)
    out = relay.reshape(relay.transpose(relay.reshape(o, (batch, h, s, d)), (0, 2, 1, 3)), (batch, s, h * d))
    mod = tvm.IRModule.from_expr(relay.Function(xs, out))
    (call,) = op_calls(_optimized(mod, {})["main"], ["nn.attention"])
    assert int(call.attrs.heads) == (h if batch == 1 else 0)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.set_input(**dict(zip("qkv", xs_np)))
    gm.run()
    q, k, v = (x.reshape(batch, s, h, d).transpose(0, 2, 1, 3).astype(np.float64) for x in xs_np)
    w = np.exp(q @ k.transpose(0, 1, 3, 2) * 0.25 - (q @ k.transpose(0, 1, 3, 2) * 0.25).max(-1, keepdims=True))
    want = ((w / w.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(batch, s, h * d)
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)


def test_mask_rows_kept_only_where_they_differ():
    """A computed mask that is the same for every query row (BERT's padding mask, broadcast to
    (1, 1, M, N) by an all-true constant) is read as one row; one that varies per row is not."""
    from kiln.relay.transform.fuse_attention import _row_invariant

    m, n = 5, 7
    pad = relay.var("pad", shape=(1, 1, 1, n), dtype="bool")
    full = relay.var("full", shape=(1, 1, m, n), dtype="bool")
    ones = relay.const(np.ones((1, 1, m, 1), bool))
    steps = relay.const((np.arange(m) % 2 == 0).reshape(1, 1, m, 1))

    def invariant(cond):
        body = relay.where(cond, relay.const(0.0), relay.const(-1e9))
        return _row_invariant(infer(relay.Function([pad, full], body)).body)

    assert invariant(relay.logical_and(ones, pad))
    assert not invariant(relay.logical_and(ones, full))
    assert not invariant(relay.logical_and(steps, pad))
