"""relay IR: constructors, identity semantics, free vars, printer, type inference errors."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.errors import ShapeError
from kiln.relay.transform import infer


def test_var_const_function_and_module():
    x = relay.var("data", shape=(1, 3, 8, 8), dtype="float32")
    w = relay.var("w", shape=(4, 3, 3, 3))
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1)))
    assert relay.analysis.free_vars(y) == [x, w]
    mod = tvm.IRModule.from_expr(y)
    assert [p.name_hint for p in mod["main"].params] == ["data", "w"]
    infer(mod["main"])
    assert mod["main"].checked_type.ret_type == relay.TensorType((1, 4, 8, 8), "float32")
    c = relay.const(1.5)
    assert c.data.dtype == np.float32 and relay.const(2).data.dtype == np.int32
    assert relay.const(np.arange(3, dtype="int64")).data.dtype == np.int64


def test_expressions_compare_by_identity():
    a = relay.var("a", shape=(2,))
    assert a == a and a != relay.var("a", shape=(2,))
    assert len({relay.exp(a), relay.exp(a)}) == 2


def test_operator_overloads_and_tuple_wrapper():
    a = relay.var("a", shape=(2, 2))
    expr = (a + 1.0) * a - a / 2.0
    assert infer(expr).checked_type == relay.TensorType((2, 2), "float32")
    parts = relay.split(a, 2, axis=1)
    assert len(parts) == 2
    assert infer(parts[1]).checked_type.shape == (2, 1)


def test_function_rebuilt_like_in_the_tuning_tutorial():
    # 004's get_network: wrap the body in softmax, keep params, type params and attrs
    mod, _ = relay.testing.resnet.get_workload(num_layers=18, batch_size=1, image_shape=(3, 32, 32))
    net = mod["main"]
    net = relay.Function(net.params, relay.nn.softmax(net.body), None, net.type_params, net.attrs)
    mod = tvm.IRModule.from_expr(net)
    infer(mod["main"])
    assert mod["main"].checked_type.ret_type.shape == (1, 1000)


def test_printer_shows_ops_attrs_and_types():
    x = relay.var("data", shape=(1, 3, 8, 8))
    w = relay.var("w", shape=(4, 3, 3, 3))
    f = relay.Function([x, w], relay.nn.relu(relay.nn.conv2d(x, w, strides=(2, 2), padding=(1, 1))))
    infer(f)
    text = f.astext()
    assert "def @main(%data: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32])" in text
    assert "%0 = nn.conv2d(%data, %w, strides=[2, 2], padding=[1, 1, 1, 1]) /* ty=Tensor[(1, 4, 4, 4), float32] */;" in text
    assert "nn.relu(%0)" in text
    assert "nn.conv2d" in str(tvm.IRModule.from_expr(f))


def test_op_registry_entries():
    conv = relay.op.get("nn.conv2d")
    assert conv.name == "nn.conv2d" and conv.pattern == relay.op.OpPattern.OUT_ELEMWISE_FUSABLE
    assert conv.inputs == ("data", "weight") and not hasattr(conv, "compute")  # op_impl.py computes ops
    assert relay.op.get("add").pattern == relay.op.OpPattern.BROADCAST
    assert relay.op.get("reshape").pattern == relay.op.OpPattern.INJECTIVE
    assert relay.op.get("sum").pattern == relay.op.OpPattern.COMM_REDUCE
    with pytest.raises(KeyError, match="no op"):
        relay.op.get("nn.conv7d")
    with pytest.raises(TypeError, match="unknown attribute"):
        relay.op.get("nn.relu")(relay.var("x", shape=(1,)), alpha=2)


@pytest.mark.parametrize("build, message", [
    (lambda: relay.nn.conv2d(relay.var("x", shape=(3, 8, 8)), relay.var("w", shape=(4, 3, 3, 3))),
     r"nn.conv2d: input 'data' has 3 dims; expected 4 \(NCHW\)"),
    (lambda: relay.nn.conv2d(relay.var("x", shape=(1, 3, 8, 8)), relay.var("w", shape=(4, 2, 3, 3))),
     r"nn.conv2d: input 'weight' has 2 input channels per group"),
    (lambda: relay.add(relay.var("a", shape=(2, 3)), relay.var("b", shape=(4,))),
     r"add: shapes cannot be broadcast together \('lhs': \(2, 3\), 'rhs': \(4,\)\)"),
    (lambda: relay.add(relay.var("a", shape=(2,)), relay.var("b", shape=(2,), dtype="int32")),
     r"add: inputs must share a dtype"),
    (lambda: relay.nn.dense(relay.var("a", shape=(2, 5)), relay.var("w", shape=(3, 4))),
     r"nn.dense: input 'data' \(2, 5\) has 5 features but 'weight' \(3, 4\) expects 4"),
    (lambda: relay.reshape(relay.var("a", shape=(2, 3)), (4, -1)), r"reshape: cannot reshape \(2, 3\)"),
    (lambda: relay.nn.batch_norm(relay.var("x", shape=(1, 4, 2, 2)), *[relay.var(n, shape=(3,)) for n in "gbmv"])[0],
     r"nn.batch_norm: input 'gamma' has 3 values but 'data' \(1, 4, 2, 2\) has 4 channels"),
])
def test_type_errors_name_the_op_and_input(build, message):
    with pytest.raises(ShapeError, match=message):
        infer(build())


def test_type_error_points_at_the_call():
    a = relay.var("lhs_in", shape=(2, 3))
    with pytest.raises(ShapeError, match=r"at: add\(%lhs_in, %rhs_in\)"):
        infer(relay.add(a, relay.var("rhs_in", shape=(5,))))


def test_reshape_codes_and_shapes():
    x = relay.var("x", shape=(2, 3, 4))
    assert infer(relay.reshape(x, (0, -1))).checked_type.shape == (2, 12)
    assert infer(relay.transpose(x)).checked_type.shape == (4, 3, 2)
    assert infer(relay.strided_slice(x, [0, 1], [2, 3], [1, 1])).checked_type.shape == (2, 2, 4)
    assert infer(relay.take(x, relay.const(np.array([0, 2], "int64")), axis=2)).checked_type.shape == (2, 3, 2)
    assert infer(relay.sum(x, axis=1, keepdims=True)).checked_type.shape == (2, 1, 4)
    assert infer(relay.mean(x, axis=[0], exclude=True)).checked_type.shape == (2,)
    assert infer(relay.expand_dims(x, -1, 2)).checked_type.shape == (2, 3, 4, 1, 1)
    assert infer(relay.image.resize2d(relay.var("i", shape=(1, 3, 4, 4)), (8, 6))).checked_type.shape == (1, 3, 8, 6)


def test_deep_graph_does_not_hit_recursion_limit():
    x = relay.var("x", shape=(4,))
    y = x
    for _ in range(5000):
        y = relay.nn.relu(y)
    f = relay.Function([x], y)
    infer(f)
    assert len(f.astext().splitlines()) > 5000
    out = relay.reference.run(tvm.IRModule.from_expr(f), {"x": np.array([-1, 0, 1, 2], "float32")})
    np.testing.assert_array_equal(out, [0, 0, 1, 2])


def test_importing_relay_stays_light():
    import subprocess
    import sys
    code = ("import sys, kiln; from kiln import relay; import kiln.relay.testing; "
            "relay.transform.FuseOps(); "
            "bad = [m for m in ('onnx', 'onnxruntime', 'llvmlite') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_op_calls_finds_convs_for_task_extraction():
    mod, _ = relay.testing.resnet.get_workload(num_layers=18, image_shape=(3, 32, 32))
    convs = relay.analysis.op_calls(mod["main"], ops=(relay.op.get("nn.conv2d"),))
    assert len(convs) == 20  # stem, 16 block convs, 3 projection shortcuts
    first = convs[0]
    assert first.args[0].checked_type.shape == (1, 3, 32, 32) and first.attrs.strides == (2, 2)
    fused = relay.transform.FuseOps()(mod)
    assert len(relay.analysis.op_calls(fused["main"], ["nn.conv2d"])) == 20
