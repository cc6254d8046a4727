"""qnn.avg_pool2d in integers on Cortex-M targets (kiln/relay/qnn/avg_pool_int.py, issue 36): the
same integers as qnn's float32 lowering that other targets build (the llvm build here), for odd
windows, strides, zero points and extreme inputs; chosen only where exact (even windows, whose ties
the float form rounds either way, keep it); and on the M4F board, where the pooled int8 input stays
int8 (no float copy of it)."""

import numpy as np
import pytest

import kiln as tvm
from kiln import micro, relay
from kiln.contrib import graph_executor
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu
from kiln.relay.backend import Executor
from kiln.relay.qnn.avg_pool_int import QAVG_POOL2D, exact_for

M4 = "c -keys=arm_cpu -mcpu=cortex-m4"


def _pool_model(shape, pool, strides, zi, zo, si=0.05, so=0.05):
    x = relay.var("x", shape=shape, dtype="int8")
    y = relay.qnn.op.avg_pool2d(x, relay.const(np.float32(si)), relay.const(zi), relay.const(np.float32(so)),
                                relay.const(zo), pool_size=pool, strides=strides)
    return tvm.IRModule.from_expr(relay.Function([x], y))


def _run(mod, target, x):
    lib = relay.build(mod, target=target)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(x=x)
    m.run()
    return m.get_output(0).numpy(), " ".join(lib.get_lib().function_names())


def _inputs(shape, rng):
    xs = [rng.integers(-128, 128, shape, dtype=np.int8), np.full(shape, -128, np.int8), np.full(shape, 127, np.int8)]
    ties = np.zeros(shape, np.int8)  # window sums of 1, 3, -1, -3 over 2 or 4 taps: k + 1/2
    ties.reshape(-1)[::2] = rng.choice([1, 3, -1, -3, 5], ties.size // 2 + ties.size % 2)
    return xs + [ties]


@pytest.mark.parametrize("shape,pool,strides,zi,zo", [
    ((1, 8, 25, 5), (25, 5), (1, 1), -128, -128),  # DS-CNN's pool: odd count, no ties
    ((1, 4, 6, 6), (3, 3), (3, 3), 3, -7),
    ((1, 3, 5, 7), (1, 3), (1, 2), 0, 10),
    ((2, 2, 4, 6), (3, 1), (1, 1), -5, 0)])
def test_integer_pool_equals_the_float_lowering(shape, pool, strides, zi, zo):
    mod = _pool_model(shape, pool, strides, zi, zo)
    rng = np.random.default_rng(3)
    for x in _inputs(shape, rng):
        want, _ = _run(mod, "llvm", x)  # qnn's float32 form
        got, src = _run(mod, M4, x)     # the host cc build of the Cortex-M C, integer form
        assert "qavg_pool" in src, "the integer pool was not chosen on the Cortex-M target"
        np.testing.assert_array_equal(got, want)
        attrs = type("A", (), dict(pool_size=pool, strides=strides, zi=zi, zo=zo, out_dtype="int8"))
        np.testing.assert_array_equal(QAVG_POOL2D.reference(attrs, x), want)


@pytest.mark.parametrize("pool,si,so", [((3, 3), 0.05, 0.07), ((2, 2), 0.05, 0.05)])
def test_float_form_kept_where_integers_would_differ(pool, si, so):
    """Different input and output scales (the ratio is a float product), or an even window (a tie
    k + 1/2 rounds either way in float32), keep qnn's float form."""
    mod = _pool_model((1, 2, 6, 6), pool, pool, 3, -7, si=si, so=so)
    x = np.random.default_rng(1).integers(-128, 128, (1, 2, 6, 6), dtype=np.int8)
    got, src = _run(mod, M4, x)
    assert "qavg_pool" not in src
    np.testing.assert_array_equal(got, _run(mod, "llvm", x)[0])
    # odd counts while 2 n (255 (n + 2) 2**-24 + 2**-16) < 1
    assert exact_for(125) and exact_for(179) and not exact_for(181) and not exact_for(4)


def test_integer_pool_on_the_m4(tmp_path):
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    shape = (1, 16, 25, 5)
    mod = _pool_model(shape, (25, 5), (1, 1), -128, -128)
    x = np.random.default_rng(4).integers(-128, 128, shape, dtype=np.int8)
    want, _ = _run(mod, "llvm", x)
    lib = relay.build(mod, target=M4, executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), lib, tmp_path / "fw",
                                     {"inputs": {"x": x}})
    project.build()
    np.testing.assert_array_equal(next(iter(project.run()["outputs"].values())), want)
