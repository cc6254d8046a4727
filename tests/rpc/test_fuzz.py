"""Random, truncated and oversized frames against server, tracker and proxy; each must keep
serving correct sessions afterwards."""

import random
import socket
import struct

import pytest

from kiln import rpc
from kiln.rpc import protocol as P

import rpc_services as svc


def _valid_hello() -> bytes:
    hello = {"magic": P.MAGIC, "version": P.VERSION, "role": P.ROLE_CLIENT, "key": "", "nonce": b"n" * 16}
    return b"".join(bytes(p) for p in P.pack_message(0, hello))


def _bad_frames(rng: random.Random):
    good = _valid_hello()
    kinds = [
        lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))),              # noise
        lambda: good[:rng.randint(0, len(good) - 1)],                                       # truncated
        lambda: struct.pack("<I", rng.choice([P.MAX_FRAME + 1, 0xFFFFFFFF, 1 << 30])),      # oversized
        lambda: struct.pack("<I", 2) + bytes([0, rng.randint(13, 255)]),                    # bad tag
        lambda: good[:4] + bytes(b ^ (1 << rng.randint(0, 7)) if i == rng.randint(0, len(good) - 5) else b
                                 for i, b in enumerate(good[4:])),                          # bit flip
        lambda: struct.pack("<I", 0),                                                       # empty body
        lambda: struct.pack("<IB", 6, 0) + bytes([P.T_LIST]) + struct.pack("<I", 1 << 31),  # huge count
    ]
    while True:
        yield rng.choice(kinds)()


def _blast(port: int, frames, count: int) -> None:
    for _ in range(count):
        s = socket.create_connection((svc.HOST, port), timeout=2)
        try:
            s.sendall(next(frames))
            s.shutdown(socket.SHUT_WR)  # a truncated frame then EOF
            s.settimeout(2)
            while s.recv(4096):
                pass
        except OSError:
            pass
        finally:
            s.close()


@pytest.fixture(scope="module")
def fuzz_fleet():
    tracker = svc.tracker("--auth-token", "tok")
    proxy = svc.proxy()
    server = svc.server("--tracker", f"{svc.HOST}:{tracker.port}", "--key", "fz", "--auth-token", "tok")
    behind = svc.Service("rpc_server", "--host", svc.HOST, "--port", str(proxy.port), "--through-proxy",
                         "--key", "pz", wait_for=None)
    behind.wait_log("connected to proxy")
    yield tracker, proxy, server
    for s in (behind, server, proxy, tracker):
        s.stop()


def test_fuzzed_frames_are_rejected_and_services_keep_serving(fuzz_fleet):
    tracker, proxy, server = fuzz_fleet
    frames = _bad_frames(random.Random(1234))
    for port in (server.port, tracker.port, proxy.port):
        _blast(port, frames, 350)  # 1050 frames in all
    # Each service still serves a correct session.
    t = rpc.connect_tracker(svc.HOST, tracker.port, auth_token="tok")
    sess = svc.wait_until(lambda: _request(t, "fz"), what="tracker grant after fuzz")
    assert sess.get_function("rpc.echo")([1, "x"]) == [1, "x"]
    sess.close()
    via_proxy = rpc.connect(svc.HOST, proxy.port, key="pz")
    assert via_proxy.get_function("rpc.echo")(b"ok") == b"ok"
    via_proxy.close()
    assert "Traceback" not in server.text() + tracker.text() + proxy.text()


def _request(t, key):
    try:
        return t.request(key, timeout=2, max_retry=1)
    except rpc.session.RPCError:
        return None


def test_fuzzed_requests_inside_a_session_end_with_an_error(fuzz_fleet):
    _, _, server = fuzz_fleet
    sess = svc.wait_until(lambda: _connect(server.port), what="server free")
    # A frame whose value is garbage: the worker answers with an error and closes the session.
    sess._ch.send_parts([struct.pack("<IBB", 2, P.OP_CALL, 200)])
    with pytest.raises(P.RemoteError, match="unknown value tag"):
        sess._ch.request(P.OP_LISTDIR, [])
    sess._ch.close()
    svc.wait_until(lambda: _connect(server.port), what="server free after bad session").close()


def _connect(port):
    try:
        return rpc.connect(svc.HOST, port, auth_token="tok")
    except rpc.session.RPCError:
        return None
