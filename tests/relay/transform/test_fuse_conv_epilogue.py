"""FuseConvEpilogue: bfloat16 conv2d + bias [+ residual] [+ relu] as one AMX kernel that rounds once
(closer to float32 than the unfused ops' three roundings); only for targets LLVM gives AMX-BF16. (The fused ops against their numpy
reference: tests/relay/test_build_ops.py::test_amx_conv_bias_ops_match_reference.)"""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.transform import to_mixed_precision
from kiln.target.cpu_facts import cpu_facts, why_host_cannot_run

pytest.importorskip("ml_dtypes", reason="ToMixedPrecision's bfloat16 constants need ml_dtypes")

AMX = "llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids"
FUSED = "nn_contrib_conv2d_bias_"  # both ops' kernel names start so


def _resnet_like(mixed: bool = True):
    """An RGB 7x7/2 stem + relu, a basic block (3x3 + relu, 3x3 + residual + relu), and a
    1x1 conv + relu, a downsampling block (3x3/2 + relu, 3x3; 1x1/2 shortcut; add; relu): each
    epilogue ResNet has;
    then a global average pool (blocked too, so the last add stays on blocked data). ``mixed``:
    after ToMixedPrecision("bfloat16"), else the float32 net."""
    rng = np.random.default_rng(0)

    def conv(x, c, o, k, stride=1):
        w = relay.const((rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype("float32"))
        b = relay.const(rng.standard_normal((o, 1, 1)).astype("float32") * 0.1)
        return relay.add(relay.nn.conv2d(x, w, strides=(stride, stride), padding=(k // 2,) * 2, channels=o,
                                         kernel_size=(k, k)), b)

    x = relay.var("x", shape=(1, 3, 30, 30))
    stem = relay.nn.relu(conv(x, 3, 32, 7, 2))                       # 15x15
    y = relay.nn.relu(conv(stem, 32, 32, 3))
    block = relay.nn.relu(relay.add(conv(y, 32, 32, 3), stem))
    block = relay.nn.relu(conv(block, 32, 32, 1))                    # 1x1: runs without junk pixels
    y = relay.nn.relu(conv(block, 32, 64, 3, 2))                     # 8x8
    out = relay.nn.global_avg_pool2d(relay.nn.relu(relay.add(conv(y, 64, 64, 3), conv(block, 32, 64, 1, 2))))
    func = relay.Function([x], out)
    return to_mixed_precision(func, "bfloat16") if mixed else func


def _build(func, target, fuse=True):
    mod = tvm.IRModule.from_expr(func)
    with tvm.transform.PassContext(opt_level=3, disabled_pass=[] if fuse else ["FuseConvEpilogue"]):
        lib = relay.build(mod, target=target)
    names = re.findall(r"func_name[^A-Za-z_]+([A-Za-z_0-9]+)", lib.graph_json)
    return lib, sum(FUSED in n for n in names)


def test_fused_kernels_are_no_further_from_float32():
    """Every conv of the net becomes one fused kernel (7 of 7), and its output (one rounding per
    conv) is no further from the float32 net's (numpy reference) than the unfused build's (three
    roundings per conv): mean and max difference over the 64 outputs."""
    from kiln.relay import reference

    func = _resnet_like()
    fused, count = _build(func, AMX)
    unfused, none = _build(func, AMX, fuse=False)
    assert (count, none) == (7, 0)
    assert re.search(r"\btdpbf16ps\b", fused.get_lib().get_source("asm"))
    why_not = why_host_cannot_run(tvm.target.Target(AMX))
    if why_not:
        pytest.skip(f"AMX code cannot run here: {why_not}")
    x = np.random.default_rng(1).standard_normal((1, 3, 30, 30)).astype("float32")
    want = np.asarray(reference.run(tvm.IRModule.from_expr(_resnet_like(mixed=False)), {"x": x}), np.float64)
    errors = []
    for lib in (fused, unfused):
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        m.set_input(x=x)
        m.run()
        errors.append(np.abs(m.get_output(0).numpy() - want))
    assert np.abs(want).max() > 0  # relu did not zero everything
    assert errors[0].mean() <= errors[1].mean() and errors[0].max() <= errors[1].max(), \
        (errors[0].mean(), errors[1].mean(), errors[0].max(), errors[1].max())
    # and within bfloat16's reach: a few steps of 2^-8 at the outputs' scale
    assert errors[0].max() <= 2.0 ** -5 * np.abs(want).max()


@pytest.mark.parametrize("cpu, fused", [("sapphirerapids -mattr=-amx-bf16", 0), ("znver4", 0), ("haswell", 0),
                                        ("sapphirerapids", 7)])
def test_no_fusion_without_amx(cpu, fused):
    """CPUs without AMX-BF16 keep the conv and its epilogue as relay ops (the graph passes only)."""
    from kiln.relay import transform
    from kiln.relay.visitor import post_order
    target = tvm.target.Target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    assert ("amx-bf16" in cpu_facts(target).features) == bool(fused)
    with target, tvm.transform.PassContext(opt_level=3):
        mod = transform.optimize_sequence()(tvm.IRModule.from_expr(_resnet_like()))
    ops = [getattr(n.op, "name", "") for n in post_order(mod["main"].body) if isinstance(n, relay.Call)]
    ops += [getattr(m.op, "name", "") for n in post_order(mod["main"].body) if isinstance(n, relay.Function)
            for m in post_order(n.body) if isinstance(m, relay.Call)]
    assert sum(o.startswith("nn.contrib_conv2d_bias") for o in ops) == fused, ops


def _layer(rng):
    """One bfloat16 conv 3x3 (32 -> 32 at 6x6, blocked in: its input comes from another conv) +
    bias + residual + relu, ToMixedPrecision's, then a 1x1 max pool (the identity, on blocked
    data); its inputs, weights and bias bfloat16 numbers."""
    import ml_dtypes

    def bf(*shape):
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16).astype("float32")

    x, w0, w, b, r = bf(1, 32, 6, 6), bf(32, 32, 1, 1), bf(32, 32, 3, 3), bf(32, 1, 1), bf(1, 32, 6, 6)
    xv, rv = relay.var("x", shape=x.shape), relay.var("r", shape=r.shape)
    first = relay.nn.conv2d(xv, relay.const(w0), channels=32, kernel_size=(1, 1))  # rounds: exact input below
    y = relay.nn.relu(relay.add(relay.add(relay.nn.conv2d(first, relay.const(w), padding=(1, 1), channels=32,
                                                          kernel_size=(3, 3)), relay.const(b)), rv))
    y = relay.nn.max_pool2d(y, (1, 1))  # exact, and blocked: the epilogue stays on blocked data
    return to_mixed_precision(relay.Function([xv, rv], y), "bfloat16"), x, w0, w, b, r


def _chain(func, target, fuse=True) -> list:
    """The op names of each fused kernel after relay's passes (FuseOps' primitive functions)."""
    from kiln.relay import transform
    from kiln.relay.visitor import post_order
    with tvm.target.Target(target), tvm.transform.PassContext(opt_level=3, disabled_pass=[] if fuse else
                                                                  ["FuseConvEpilogue"]):
        mod = transform.optimize_sequence()(tvm.IRModule.from_expr(func))
    return [[getattr(m.op, "name", "") for m in post_order(n.body) if isinstance(m, relay.Call)]
            for n in post_order(mod["main"].body) if isinstance(n, relay.Function)]


@pytest.mark.parametrize("cpu", ["haswell", "cooperlake"])
def test_float32_epilogue_without_amx(cpu):
    """Without AMX the pass moves the cast to bfloat16 after bias, residual and relu (float32, one
    rounding per conv; FuseOps puts them in the conv's tile store, one kernel as before), and
    the output is within one bfloat16 rounding of the exact conv of its bfloat16 operands,
    wherever this machine runs the code."""
    from kiln.topi import testing

    func, x, w0, w, b, r = _layer(np.random.default_rng(4))
    target = f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}"
    fused, unfused = _chain(func, target), _chain(func, target, fuse=False)
    assert ["nn.conv2d", "add", "add", "nn.relu", "cast"] in fused, fused  # float32 epilogue, one rounding
    assert ["nn.conv2d", "cast", "add", "add", "nn.relu"] in unfused, unfused  # rounded, then bfloat16 adds
    assert len(fused) == len(unfused)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), target=target)
    if why_host_cannot_run(tvm.target.Target(target)):
        pytest.skip(f"{cpu} code cannot run here")
    import ml_dtypes
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(x=x, r=r)
    m.run()
    got = m.get_output(0).numpy().astype(np.float64)
    # the first conv's output, rounded to bfloat16 as the kernel stores it (float32 sum of 32
    # exact products, then one rounding): recompute it exactly the same way
    first = testing.conv2d_nchw_python(x.astype(np.float64), w0.astype(np.float64), 1, 0)
    first = first.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    exact = np.maximum(testing.conv2d_nchw_python(first, w.astype(np.float64), 1, 1) + b + r, 0)
    spread = testing.conv2d_nchw_python(np.abs(first), np.abs(w.astype(np.float64)), 1, 1) + np.abs(b) + np.abs(r)
    # float32 sums of 288 products + 2 terms (<= 290 * 2^-24 * spread), then one rounding (2^-8);
    # the first conv's float32 sum order may flip one of its roundings: one step of its value
    # carried through the second conv (2^-7 * conv(|first|, |w|))
    flip = testing.conv2d_nchw_python(np.abs(first), np.abs(w.astype(np.float64)), 1, 1) * 2.0 ** -7
    bound = 2.0 ** -8 * (np.abs(exact) + flip) + 290 * 2.0 ** -24 * spread + flip
    assert np.all(np.abs(got - exact) <= bound), np.max(np.abs(got - exact) - bound)
