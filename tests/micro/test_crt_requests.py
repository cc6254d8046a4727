"""The CRT's request handler (src/crt/rpc_server.c) against hostile and replayed requests, on the
host-emulated board built with AddressSanitizer/UBSan (a memory error kills the board, so "it
still answers" is the check): function indices >= 2^31, WRITE/READ ranges that wrap in 32 bits,
tensor shapes whose byte count wraps, handles that name no block, and late duplicates of
answered requests, which must never run twice."""

import struct

import numpy as np
import pytest

from kiln import micro, te
import kiln as tvm
from kiln.micro.session import ALLOC, CALL, FREE, READ, WRITE, MicroSessionError, encode_frame

SANITIZE = ["-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    n = 100
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + 1.0, name="C")
    mod = tvm.build(te.create_schedule(C.op), [A, B, C], target="c", name="fma1")
    p = micro.project.generate_project(micro.get_microtvm_template_projects("host"), mod,
                                       str(tmp_path_factory.mktemp("crt-asan") / "host"), {"cflags": SANITIZE})
    p.build()
    return p


class _Recorder:
    """Passes a transport through and keeps every frame the host sent, to replay one late."""

    def __init__(self, inner):
        self.inner, self.sent = inner, []

    def __enter__(self):
        self.t = self.inner.__enter__()
        self.proc = self.t.proc
        return self

    def write(self, data):
        self.sent.append(data)
        self.t.write(data)

    def read(self, timeout):
        return self.t.read(timeout)

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)


def _alive(sess):
    """The board still answers, with the data a fresh tensor was given."""
    t = sess.array(np.arange(16, dtype="float32"))
    np.testing.assert_array_equal(t.numpy(), np.arange(16, dtype="float32"))
    t.free()


def test_hostile_requests_are_refused_and_the_board_keeps_serving(project):
    with micro.Session(transport_context_manager=project.transport(), timeout=2.0, retries=0) as sess:
        small = sess.empty((4,), "float32")  # one 64-byte page
        cases = [
            (CALL, struct.pack("<IB", 0x80000000, 0), "no such function"),
            (CALL, struct.pack("<IB", 0xFFFFFFFF, 0), "no such function"),
            (WRITE, struct.pack("<II", small.handle, 0xFFFFFFF0) + bytes(32), "outside the block"),
            (WRITE, struct.pack("<II", small.handle, 60) + bytes(8), "outside the block"),
            (READ, struct.pack("<III", small.handle, 0xFFFFFFF0, 32), "outside the block"),
            (READ, struct.pack("<III", small.handle, 0, 0xFFFFFFFF), "longer than a reply"),
            (READ, struct.pack("<III", small.handle, 32, 64), "outside the block"),
            (READ, struct.pack("<III", 0xFFFFFFFF, 0, 4), "outside the block"),
            (READ, struct.pack("<III", small.handle + 64, 0, 4), "outside the block"),  # inside the arena, no block
            (FREE, struct.pack("<I", small.handle + 1), "not an allocated block"),
            (ALLOC, struct.pack("<I", 0xFFFFFFFF), "out of device memory"),
        ]
        index = sess.get_system_lib()["fma1"].index
        # float32 tensors whose byte count wraps to 0 in 64 bits, and one larger than its block
        for shape in ([1 << 62], [1 << 31, 1 << 31], [-1]):
            arg = struct.pack("<BIBBBB", 7, small.handle, 2, 32, len(shape), 0) + b"".join(
                struct.pack("<q", s) for s in shape)
            cases.append((CALL, struct.pack("<IB", index, 3) + arg * 3, "tensor shape too large"))
        arg = struct.pack("<BIBBBBq", 7, small.handle, 2, 32, 1, 0, 100)
        cases.append((CALL, struct.pack("<IB", index, 3) + arg * 3, "larger than its block"))
        for cmd, body, message in cases:
            with pytest.raises(MicroSessionError, match=message):
                sess.request(cmd, body)
            _alive(sess)
        assert sess.transport.proc.poll() is None


def test_a_late_duplicate_never_runs_twice(project):
    """Replayed frames of an answered WRITE and FREE arrive after later requests: the board drops
    them. (It compared only the last sequence number: the WRITE restored old data and the FREE freed
    the pages of the tensor allocated after it.)"""
    rec = _Recorder(project.transport())
    with micro.Session(transport_context_manager=rec, timeout=2.0, retries=0) as sess:
        t = sess.empty((4,), "float32")
        t.copyfrom(np.full(4, 1.0, "float32"))
        old_write = rec.sent[-1]
        t.copyfrom(np.full(4, 2.0, "float32"))
        rec.t.write(old_write)  # the stale WRITE of 1.0, then a retransmission of it
        rec.t.write(old_write)
        np.testing.assert_array_equal(t.numpy(), np.full(4, 2.0, "float32"))

        a = sess.empty((4,), "float32")
        a.free()
        old_free = rec.sent[-1]
        b = sess.array(np.full(4, 3.0, "float32"))
        assert b.handle == a.handle  # first fit: b took a's pages
        rec.t.write(old_free)
        c = sess.array(np.full(4, 4.0, "float32"))
        assert c.handle != b.handle  # b's pages are still b's
        np.testing.assert_array_equal(b.numpy(), np.full(4, 3.0, "float32"))

        # A stale frame of an older session is dropped too; a new session's HELLO is honoured.
        rec.t.write(encode_frame((sess.session_id % 255) + 1, struct.pack("<IB", sess.seq + 1, WRITE)
                                 + struct.pack("<II", b.handle, 0) + bytes(16)))
        np.testing.assert_array_equal(b.numpy(), np.full(4, 3.0, "float32"))
