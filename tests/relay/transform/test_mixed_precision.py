"""ToMixedPrecision: which ops go to float16, where the casts are, and ResNet-18's accuracy."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import CompileError
from kiln.relay.transform import infer, to_mixed_precision

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from onnx_models import resnet18, run_ort  # noqa: E402
from helpers.ranking import assert_ranking_kept, float16_step  # noqa: E402


def _calls(func) -> list:
    """(op name, output dtype, attrs) of every op call, in post order."""
    from kiln.relay.visitor import post_order
    out = []
    for node in post_order(infer(func).body):
        if isinstance(node, relay.Call) and hasattr(node.op, "name"):
            out.append((node.op.name, node.checked_type.dtype if hasattr(node.checked_type, "dtype") else None,
                        node.attrs))
    return out


def _conv_net(head: str = "relu"):
    x = relay.var("x", shape=(1, 4, 8, 8))
    w = relay.const(np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype("float32"))
    y = relay.nn.conv2d(x, w, padding=(1, 1), channels=8, kernel_size=(3, 3))
    y = relay.nn.relu(relay.add(y, relay.const(np.ones((8, 1, 1), "float32"))))
    if head == "softmax":
        y = relay.nn.softmax(relay.nn.batch_flatten(y))
    return relay.Function([x], y)


def test_conv_runs_in_float16_and_interface_stays_float32():
    f = to_mixed_precision(_conv_net())
    calls = _calls(f)
    names = [c[0] for c in calls]
    assert names == ["cast", "nn.conv2d", "add", "nn.relu", "cast"]
    assert calls[0][1] == "float16" and calls[1][1] == "float16" and calls[-1][1] == "float32"
    assert f.params[0].checked_type.dtype == "float32"
    assert f.body.checked_type.dtype == "float32"
    # the weight and the bias became float16 constants (converted once, not cast in the graph)
    conv = [n for n in _conv_consts(f)]
    assert conv and all(c.data.dtype == np.float16 for c in conv)


def _conv_consts(func):
    from kiln.relay.visitor import post_order
    return [n for n in post_order(func.body) if isinstance(n, relay.Constant)]


def test_float32_accumulation_casts_after_the_op():
    f = to_mixed_precision(_conv_net(), accumulation_dtype="float32")
    calls = _calls(f)
    names = [c[0] for c in calls]
    assert names == ["cast", "nn.conv2d", "cast", "add", "nn.relu", "cast"]
    assert calls[1][1] == "float32" and calls[1][2].out_dtype == "float32"
    assert calls[2][1] == "float16"


def test_never_ops_stay_float32():
    f = to_mixed_precision(_conv_net("softmax"))
    by_name = {c[0]: c[1] for c in _calls(f)}
    assert by_name["nn.softmax"] == "float32" and by_name["nn.conv2d"] == "float16"
    assert by_name["nn.batch_flatten"] == "float16"  # follows its float16 input, then cast back


def test_follow_ops_without_float16_input_stay_float32():
    x = relay.var("x", shape=(4, 4))
    f = to_mixed_precision(relay.Function([x], relay.nn.relu(relay.add(x, x))))
    assert [c[0] for c in _calls(f)] == ["add", "nn.relu"]
    assert all(c[1] == "float32" for c in _calls(f))


def test_overrides_move_ops_between_lists():
    f = to_mixed_precision(_conv_net("softmax"), overrides={"nn.softmax": "follow", "nn.conv2d": "never"})
    by_name = {c[0]: c[1] for c in _calls(f)}
    assert by_name["nn.conv2d"] == "float32" and by_name["nn.softmax"] == "float32"
    f = to_mixed_precision(_conv_net("softmax"), overrides={"nn.softmax": "follow"})
    assert {c[0]: c[1] for c in _calls(f)}["nn.softmax"] == "float16"


def test_dense_and_tuple_outputs():
    x = relay.var("x", shape=(2, 16))
    w = relay.const(np.ones((8, 16), "float32"))
    d = relay.nn.dense(x, w)
    f = to_mixed_precision(relay.Function([x], relay.Tuple([d, relay.exp(d)])))
    assert [t.dtype for t in f.body.checked_type.fields] == ["float32", "float32"]
    assert {c[0]: c[1] for c in _calls(f)}["nn.dense"] == "float16"


def test_bad_arguments_name_the_problem():
    with pytest.raises(CompileError, match="bfloat8.*float16"):
        to_mixed_precision(_conv_net(), "bfloat8")
    with pytest.raises(CompileError, match="accumulation dtype 'int8'"):
        to_mixed_precision(_conv_net(), accumulation_dtype="int8")
    with pytest.raises(CompileError, match="unknown op 'nn.conv9d'"):
        to_mixed_precision(_conv_net(), overrides={"nn.conv9d": "always"})
    with pytest.raises(CompileError, match="list 'sometimes'"):
        to_mixed_precision(_conv_net(), overrides={"nn.conv2d": "sometimes"})


def test_small_net_matches_float32_within_half_precision():
    f = _conv_net()
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype("float32")
    outs = []
    for func in (f, to_mixed_precision(f), to_mixed_precision(f, accumulation_dtype="float32")):
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(tvm.IRModule.from_expr(func), target="llvm")
        m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
        m.set_input("x", x)
        m.run()
        outs.append(m.get_output(0).numpy())
    ref = np.maximum(0, outs[0])
    for out in outs[1:]:
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())


# A float16 logit of this network is within about 16 float16 steps (at the logits' scale, 2^4 x
# 2^-11..2^-10 of the largest logit: 0.8-1.6 %) of float32: the accuracy the test asserts for the
# whole output. Classes further apart than two such bounds keep their order on every CPU; closer
# ones (the 5th and 6th here are 1.2 steps apart) depend on how the CPU rounds half arithmetic.
FLOAT16_LOGIT_STEPS = 16


@pytest.mark.parametrize("acc", ["float16", "float32"])
def test_resnet18_float16_ranking_and_error(acc):
    """ResNet-18 in float16 on the host's CPU (native half arithmetic where it has AVX512-FP16):
    the ranking onnxruntime's float32 determines at float16's precision, and max relative error
    (max |diff| / max |logit|) <= 1e-2."""
    model, inputs = resnet18()
    want = run_ort(model, inputs)[0]
    mod, params = relay.frontend.from_onnx(model, shape={"data": inputs["data"].shape})
    mod = relay.transform.BindParams(params)(mod)
    mod = relay.transform.ToMixedPrecision("float16", accumulation_dtype=acc)(mod)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    m.set_input("data", inputs["data"])
    m.run()
    got = m.get_output(0).numpy()
    assert got.dtype == np.float32
    print(assert_ranking_kept(got[0], want[0], bound=FLOAT16_LOGIT_STEPS * float16_step(want[0])))
    rel = np.abs(got - want).max() / np.abs(want).max()
    print(f"ResNet-18 float16 (acc {acc}): max relative error {rel:.2e}")
    assert rel <= 1e-2
    assert rel > 0  # it really ran in float16


@pytest.mark.parametrize("target, native", [
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+fullfp16", r"\b(fmul|fadd|fmla)\s+v\d+\.8h"),   # ARMv8.2 FP16
    ("llvm -mcpu=sapphirerapids", r"\bv(mul|add|fmadd\w*)ph\b"),                             # AVX512-FP16
    ("llvm -mtriple=aarch64-linux-gnu", None),
    ("llvm -mcpu=haswell", None),
    ("llvm -mcpu=znver3", None),
])
def test_float16_kernels_are_native_where_the_cpu_computes_in_float16(target, native):
    """float16 kernels: half arithmetic where the CPU has it, else float32 arithmetic between
    vector conversions (F16C vcvtph2ps/vcvtps2ph on x86, fcvtl/fcvtn on AArch64)."""
    import re

    from kiln import te
    n = 1024
    a, b = te.placeholder((n,), "float16", name="A"), te.placeholder((n,), "float16", name="B")
    c = te.compute((n,), lambda i: a[i] * b[i] + a[i], name="C")
    s = te.create_schedule(c.op)
    _, inner = s[c].split(c.op.axis[0], factor=8)
    s[c].vectorize(inner)
    asm = tvm.build(s, [a, b, c], target=target).get_source("asm")
    if native:
        assert re.search(native, asm), asm[:2000]
    else:
        convert = r"vcvtph2ps" if "aarch64" not in target else r"\bfcvtl\b"
        assert re.search(convert, asm)
        assert not re.search(r"\b(fmul|fadd|fmla)\s+v\d+\.8h|\bv(mul|add|fmadd\w*)ph\b", asm)


def test_float16_kernel_values():
    from kiln import te
    n = 1000
    a, b = te.placeholder((n,), "float16", name="A"), te.placeholder((n,), "float16", name="B")
    c = te.compute((n,), lambda i: a[i] * b[i] + a[i], name="C")
    s = te.create_schedule(c.op)
    _, inner = s[c].split(c.op.axis[0], factor=8)
    s[c].vectorize(inner)
    f = tvm.build(s, [a, b, c], target="llvm")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n).astype("float16"), rng.standard_normal(n).astype("float16")
    out = tvm.nd.empty((n,), "float16")
    f(tvm.nd.array(x), tvm.nd.array(y), out)
    want = (x.astype("float32") * y.astype("float32") + x.astype("float32"))
    np.testing.assert_allclose(out.numpy().astype("float32"), want, rtol=2e-3, atol=2e-3)


# -- bfloat16 ---------------------------------------------------------------------------------------

def test_bfloat16_conv_accumulates_in_float32_and_rounds_weights_to_nearest_even():
    import ml_dtypes
    f = to_mixed_precision(_conv_net(), "bfloat16")
    calls = _calls(f)
    assert [c[0] for c in calls] == ["cast", "nn.conv2d", "cast", "add", "nn.relu", "cast"]
    assert calls[0][1] == "bfloat16" and calls[1][1] == "float32" and calls[1][2].out_dtype == "float32"
    assert calls[2][1] == "bfloat16" and calls[-1][1] == "float32"
    weight = _conv_net().body.args[0].args[0].args[1].data
    consts = [c.data for c in _conv_consts(f) if c.data.shape == weight.shape]
    assert consts and consts[0].dtype.name == "bfloat16"
    # ml_dtypes rounds to nearest even: the reference for the constants' bits
    np.testing.assert_array_equal(consts[0].view(np.uint16), weight.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_bfloat16_refuses_bfloat16_accumulation():
    with pytest.raises(CompileError, match="accumulation dtype 'bfloat16' with bfloat16.*float32"):
        to_mixed_precision(_conv_net(), "bfloat16", accumulation_dtype="bfloat16")


def _bf16_numbers(shape, seed):
    """float32 numbers that are bfloat16 numbers (8 significant bits), so casts to bfloat16 are exact."""
    import ml_dtypes
    return np.random.default_rng(seed).standard_normal(shape).astype(ml_dtypes.bfloat16).astype("float32")


def test_small_bfloat16_net_within_its_error_bound():
    """conv 3x3/2 (the direct blocked kernel) + bias + relu in bfloat16 (float32 accumulation),
    against float64: inputs and weights are bfloat16 numbers, so the error is the float32 sum
    (1e-6 relative, generously) plus one bfloat16 rounding of the conv output and one of the bias
    add (|err| <= 2^-8 |value| each, the first carried through the add); relu changes nothing."""
    from kiln.topi import testing
    x, w, b = _bf16_numbers((1, 4, 8, 8), 1), _bf16_numbers((8, 4, 3, 3), 2), _bf16_numbers((8, 1, 1), 3)
    data = relay.var("x", shape=x.shape)
    y = relay.nn.relu(relay.add(relay.nn.conv2d(data, relay.const(w), strides=(2, 2), padding=(1, 1),
                                                channels=8, kernel_size=(3, 3)), relay.const(b)))
    f = to_mixed_precision(relay.Function([data], y), "bfloat16")
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(f), target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    m.set_input("x", x)
    m.run()
    got = m.get_output(0).numpy()
    conv = testing.conv2d_nchw_python(x.astype("float64"), w.astype("float64"), 2, 1)
    want = np.maximum(conv + b, 0)
    u = 2.0 ** -8  # bfloat16 unit roundoff
    bound = u * np.abs(conv) * (1 + u) + u * (np.abs(conv + b) + u * np.abs(conv)) + 1e-6 * np.abs(conv)
    assert got.dtype == np.float32
    assert np.all(np.abs(got - want) <= bound)
    assert np.abs(got - want).max() > 0  # it did round to bfloat16


# bfloat16 keeps 8 significant bits: a logit of this network is within a few bfloat16 steps at the
# logits' scale (measured on this ResNet: 2.7); classes more than two such bounds apart keep their
# order on every CPU.
BFLOAT16_LOGIT_STEPS = 6


def test_resnet18_bfloat16_ranking_and_error():
    """ResNet-18 in bfloat16 (float32 accumulation) against onnxruntime's float32: the ranking the
    bfloat16 margin determines, and max relative error (max |diff| / max |logit|) <= 2^-5."""
    from helpers.ranking import bfloat16_step
    model, inputs = resnet18()
    want = run_ort(model, inputs)[0]
    mod, params = relay.frontend.from_onnx(model, shape={"data": inputs["data"].shape})
    mod = relay.transform.BindParams(params)(mod)
    mod = relay.transform.ToMixedPrecision("bfloat16")(mod)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    m.set_input("data", inputs["data"])
    m.run()
    got = m.get_output(0).numpy()
    assert got.dtype == np.float32
    print(assert_ranking_kept(got[0], want[0], bound=BFLOAT16_LOGIT_STEPS * bfloat16_step(want[0])))
    rel = np.abs(got - want).max() / np.abs(want).max()
    print(f"ResNet-18 bfloat16: max relative error {rel:.2e}")
    assert 0 < rel <= 2.0 ** -5


def test_bfloat16_depthwise_and_clip_within_bound():
    """MobileNet's pieces in bfloat16: 1x1 conv, depthwise 3x3, clip(0, 6) (relu6), against float64.
    Three bfloat16 roundings reach the output (the input cast, the 1x1 conv's output, the
    depthwise output), each <= 2^-8 of a value bounded by M, the same network on |x| and |w|;
    clip is 1-Lipschitz: |err| <= 3 * 2^-8 * M (+ float32 sums, 1e-6 M)."""
    from kiln.topi import testing
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 16, 12, 12)).astype("float32")
    w1 = rng.standard_normal((32, 16, 1, 1)).astype("float32")
    w2 = rng.standard_normal((32, 1, 3, 3)).astype("float32")
    data = relay.var("x", shape=x.shape)
    y = relay.nn.conv2d(data, relay.const(w1), channels=32, kernel_size=(1, 1))
    y = relay.nn.conv2d(y, relay.const(w2), padding=(1, 1), groups=32, channels=32, kernel_size=(3, 3))
    f = to_mixed_precision(relay.Function([data], relay.clip(y, 0.0, 6.0)), "bfloat16")
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(f), target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    m.set_input("x", x)
    m.run()
    got = m.get_output(0).numpy()

    def net(a, k1, k2):
        return testing.depthwise_conv2d_nchw_python(testing.conv2d_nchw_python(a, k1, 1, 0), k2, 1, 1)
    x64, w1_64, w2_64 = x.astype("float64"), w1.astype("float64"), w2.astype("float64")
    want = np.clip(net(x64, w1_64, w2_64), 0, 6)
    mag = net(np.abs(x64), np.abs(w1_64), np.abs(w2_64))
    assert np.all(np.abs(got - want) <= (3 * 2.0 ** -8 + 1e-6) * mag)
    assert np.abs(got - want).max() > 0


@pytest.mark.parametrize("precision, cpu, weight_dtype", [
    ("bfloat16", "haswell", "float32"), ("bfloat16", "znver3", "float32"), ("bfloat16", "skylake-avx512", "float32"),
    ("bfloat16", "cooperlake", "uint16"), ("bfloat16", "sapphirerapids", "uint16"),
    ("float16", "haswell", "float32"), ("float16", "znver3", "float32"), ("float16", "sapphirerapids", "float16")])
def test_16_bit_conv_weights_widened_once_where_the_cpu_multiplies_in_float32(precision, cpu, weight_dtype):
    """Without AVX512-BF16 (bfloat16) or native half arithmetic (float16: F16C only) the conv tiles
    multiply in float32: the build widens the weight to float32 once (exact; it reaches the kernel
    as float32), not at each load in the tile (bfloat16 1x1 convs for znver3 ran 3-5x float32's
    time). CPUs with the instructions keep the 16-bit weight (bfloat16: channel pairs, uint16 bits
    at the runtime boundary). Values within the bound of
    test_small_bfloat16_net_within_its_error_bound (with float16's unit roundoff) wherever this
    machine runs the code, for the CPUs that sum in float32."""
    from kiln.target.cpu_facts import why_host_cannot_run
    from kiln.topi import testing
    x, w, b = _bf16_numbers((1, 16, 8, 8), 1), _bf16_numbers((32, 16, 1, 1), 2), _bf16_numbers((32, 1, 1), 3)
    w2 = _bf16_numbers((16, 32, 1, 1), 4)
    data = relay.var("x", shape=x.shape)
    y = relay.nn.relu(relay.add(relay.nn.conv2d(data, relay.const(w), channels=32, kernel_size=(1, 1)),
                                relay.const(b)))
    y = relay.nn.conv2d(y, relay.const(w2), channels=16, kernel_size=(1, 1))  # reads the first's blocks
    f = to_mixed_precision(relay.Function([data], y), precision)
    target = f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}"
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(f), target=target)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    convs = [args for _, name, _, args in m.module.kernels if "conv2d" in name]
    assert len(convs) == 2 and all(str(c[1].dtype) == weight_dtype for c in convs), \
        [[str(a.dtype) for a in c] for c in convs]
    if why_host_cannot_run(tvm.target.Target(target)) or weight_dtype == "float16":
        return  # (native float16 sums round at each step: test_resnet18_float16_ranking_and_error)
    m.set_input("x", x)
    m.run()
    got = m.get_output(0).numpy()
    u = 2.0 ** -8 if precision == "bfloat16" else 2.0 ** -11  # unit roundoff
    conv = testing.conv2d_nchw_python(x.astype("float64"), w.astype("float64"), 1, 0)
    mid = np.maximum(conv + b, 0)
    # the first conv's output (bias and relu applied) is rounded to bfloat16 at most twice (the
    # conv, the bias add: test_small_bfloat16_net_within_its_error_bound); the second conv reads
    # those bfloat16 numbers exactly and rounds once more
    mid_err = u * np.abs(conv) * (1 + u) + u * (np.abs(conv + b) + u * np.abs(conv)) + 1e-6 * np.abs(conv)
    want = testing.conv2d_nchw_python(mid, w2.astype("float64"), 1, 0)
    spread = testing.conv2d_nchw_python(mid_err, np.abs(w2.astype("float64")), 1, 0)
    bound = spread + u * (np.abs(want) + spread) + 1e-6 * testing.conv2d_nchw_python(mid, np.abs(w2.astype("float64")),
                                                                                   1, 0)
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) - bound)


@pytest.mark.parametrize("precision, cpu, block", [
    ("bfloat16", "sapphirerapids", 32),            # AMX: 64-byte A rows, K = 32 per tdpbf16ps
    ("bfloat16", "cooperlake", 16),                # vdpbf16ps: float32's vector block
    ("float16", "sapphirerapids", 32),             # AVX512-FP16: 32 halves per zmm
    ("float16", "sapphirerapids -mattr=-avx512fp16", 16),
    ("float16", "znver4", 16),
    ("float32", "sapphirerapids", 16),
])
def test_blocked_layout_fills_the_cpus_16_bit_vectors(precision, cpu, block):
    """AlterOpLayout's channel block for a 64-channel conv at 56x56 (float32's default there: 16):
    32 where the CPU multiplies the 16-bit type natively 32 to a register (amx_bf16.amx_block),
    else float32's."""
    from kiln.relay.transform import alter_op_layout, infer
    from kiln.relay.visitor import post_order
    x = relay.var("x", shape=(1, 64, 56, 56))
    w = relay.const(np.random.default_rng(0).standard_normal((64, 64, 3, 3)).astype("float32"))
    y = relay.nn.relu(relay.nn.conv2d(relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1))), w, padding=(1, 1)))
    f = relay.Function([x], y)
    if precision != "float32":
        f = to_mixed_precision(f, precision)
    target = tvm.target.Target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    with target:
        f = infer(alter_op_layout(infer(f), target))
    layouts = {str(n.attrs.out_layout) for n in post_order(f.body)
               if isinstance(n, relay.Call) and getattr(n.op, "name", "") == "nn.conv2d"}
    assert f"NCHW{block}c" in layouts, layouts
