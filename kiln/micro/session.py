"""Host side of a session with a board running the CRT's RPC server (src/crt/rpc_server.c).

    with micro.Session(transport_context_manager=project.transport()) as sess:
        lib = sess.get_system_lib()
        a = sess.array(np_a); c = sess.empty((n,), "float32")
        lib["add"](a, b, c); c.numpy()

Requests are numbered consecutively (mod 2^32) from a random start, one outstanding at a time;
the board runs only a request numbered after the last it answered (src/crt/rpc_server.c), so a
late duplicate never runs twice. Every request waits ``timeout`` seconds for its reply and is
sent again (same sequence number: the board answers from its cache) up to ``retries`` times; then
the session fails with "the board stopped answering" instead of hanging; a transport that closes
(the board process or qemu died) fails the request at once. A transport's ``read(timeout)``
returns b"" when nothing came and raises EOFError when the board is gone.
"""

from __future__ import annotations

import os
import random
import select
import socket
import struct
import subprocess
import time

import numpy as np

from kiln.errors import KilnError

HELLO, ALLOC, FREE, WRITE, READ, LOOKUP, CALL = range(1, 8)
CHUNK = 768


class MicroSessionError(KilnError):
    pass


def crc16(data: bytes, crc: int = 0xFFFF) -> int:
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def encode_frame(session: int, payload: bytes) -> bytes:
    body = bytes([session, len(payload) & 0xFF, len(payload) >> 8]) + payload
    body += struct.pack("<H", crc16(body))
    out = bytearray(b"\x7e")
    for b in body:
        out += bytes([0x7D, b ^ 0x20]) if b in (0x7D, 0x7E) else bytes([b])
    return bytes(out)


class Unframer:
    """Bytes in, (session, payload) of every frame with a good CRC out."""

    def __init__(self):
        self.buf = None
        self.esc = False

    def feed(self, data: bytes) -> list:
        frames = []
        for b in data:
            if b == 0x7E:
                self.buf, self.esc = bytearray(), False
                continue
            if self.buf is None:
                continue
            if b == 0x7D and not self.esc:
                self.esc = True
                continue
            self.buf.append(b ^ 0x20 if self.esc else b)
            self.esc = False
            if len(self.buf) >= 3:
                n = self.buf[1] | self.buf[2] << 8
                if len(self.buf) == 3 + n + 2:
                    body, crc = bytes(self.buf[:-2]), self.buf[-2] | self.buf[-1] << 8
                    if crc16(body) == crc:
                        frames.append((body[0], body[3:]))
                    self.buf = None
        return frames


class PipeTransport:
    """A board process speaking over its stdin/stdout (the host template)."""

    def __init__(self, argv: list):
        self.argv = argv
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        return self

    def write(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # a dead board shows up as a timeout with a clear message

    def read(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self.proc.stdout], [], [], max(timeout, 0))
        if not ready:
            return b""
        data = os.read(self.proc.stdout.fileno(), 4096)
        if not data:
            raise EOFError("the board process exited")
        return data

    def kill(self) -> None:
        self.proc.kill()

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        return False


class SocketTransport:
    """The board's UART as a TCP stream (qemu's -serial tcp:127.0.0.1:PORT connects to ``listener``)."""

    def __init__(self, listener: socket.socket, launch, timeout: float = 30.0):
        self.listener = listener
        self.launch = launch  # callable starting the board; returns a Popen
        self.timeout = timeout
        self.proc = self.conn = None

    def __enter__(self):
        self.proc = self.launch()
        self.listener.settimeout(self.timeout)
        try:
            self.conn, _ = self.listener.accept()
        except socket.timeout:
            self.proc.kill()
            raise MicroSessionError(f"the board did not connect within {self.timeout:.0f} s") from None
        return self

    def write(self, data: bytes) -> None:
        try:
            self.conn.sendall(data)
        except OSError:
            pass

    def read(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self.conn], [], [], max(timeout, 0))
        if not ready:
            return b""
        try:
            data = self.conn.recv(4096)
        except OSError as err:
            raise EOFError(f"the board's UART connection failed: {err}") from None
        if not data:
            raise EOFError("the board closed its UART connection")
        return data

    def kill(self) -> None:
        self.proc.kill()

    def __exit__(self, *exc):
        for c in (self.conn, self.listener):
            if c is not None:
                c.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        return False


class Session:
    """``with Session(project.transport()) as sess``: tensors and calls on the board.

    ``timeout`` seconds per request, ``retries`` resends; TVM's ``timeout_override`` (seconds, or an
    object with ``session_established_timeout_sec``) replaces ``timeout``; ``session_name`` is a label."""

    def __init__(self, transport_context_manager=None, session_name: str = "micro-rpc", timeout_override=None,
                 timeout: float = 5.0, retries: int = 3):
        if transport_context_manager is None:
            raise MicroSessionError("Session: pass the board's transport, e.g. micro.Session(project.transport())")
        if timeout_override is not None:
            timeout = float(getattr(timeout_override, "session_established_timeout_sec", timeout_override))
        self.cm = transport_context_manager
        self.session_name = session_name
        self.timeout = timeout
        self.retries = retries
        self.transport = None
        self.session_id = random.randint(1, 255)
        self.seq = random.getrandbits(32)
        self.unframer = Unframer()
        self.retransmissions = 0

    def __enter__(self):
        self.transport = self.cm.__enter__()
        try:
            body = self.request(HELLO, b"", reply_size=12)
        except BaseException:
            self.cm.__exit__(None, None, None)
            raise
        self.arena_bytes, self.ticks_hz, self.num_functions = struct.unpack("<III", body[:12])
        return self

    def __exit__(self, *exc):
        return self.cm.__exit__(*exc)

    @property
    def device(self):
        return self

    def request(self, cmd: int, body: bytes, reply_size: int = 0) -> bytes:
        """The body of the board's reply to ``cmd``, at least ``reply_size`` bytes long."""
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        frame = encode_frame(self.session_id, struct.pack("<IB", self.seq, cmd) + body)
        for attempt in range(self.retries + 1):
            if attempt:
                self.retransmissions += 1
            self.transport.write(frame)
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                try:
                    data = self.transport.read(deadline - time.monotonic())
                except EOFError as err:
                    raise MicroSessionError(f"the board stopped answering: {err} (command {cmd})") from None
                for sid, payload in self.unframer.feed(data):
                    if sid != self.session_id or len(payload) < 5:
                        continue
                    seq, status = struct.unpack("<IB", payload[:5])
                    if seq != self.seq:
                        continue  # a late answer to an earlier try
                    if status != 0:
                        raise MicroSessionError(f"the board says: {payload[5:].decode(errors='replace')}")
                    if len(payload) - 5 < reply_size:
                        raise MicroSessionError(
                            f"the board's reply to command {cmd} has {len(payload) - 5} bytes, not {reply_size}: "
                            "the firmware speaks another protocol version; rebuild it with this kiln")
                    return payload[5:]
        raise MicroSessionError(f"the board stopped answering: no reply to command {cmd} within "
                                f"{self.timeout:g} s after {self.retries + 1} tries")

    # -- memory -----------------------------------------------------------------------------
    def empty(self, shape, dtype="float32") -> "MicroNDArray":
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        (handle,) = struct.unpack("<I", self.request(ALLOC, struct.pack("<I", max(nbytes, 1)), 4)[:4])
        return MicroNDArray(self, handle, tuple(int(s) for s in shape), dtype)

    def array(self, value) -> "MicroNDArray":
        value = np.ascontiguousarray(value)
        arr = self.empty(value.shape, value.dtype)
        arr.copyfrom(value)
        return arr

    def get_system_lib(self) -> "MicroModule":
        return MicroModule(self)

    def create_aot_executor(self):
        """The AOT executor of the model the firmware serves (its interface read from the board)."""
        from .graph_executor import create_local_aot_executor
        return create_local_aot_executor(self)


class MicroNDArray:
    def __init__(self, sess: Session, handle: int, shape: tuple, dtype):
        self.sess, self.handle, self.shape, self.dtype = sess, handle, shape, np.dtype(dtype)
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize

    def copyfrom(self, value) -> "MicroNDArray":
        data = np.ascontiguousarray(value, dtype=self.dtype).tobytes()
        if len(data) != self.nbytes:
            raise MicroSessionError(f"copyfrom: {len(data)} bytes into a tensor of {self.nbytes}")
        for off in range(0, len(data), CHUNK):
            self.sess.request(WRITE, struct.pack("<II", self.handle, off) + data[off:off + CHUNK])
        return self

    def numpy(self) -> np.ndarray:
        out = bytearray()
        for off in range(0, self.nbytes, CHUNK):
            n = min(CHUNK, self.nbytes - off)
            out += self.sess.request(READ, struct.pack("<III", self.handle, off, n), n)[:n]
        return np.frombuffer(bytes(out), self.dtype).reshape(self.shape)

    def free(self) -> None:
        self.sess.request(FREE, struct.pack("<I", self.handle))

    def encode(self) -> bytes:
        code = {"f": 2, "i": 0, "u": 1, "b": 1}[self.dtype.kind]
        head = struct.pack("<BIBBBB", 7, self.handle, code, self.dtype.itemsize * 8, len(self.shape), 0)
        return head + b"".join(struct.pack("<q", s) for s in self.shape)


class MicroModule:
    def __init__(self, sess: Session):
        self.sess = sess

    def get_function(self, name: str) -> "MicroFunction":
        (index,) = struct.unpack("<I", self.sess.request(LOOKUP, name.encode(), 4)[:4])
        return MicroFunction(self.sess, name, index)

    __getitem__ = get_function

    def time_evaluator(self, name: str, dev=None, number: int = 1, repeat: int = 1):
        """Board time of ``name`` (its clock, measured around the call on the board)."""
        f = self.get_function(name)

        def run(*args):
            results = []
            for _ in range(repeat):
                total = sum(f.call_ticks(*args) for _ in range(number))
                results.append(total / number / self.sess.ticks_hz)
            return _Timing(results)
        return run


class _Timing:
    def __init__(self, results):
        self.results = results
        self.mean = float(np.mean(results))
        self.median = float(np.median(results))


class MicroFunction:
    def __init__(self, sess: Session, name: str, index: int):
        self.sess, self.name, self.index = sess, name, index
        self.last_ticks = None

    def call_ticks(self, *args) -> int:
        body = struct.pack("<IB", self.index, len(args))
        for a in args:
            if isinstance(a, MicroNDArray):
                body += a.encode()
            elif isinstance(a, float):
                body += struct.pack("<Bd", 2, a)
            else:
                body += struct.pack("<Bq", 0, int(a))
        (ticks,) = struct.unpack("<Q", self.sess.request(CALL, body, 8)[:8])
        self.last_ticks = ticks
        return ticks

    def __call__(self, *args) -> None:
        self.call_ticks(*args)
