"""vta.build end to end: GEMM and conv2d schedules on both simulators, bit-exact with numpy."""

import re
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc, te, vta
from kiln.errors import CompileError
from kiln.vta import top


def _gemm_schedule(env, o=1, n=4, m=4, shift=3):
    """The schedule of VTA's matrix-multiply tutorial, plus one ALU shift."""
    A = te.placeholder((o, n, env.BATCH, env.BLOCK_IN), name="A", dtype=env.inp_dtype)
    B = te.placeholder((m, n, env.BLOCK_OUT, env.BLOCK_IN), name="B", dtype=env.wgt_dtype)
    A_buf = te.compute(A.shape, lambda *i: A(*i), "A_buf")
    B_buf = te.compute(B.shape, lambda *i: B(*i), "B_buf")
    ko = te.reduce_axis((0, n), name="ko")
    ki = te.reduce_axis((0, env.BLOCK_IN), name="ki")
    C_buf = te.compute((o, m, env.BATCH, env.BLOCK_OUT), lambda bo, co, bi, ci: te.sum(
        A_buf[bo, ko, bi, ki].astype(env.acc_dtype) * B_buf[co, ko, ci, ki].astype(env.acc_dtype), axis=[ko, ki]),
        name="C_buf")
    C_sh = te.compute(C_buf.shape, lambda *i: C_buf(*i) >> shift, name="C_sh")
    C = te.compute(C_buf.shape, lambda *i: C_sh(*i).astype(env.inp_dtype), name="C")
    s = te.create_schedule(C.op)
    s[A_buf].set_scope(env.inp_scope)
    s[B_buf].set_scope(env.wgt_scope)
    s[C_buf].set_scope(env.acc_scope)
    s[C_sh].set_scope(env.acc_scope)
    s[C_buf].reorder(ko, *s[C_buf].op.axis, ki)
    s[A_buf].compute_at(s[C_buf], ko)
    s[B_buf].compute_at(s[C_buf], ko)
    s[A_buf].pragma(s[A_buf].op.axis[0], env.dma_copy)
    s[B_buf].pragma(s[B_buf].op.axis[0], env.dma_copy)
    s[C_sh].pragma(s[C_sh].op.axis[0], env.alu)
    s[C].pragma(s[C].op.axis[0], env.dma_copy)
    s[C_buf].tensorize(s[C_buf].op.axis[2], env.gemm)
    return s, [A, B, C]


def _gemm_ref(a, b, shift):
    acc = np.einsum("onbi,mnci->ombc", a.astype(np.int64), b.astype(np.int64)).astype(np.int32)
    return (acc >> shift).astype(np.int8)  # STORE keeps the low 8 bits, as astype(int8) does


@pytest.mark.parametrize("mode", ["functional", "cycle"])
def test_gemm_tutorial(mode):
    env = vta.get_env()
    s, (A, B, C) = _gemm_schedule(env)
    f = vta.build(s, [A, B, C], tvm.target.Target("ext_dev", host=env.target_host), name="my_gemm")
    f.set_mode(mode)
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (1, 4, 1, 16)).astype("int8")
    b = rng.integers(-128, 128, (4, 4, 16, 16)).astype("int8")
    dev = tvm.ext_dev(0)
    c = tvm.nd.empty((1, 4, 1, 16), "int8", dev)
    f(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
    np.testing.assert_array_equal(c.numpy(), _gemm_ref(a, b, 3))
    stats = f["my_gemm"].last_stats
    assert stats["gemm_blocks"] == 4 * 4 + 4  # 16 products + 4 resets
    if mode == "cycle":
        assert 0 < stats["gemm_cycles"] < stats["cycles"]


def test_tvm_build_for_ext_dev_is_vta_build():
    # tvm.build with the accelerator's target gives the same instruction stream as vta.build
    env = vta.get_env()
    s, args = _gemm_schedule(env)
    via_vta = vta.build(s, args, env.target, name="my_gemm")
    s, args = _gemm_schedule(env)
    via_tvm = tvm.build(s, args, target=tvm.target.Target("ext_dev", host=env.target_host), name="my_gemm")
    np.testing.assert_array_equal(via_tvm["my_gemm"].insns, via_vta["my_gemm"].insns)
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (1, 4, 1, 16)).astype("int8")
    b = rng.integers(-128, 128, (4, 4, 16, 16)).astype("int8")
    dev = tvm.ext_dev(0)
    c = tvm.nd.empty((1, 4, 1, 16), "int8", dev)
    via_tvm(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
    np.testing.assert_array_equal(c.numpy(), _gemm_ref(a, b, 3))


def _start_server():
    """python -m kiln.exec.rpc_server on 127.0.0.1; returns (process, port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "kiln.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = open(log.name).read()
        m = re.search(r"bind to [\d.]+:(\d+)", text)
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            raise AssertionError(f"rpc_server exited:\n{text}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("rpc_server did not start")


def test_module_through_local_session_and_rpc(tmp_path):
    env = vta.get_env()
    s, args = _gemm_schedule(env)
    f = vta.build(s, args, env.target, name="my_gemm")
    path = str(tmp_path / "gemm.o")
    f.save(path)
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (1, 4, 1, 16)).astype("int8")
    b = rng.integers(-128, 128, (4, 4, 16, 16)).astype("int8")
    proc, port = _start_server()
    try:
        for remote in (rpc.LocalSession(), rpc.connect("127.0.0.1", port)):
            remote.upload(path)
            g = remote.load_module("gemm.o")
            dev = remote.ext_dev(0)
            c = tvm.nd.empty((1, 4, 1, 16), "int8", dev)
            g(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
            np.testing.assert_array_equal(c.numpy(), _gemm_ref(a, b, 3))
            remote.close()
    finally:
        proc.terminate()
        proc.wait(10)


def _conv(env, shape, tile, shift=6, seed=0):
    tens = top.conv2d(env, shape, shift=shift)
    s, args = top.schedule_conv2d(env, tens, tile)
    f = vta.build(s, args, env.target, name="conv")
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (shape.n, shape.c, shape.h, shape.w)).astype(np.int8)
    w = rng.integers(-128, 128, (shape.o, shape.c, shape.kh, shape.kw)).astype(np.int8)
    dev = tvm.ext_dev(0)
    xd = tvm.nd.array(top.pack_nchw(x, env.BATCH, env.BLOCK_IN), dev)
    wd = tvm.nd.array(top.pack_oihw(w, env.BLOCK_OUT, env.BLOCK_IN), dev)
    out = tvm.nd.empty(tuple(int(d.value) for d in args[2].shape), "int8", dev)
    return f, (xd, wd, out), top.conv2d_reference(x, w, shape.stride, shape.pad, shift)


@pytest.mark.parametrize("shape, tile", [
    (top.ConvShape(1, 32, 8, 8, 32, 3, 3, 1, 1), top.Tile(4, 8, 2, 2, 1)),
    (top.ConvShape(1, 32, 8, 8, 32, 3, 3, 1, 1), top.Tile(4, 8, 2, 2, 2)),
    (top.ConvShape(1, 16, 9, 9, 32, 3, 3, 2, 1), top.Tile(5, 5, 2, 1, 1)),
    (top.ConvShape(1, 32, 6, 6, 16, 1, 1, 2, 0), top.Tile(3, 3, 1, 2, 1)),
])
def test_conv2d_bit_exact(shape, tile):
    env = vta.get_env()
    f, arrays, ref = _conv(env, shape, tile)
    for mode in ("functional", "cycle"):
        f.set_mode(mode)
        arrays[2].copyfrom(np.zeros(arrays[2].shape, np.int8))
        f(*arrays)
        np.testing.assert_array_equal(top.unpack_nchw(arrays[2].numpy()), ref)


def test_virtual_threads_cut_cycles_on_dma_bound_layer():
    env = vta.get_env().replace(DMA_BYTES_PER_CYCLE=2, DMA_LATENCY=200)  # make the layer DMA-bound
    shape = top.ConvShape(1, 32, 8, 8, 64, 3, 3, 1, 1)
    cycles, util = {}, {}
    for vt in (1, 2):
        f, arrays, ref = _conv(env, shape, top.Tile(4, 8, 2, 1, vt))
        f.set_mode("cycle")
        f(*arrays)
        np.testing.assert_array_equal(top.unpack_nchw(arrays[2].numpy()), ref)
        cycles[vt] = f["conv"].last_stats["cycles"]
        util[vt] = f["conv"].last_stats.utilization()
    # DMA-bound: with one thread the load module (its DMAs) is busier than the compute module
    assert util[1]["load"] > util[1]["compute"], util[1]
    # two threads overlap one thread's loads with the other's GEMMs: the load module idles less
    # and the layer takes fewer cycles, although each thread loads its own input tile
    assert util[2]["load"] > util[1]["load"] + 0.2, util
    assert cycles[2] < 0.9 * cycles[1], cycles


def test_tile_too_big_for_sram_refused():
    env = vta.get_env().replace(LOG_ACC_BUFF_SIZE=12)  # 64 accumulator blocks
    tens = top.conv2d(env, top.ConvShape(1, 16, 8, 8, 32, 3, 3, 1, 1), shift=6)
    s, args = top.schedule_conv2d(env, tens, top.Tile(8, 8, 2, 1, 1))
    with pytest.raises(CompileError, match=r"buffer res_conv needs 128 acc blocks .* holds 64 \(LOG_ACC_BUFF_SIZE=12\)"):
        vta.build(s, args, env.target, env=env)


def test_conv2d_with_bias_loaded_into_accumulators():
    env = vta.get_env()
    shape = top.ConvShape(1, 32, 8, 8, 32, 3, 3, 1, 1)
    tens = top.conv2d(env, shape, shift=7, clip=(0, 127), round_half_up=True, bias=True)
    s, args = top.schedule_conv2d(env, tens, top.Tile(4, 8, 2, 2, 2))
    f = vta.build(s, args, env.target, name="conv")
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 32, 8, 8)).astype(np.int8)
    w = rng.integers(-128, 128, (32, 32, 3, 3)).astype(np.int8)
    b = rng.integers(-20000, 20000, 32).astype(np.int32)
    ref = top.conv2d_reference(x, w, 1, 1, 7, (0, 127), bias=b, round_half_up=True)
    dev = tvm.ext_dev(0)
    packed_bias = b.reshape(2, 1, 16)  # (O/BLOCK_OUT, BATCH, BLOCK_OUT)
    out = tvm.nd.empty((1, 2, 8, 8, 1, 16), "int8", dev)
    for mode in ("functional", "cycle"):
        f.set_mode(mode)
        f(tvm.nd.array(top.pack_nchw(x, 1, 16), dev), tvm.nd.array(top.pack_oihw(w, 16, 16), dev),
          tvm.nd.array(packed_bias, dev), out)
        np.testing.assert_array_equal(top.unpack_nchw(out.numpy()), ref)
    assert f["conv"].last_stats["insn_count"]["ALU"] >= 5  # copy, + bias, + half, >>, max, min


def test_missing_dependency_tokens_give_wrong_results():
    """Without its tokens the load module runs ahead and overwrites tiles the GEMMs still need:
    the simulators honour the queues, so the dependency insertion is what makes results right."""
    from kiln.vta import isa
    from kiln.vta.module import VTAFunction
    env = vta.get_env()
    s, args = _gemm_schedule(env)
    f = vta.build(s, args, env.target, name="g")["g"]
    insns = isa.decode(f.insns, env)
    assert any(i["pop_next"] for i in insns if i.opcode == isa.LOAD)  # loads wait for GEMMs (WAR)
    for i in insns:
        for flag in ("pop_prev", "pop_next", "push_prev", "push_next"):
            i[flag] = 0
    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (1, 4, 1, 16)).astype("int8")
    b = rng.integers(-128, 128, (4, 4, 16, 16)).astype("int8")
    for mode in ("functional", "cycle"):
        g = VTAFunction("g", f.hw, isa.encode(insns, env), f.uops, f.args, mode)
        c = np.zeros((1, 4, 1, 16), np.int8)
        g(a, b, c)
        assert not np.array_equal(c, _gemm_ref(a, b, 3)), mode
        f.mode = mode
        f(a, b, c)
        np.testing.assert_array_equal(c, _gemm_ref(a, b, 3))


def test_module_file_with_bad_configuration_refused(tmp_path):
    import json
    from kiln.errors import FileFormatError
    env = vta.get_env()
    s, args = _gemm_schedule(env)
    path = tmp_path / "gemm.vta"
    vta.build(s, args, env.target, name="g").save(str(path))
    data = path.read_bytes()
    n = int.from_bytes(data[8:16], "little")
    header = json.loads(data[16:16 + n])
    header["hw"]["LOG_ACC_BUFF_SIZE"] = 40  # would size a 1 TiB accumulator SRAM
    text = json.dumps(header).encode()
    path.write_bytes(data[:8] + len(text).to_bytes(8, "little") + text + data[16 + n:])
    with pytest.raises(FileFormatError, match="configuration is invalid"):
        tvm.runtime.load_module(str(path))


@pytest.mark.parametrize("vthreads", [1, 2])
def test_dense_bit_exact(vthreads):
    env = vta.get_env()
    m, k, n, shift = 4, 128, 64, 9
    tens = top.dense(env, m, k, n, shift)
    s, args = top.schedule_dense(env, tens, tile_n=4, tile_k=2, vthreads=vthreads)
    f = vta.build(s, args, env.target, name="dense")
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    ref = np.clip((x.astype(np.int64) @ w.T.astype(np.int64)).astype(np.int32) >> shift, -128, 127).astype(np.int8)
    xp = x.reshape(m, k // 16, 1, 16)  # BATCH=1: (M, K/16, 1, 16)
    wp = w.reshape(n // 16, 16, k // 16, 16).transpose(0, 2, 1, 3).copy()
    out = np.zeros((m, n // 16, 1, 16), np.int8)
    for mode in ("functional", "cycle"):
        f.set_mode(mode)
        f(xp, wp, out)
        np.testing.assert_array_equal(out.reshape(m, n), ref)
