"""Streamed values and error codes (protocol version 2, docs/rpc-protocol.md): values larger than
a frame's inline budget go in OP_DATA frames after it, both ways, and every error reply and
refusal carries a code. tests/integration/test_large_payloads.py moves 4x the frame limit."""

from __future__ import annotations

import os
import socket
import threading

import numpy as np
import pytest

import kiln as tvm
from kiln import relay, rpc
from kiln.contrib import graph_executor
from kiln.runtime.params import save_params
from kiln.rpc import protocol as P

import rpc_services as svc

BIG = P.INLINE_BUDGET + 12345  # one value past the budget: streamed in two data frames


def _pair():
    a, b = socket.socketpair()
    # The receiver refuses any frame larger than a chunk plus headers: streaming must keep them so.
    return P.Channel(a), P.Channel(b, max_frame=P.CHUNK + 4096)


def test_large_values_are_streamed_in_frames_under_a_chunk():
    tx, rx = _pair()
    blob = os.urandom(BIG)
    arr = np.arange(5 * 1024 * 1024, dtype="float32").reshape(5, -1)  # 20 MiB
    value = [b"small", blob, {"t": P.Tensor("float32", arr.shape, P.Device(1, 0), memoryview(arr).cast("B"))},
             memoryview(blob)[:100]]
    sender = threading.Thread(target=tx.send, args=(P.OP_CALL, value))
    sender.start()
    op, got = rx.recv_message()
    sender.join()
    assert op == P.OP_CALL and bytes(got[0]) == b"small" and bytes(got[1]) == blob
    t = got[2]["t"]
    assert t.dtype == "float32" and t.shape == arr.shape
    np.testing.assert_array_equal(np.frombuffer(t.data, "float32").reshape(arr.shape), arr)
    assert bytes(got[3]) == blob[:100]
    assert not rx.pending()  # every data frame was taken, nothing more


def test_announced_stream_is_received_in_place():
    tx, rx = _pair()
    blob = os.urandom(3 * P.CHUNK + 7)
    sender = threading.Thread(target=tx.send, args=(P.OP_RETURN, blob))
    sender.start()
    op, value, streams = rx.recv_request()
    assert op == P.OP_RETURN and type(value) is P.Stream and streams == [value] and value.nbytes == len(blob)
    dest = bytearray(len(blob))
    pieces = []
    rx.recv_stream(value.nbytes, write=lambda off, view: (pieces.append((off, len(view))),
                                                         dest.__setitem__(slice(off, off + len(view)), view)))
    sender.join()
    assert bytes(dest) == blob and [n for _, n in pieces] == [P.CHUNK] * 3 + [7]


@pytest.mark.parametrize("data, problem", [
    (b"\x15\x00\x00\x00\x12" + b"x" * 20, "expected an OP_DATA frame of at most 10 bytes"),   # too long
    (b"\x03\x00\x00\x00\x00\x00\x00", "got opcode 0"),                                       # not data
    (b"\x01\x00\x00\x00\x12", "got opcode 18 with 0 bytes"),                                 # empty piece
])
def test_malformed_data_frames_are_refused(data, problem):
    tx, rx = _pair()
    # A frame announcing 10 streamed bytes, then the bad frame.
    body = b"\x00\x0d" + (10).to_bytes(8, "little")
    tx.sock.sendall(len(body).to_bytes(4, "little") + body + data)
    with pytest.raises(P.ProtocolError, match=problem):
        rx.recv_message()


def test_stray_data_frame_is_refused():
    tx, rx = _pair()
    tx.sock.sendall(b"\x04\x00\x00\x00\x12abc")
    with pytest.raises(P.ProtocolError, match="no streamed value announced"):
        rx.recv_request()


@pytest.fixture
def remote(rpc_server):
    sess = rpc.connect(svc.HOST, rpc_server.port)  # queued behind the previous test's session
    yield sess
    sess.close()


def test_large_bytes_cross_the_server_both_ways(remote):
    blob = os.urandom(BIG)
    assert remote.get_function("rpc.echo")(blob) == blob  # streamed to the worker and back


def _worker_hwm(sess) -> int:
    with open(f"/proc/{sess.get_function('rpc.getpid')()}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


ROWS, COLS = 5 * P.CHUNK // (4 * 512) + 3, 512  # w: 5 chunks and a bit


@pytest.fixture(scope="module")
def summing_model():
    """y = sum(w, axis=0) + x with w a graph input: its parameter blob is 5 chunks."""
    x = relay.var("x", shape=(COLS,), dtype="float32")
    w = relay.var("w", shape=(ROWS, COLS), dtype="float32")
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(relay.Function([x, w], relay.add(relay.sum(w, axis=0), x))),
                          target="llvm")
    i = np.arange(ROWS)[:, None]
    weight = ((i * 7 + np.arange(COLS)[None, :] * 3) % 5).astype("float32")  # exact sums
    return lib, weight


def test_load_params_streams_each_array_into_the_executor(remote, summing_model, tmp_path):
    lib, weight = summing_model
    lib.get_lib().export_library(str(tmp_path / "mod.so"))
    remote.upload(str(tmp_path / "mod.so"))
    m = graph_executor.create(lib.get_graph_json(), remote.load_module("mod.so"), remote.cpu())
    blob = save_params({"w": weight, "unused": np.ones(3, "float32")})  # not an input: skipped
    before = _worker_hwm(remote)
    m.load_params(blob)
    grown = _worker_hwm(remote) - before
    x = np.linspace(-1, 1, COLS).astype("float32")
    m.set_input("x", x)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), weight.sum(axis=0) + x)
    # The array landed in the executor's input: its pages once, plus about a chunk (a copy of
    # it next to the input would be twice its size).
    assert grown <= weight.nbytes + 2 * P.CHUNK, (grown, weight.nbytes)
    # A large set_input goes the same way, and a large argument to any other function too.
    m.set_input("w", np.zeros_like(weight))
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), x)
    w_remote = tvm.nd.array(weight, remote.cpu())  # EMPTY + chunked COPY_IN
    m.set_input("w", w_remote)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), weight.sum(axis=0) + x)


def test_remote_errors_carry_codes(remote, kernel_files):
    with pytest.raises(P.RemoteError) as err:
        remote.load_module("missing.so")
    assert err.value.code == P.E_REMOTE
    with pytest.raises(P.RemoteError, match="unknown opcode 99") as err:
        remote._request(99, [])
    assert err.value.code == P.E_UNSUPPORTED
    remote.upload(str(kernel_files / "kernels.so"))
    crash = remote.load_module("kernels.so")["crash"]
    with pytest.raises(P.RemoteError, match="SIGSEGV") as err:
        crash(tvm.nd.empty((4,), "float32", remote.cpu()))
    assert err.value.code == P.E_WORKER_DIED


def test_session_timeout_has_its_code(rpc_server, kernel_files):
    sess = rpc.connect(svc.HOST, rpc_server.port, session_timeout=1.0)
    try:
        sess.upload(str(kernel_files / "kernels.so"))
        with pytest.raises(P.RemoteError, match="session_timeout") as err:
            sess.load_module("kernels.so")["spin"](tvm.nd.empty((4,), "float32", sess.cpu()))
        assert err.value.code == P.E_TIMEOUT
    finally:
        sess.close()


def test_refusals_carry_codes(rpc_server):
    with pytest.raises(P.CodedError, match="lease") as err:
        rpc.connect(svc.HOST, rpc_server.port, lease_token="not-granted")
    assert err.value.code == P.E_BUSY
    sock = socket.create_connection((svc.HOST, rpc_server.port))
    ch = P.Channel(sock)
    ch.send(0, {"magic": P.MAGIC, "version": 1, "role": P.ROLE_CLIENT, "key": "", "nonce": b"n" * 16})
    _, reply = ch.recv_message()
    ch.close()
    assert reply["status"] == P.HS_ERROR and reply["code"] == P.E_UNSUPPORTED and "version" in reply["message"]
