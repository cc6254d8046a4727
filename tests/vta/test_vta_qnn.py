"""A power-of-two quantized conv (qnn.conv2d + qnn.requantize, rounding UPWARD, ReLU) on the
accelerator, bit-exact with kiln's own int8 CPU build of the same QNN graph."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, vta
from kiln.contrib import graph_executor
from kiln.ir.module import IRModule
from kiln.relay import qnn
from kiln.vta import top


def _cpu_int8(x, w, sx, sw, so, stride, pad):
    data = relay.var("x", shape=x.shape, dtype="int8")
    y = qnn.op.conv2d(data, relay.const(w), relay.const(0), relay.const(0), relay.const(sx), relay.const(sw),
                      kernel_size=w.shape[2:], channels=w.shape[0], strides=(stride, stride), padding=(pad, pad))
    y = qnn.op.requantize(y, relay.const(sx * sw), relay.const(0), relay.const(so), relay.const(0), out_dtype="int8")
    y = relay.clip(y, 0, 127)  # ReLU of a zero-point-0 int8 tensor
    mod = IRModule.from_expr(relay.Function([data], y))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(x=x)
    m.run()
    return m.get_output(0).numpy()


@pytest.mark.parametrize("shape, tile", [
    (top.ConvShape(1, 32, 8, 8, 32, 3, 3, 1, 1), top.Tile(4, 8, 2, 2, 2)),
    (top.ConvShape(1, 32, 8, 8, 16, 1, 1, 2, 0), top.Tile(4, 4, 1, 1, 1)),
])
def test_power2_qnn_conv_matches_cpu_int8_build(shape, tile):
    env = vta.get_env()
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, shape.c, shape.h, shape.w)).astype(np.int8)
    w = rng.integers(-127, 128, (shape.o, shape.c, shape.kh, shape.kw)).astype(np.int8)
    sx, sw, so = 2.0 ** -4, 2.0 ** -7, 2.0 ** -3  # so / (sx * sw) = 2**8: requantize is a rounded shift by 8
    want = _cpu_int8(x, w, sx, sw, so, shape.stride, shape.pad)
    shift = int(round(np.log2(so / (sx * sw))))
    tens = top.conv2d(env, shape, shift=shift, clip=(0, 127), round_half_up=True)
    s, args = top.schedule_conv2d(env, tens, tile)
    f = vta.build(s, args, env.target, name="qconv")
    dev = tvm.ext_dev(0)
    out = tvm.nd.empty(tuple(int(d.value) for d in args[2].shape), "int8", dev)
    f(tvm.nd.array(top.pack_nchw(x, 1, 16), dev), tvm.nd.array(top.pack_oihw(w, 16, 16), dev), out)
    got = top.unpack_nchw(out.numpy())
    assert np.count_nonzero(want) > want.size // 4  # the ReLU and the clip leave real values to compare
    np.testing.assert_array_equal(got, want)
