"""Host-driven sessions with the CRT's RPC server (src/crt): a host-emulated board (a process over
pipes) and the emulated Cortex-M3 (qemu, UART over a TCP socket on 127.0.0.1). Tensors, calls,
the graph executor with board tensors vs onnxruntime; a killed board and a lossy transport."""

import time

import numpy as np
import pytest
from kws_model import kws_cnn, run_ort

import kiln as tvm
from kiln import micro, relay, te
from kiln.micro.session import MicroSessionError, Unframer, encode_frame
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu


def _fma_module(n=100):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + 1.0, name="C")
    return tvm.build(te.create_schedule(C.op), [A, B, C], target="c", name="fma1")


def _project(template, module, tmp_path):
    if template != "host":
        why = missing_arm_gcc() or missing_qemu()
        if why:
            pytest.skip(why)
    p = micro.project.generate_project(micro.get_microtvm_template_projects(template), module,
                                       str(tmp_path / template), {})
    p.build()
    return p


def test_frames_round_trip_and_corruption_is_dropped():
    payload = bytes(range(256)) + b"\x7e\x7d\x7e"
    frame = encode_frame(9, payload)
    assert frame.count(b"\x7e") == 1  # the start byte only: the rest is escaped
    assert Unframer().feed(frame) == [(9, payload)]
    bad = bytearray(frame)
    bad[10] ^= 0x01
    u = Unframer()
    assert u.feed(bytes(bad)) == []
    assert u.feed(frame[:7]) == [] and u.feed(frame[7:]) == [(9, payload)]  # split across reads


@pytest.mark.parametrize("template", ["host", "qemu-mps2-an385"])
def test_tensors_and_calls_on_the_board(template, tmp_path):
    project = _project(template, _fma_module(), tmp_path)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(100).astype("float32") for _ in range(2))
    with micro.Session(transport_context_manager=project.transport()) as sess:
        da, db, dc = sess.array(a), sess.array(b), sess.empty((100,), "float32")
        lib = sess.get_system_lib()
        lib["fma1"](da, db, dc)
        np.testing.assert_allclose(dc.numpy(), a * b + 1, rtol=1e-6)
        t = lib.time_evaluator("fma1", sess.device, number=3)(da, db, dc)
        assert t.mean > 0
        with pytest.raises(MicroSessionError, match="no such function"):
            lib["nope"]


@pytest.mark.parametrize("template", ["host", "qemu-mps2-an385"])
def test_kws_graph_executor_with_board_tensors_matches_onnxruntime(template, tmp_path):
    model, inputs = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    factory = relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m3", params=params)
    project = _project(template, factory, tmp_path)
    with micro.Session(transport_context_manager=project.transport()) as sess:
        m = micro.create_local_graph_executor(factory.get_graph_json(), sess.get_system_lib(), sess.device)
        m.set_input(**factory.get_params())
        m.set_input("input", inputs["input"])
        ticks = m.run()
        got = m.get_output(0).numpy()
    np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=1e-5, atol=1e-6)
    assert ticks > 0


def test_a_killed_board_is_a_clear_error_within_the_timeout(tmp_path):
    project = _project("host", _fma_module(), tmp_path)
    with micro.Session(transport_context_manager=project.transport(), timeout=0.5, retries=2) as sess:
        a = sess.empty((100,), "float32")
        sess.transport.kill()
        start = time.monotonic()
        with pytest.raises(MicroSessionError, match="stopped answering"):
            a.numpy()
        assert time.monotonic() - start < 0.5 * 3 + 2.0


class _Lossy:
    """Wraps a transport: drops every 3rd frame sent and corrupts one byte of every 4th."""

    def __init__(self, inner):
        self.inner, self.count = inner, 0

    def __enter__(self):
        self.t = self.inner.__enter__()
        return self

    def write(self, data):
        self.count += 1
        if self.count % 3 == 0:
            return
        if self.count % 4 == 0:
            data = bytearray(data)
            data[len(data) // 2] ^= 0x10
            data = bytes(data)
        self.t.write(data)

    def read(self, timeout):
        return self.t.read(timeout)

    def kill(self):
        self.t.kill()

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)


def test_dropped_and_corrupted_frames_are_retransmitted(tmp_path):
    project = _project("host", _fma_module(), tmp_path)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(100).astype("float32") for _ in range(2))
    with micro.Session(transport_context_manager=_Lossy(project.transport()), timeout=0.3, retries=5) as sess:
        da, db, dc = sess.array(a), sess.array(b), sess.empty((100,), "float32")
        sess.get_system_lib()["fma1"](da, db, dc)
        np.testing.assert_allclose(dc.numpy(), a * b + 1, rtol=1e-6)
        assert sess.retransmissions > 0


@pytest.mark.parametrize("template", ["host", "qemu-mps2-an385"])
def test_kws_aot_executor_driven_from_the_host_matches_onnxruntime(template, tmp_path):
    from kiln.relay.backend import Executor

    model, inputs = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="c -mcpu=cortex-m3",
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}), params=params)
    if template != "host" and (missing_arm_gcc() or missing_qemu()):
        pytest.skip(missing_arm_gcc() or missing_qemu())
    project = micro.project.generate_project(micro.get_microtvm_template_projects(template), lib,
                                             str(tmp_path / template), {"host_driven": True})
    project.build()
    with micro.Session(transport_context_manager=project.transport()) as sess:
        m = micro.create_local_aot_executor(sess, lib)
        for seed in (0, 1):
            x = inputs["input"] if seed == 0 else np.random.default_rng(seed).standard_normal((1, 1, 20, 10)).astype("float32")
            m.set_input("input", x)
            assert m.run() > 0
            np.testing.assert_allclose(m.get_output(0).numpy(), run_ort(model, {"input": x})[0], rtol=1e-5, atol=1e-6)


def test_a_killed_qemu_board_is_a_clear_error(tmp_path):
    project = _project("qemu-mps2-an385", _fma_module(), tmp_path)
    with micro.Session(transport_context_manager=project.transport(), timeout=1.0, retries=1) as sess:
        a = sess.array(np.ones(100, "float32"))
        sess.transport.kill()
        start = time.monotonic()
        with pytest.raises(MicroSessionError, match="stopped answering"):
            a.numpy()
        assert time.monotonic() - start < 1.0 * 2 + 2.0


def test_a_board_that_hangs_times_out(tmp_path):
    """A board that stays connected but never answers (stopped with SIGSTOP): timeout, retries, error."""
    import os
    import signal

    project = _project("host", _fma_module(), tmp_path)
    with micro.Session(transport_context_manager=project.transport(), timeout=0.3, retries=2) as sess:
        os.kill(sess.transport.proc.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.raises(MicroSessionError, match="after 3 tries"):
                sess.empty((4,), "float32")
            assert 0.3 * 3 - 0.05 <= time.monotonic() - start < 0.3 * 3 + 2.0
        finally:
            os.kill(sess.transport.proc.pid, signal.SIGCONT)
