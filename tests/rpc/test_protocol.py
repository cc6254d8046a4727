"""The wire format: value round trips, malformed input, handshake proofs."""

import socket
import struct

import pytest
from hypothesis import given, settings, strategies as st

from kiln.rpc import protocol as P

scalars = st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | \
    st.floats(allow_nan=False) | st.text(max_size=20) | st.binary(max_size=40)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                      st.dictionaries(st.text(max_size=8) | st.integers(-5, 5), inner, max_size=4), max_leaves=20)


def _plain(v):
    if isinstance(v, memoryview):
        return bytes(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


@given(values)
def test_values_round_trip(v):
    body = b"".join(bytes(p) for p in P.pack_message(P.OP_CALL, v))[4:]
    op, out = P.unpack_message(memoryview(body))
    assert op == P.OP_CALL
    expect = [_plain(x) for x in v] if isinstance(v, tuple) else v
    assert _plain(out) == expect


@given(values, st.data())
@settings(max_examples=200, deadline=None)  # a property, not a timing: loaded CI machines stall
def test_truncated_bodies_raise_protocol_error(v, data):
    body = b"".join(bytes(p) for p in P.pack_message(P.OP_CALL, [v, "tail"]))[4:]
    cut = data.draw(st.integers(1, len(body) - 1))
    with pytest.raises(P.ProtocolError):
        P.unpack_message(memoryview(body[:cut]))


@given(st.binary(max_size=200))
def test_random_bodies_never_crash(raw):
    try:
        P.unpack_message(memoryview(raw))
    except P.ProtocolError:
        pass


def test_huge_counts_fail_before_allocating():
    body = bytes([P.OP_CALL, P.T_LIST]) + struct.pack("<I", 0xFFFFFFFF)
    with pytest.raises(P.ProtocolError, match="list claims"):
        P.unpack_message(memoryview(body))


def test_tensor_and_refs_round_trip():
    t = P.Tensor("float32", (2, 3), P.Device(1, 0), b"\x00" * 24)
    ref = P.Ref(P.T_ARRAY_REF, 7, "int8", (4,), P.Device(2, 1))
    body = b"".join(bytes(p) for p in P.pack_message(0, [t, ref, P.Device(4, 2)]))[4:]
    _, (t2, ref2, dev) = P.unpack_message(memoryview(body))
    assert (t2.dtype, t2.shape, bytes(t2.data)) == ("float32", (2, 3), b"\x00" * 24)
    assert (ref2.id, ref2.shape, ref2.device) == (7, (4,), P.Device(2, 1))
    assert dev == P.Device(4, 2)


@given(st.integers(0, (1 << 64) - 1), st.sampled_from(["float32", "int8", "bfloat16"]),
       st.lists(st.integers(0, 1 << 40), max_size=6), st.data())
@settings(max_examples=100, deadline=None)
def test_array_refs_decode_the_same_the_second_time_and_truncated_ones_fail(obj_id, dtype, shape, data):
    """Array references are remembered by their bytes (a call passes the same arrays every
    time): a repeat decodes to the same values, and a cut one is still an error after its whole
    form was seen."""
    ref = P.Ref(P.T_ARRAY_REF, obj_id, dtype, shape, P.Device(1, 0))
    body = b"".join(bytes(p) for p in P.pack_message(P.OP_CALL, [ref, 5]))[4:]
    for _ in range(2):
        _, (got, five) = P.unpack_message(memoryview(body))
        assert (got.tag, got.id, got.dtype, got.shape, got.device, five) == \
            (P.T_ARRAY_REF, obj_id, dtype, tuple(shape), P.Device(1, 0), 5)
    cut = data.draw(st.integers(1, len(body) - 1))
    with pytest.raises(P.ProtocolError):
        P.unpack_message(memoryview(body[:cut]))


def test_oversized_frame_is_rejected_without_reading_it():
    a, b = socket.socketpair()
    a.sendall(struct.pack("<I", P.MAX_FRAME + 1))
    with pytest.raises(P.ProtocolError, match="exceeds"):
        P.Channel(b).recv()


def test_truncated_frame_reports_connection_lost():
    a, b = socket.socketpair()
    a.sendall(struct.pack("<I", 100) + b"abc")
    a.close()
    with pytest.raises(P.ConnectionLost, match="middle of a frame"):
        P.Channel(b).recv()


def test_large_frames_stream_through_channel():
    a, b = socket.socketpair()
    payload = bytes(range(256)) * 40000  # 10 MB, bigger than the receive buffer
    import threading
    threading.Thread(target=lambda: P.Channel(a).send(P.OP_RETURN, payload)).start()
    op, out = P.Channel(b).recv_message()
    assert op == P.OP_RETURN and bytes(out) == payload


def test_a_polling_reader_gives_the_core_away_between_polls(monkeypatch):
    """While it polls for a reply, a reader yields the core on every empty poll: on a 2-core
    machine the peer that must answer may need that very core (bench/rpc.py measures the
    effect). Once the poll window is over it sleeps in recv, so the frame still arrives."""
    import threading
    yields = []
    monkeypatch.setattr(P, "_yield", lambda: yields.append(1))
    a, b = socket.socketpair()
    reader = P.Channel(b, spin=0.05)
    sender = threading.Timer(0.2, lambda: P.Channel(a).send(P.OP_RETURN, [1, "x"]))
    sender.start()
    op, value = reader.recv_message()
    sender.join()
    assert (op, value) == (P.OP_RETURN, [1, "x"])
    assert yields  # how many depends on how much of the 50 ms window this thread ran


def test_hmac_proof_depends_on_token_and_nonces():
    hello = {"nonce": memoryview(b"c" * 16), "role": P.ROLE_CLIENT}
    proof = {"proof": memoryview(P._proof("secret", b"s" * 16, b"c" * 16, P.ROLE_CLIENT))}
    assert P.verify_proof("secret", b"s" * 16, hello, proof)
    assert not P.verify_proof("other", b"s" * 16, hello, proof)
    assert not P.verify_proof("secret", b"t" * 16, hello, proof)
