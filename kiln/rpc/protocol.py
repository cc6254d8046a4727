"""The RPC wire format: frames, the value codec and the handshake. See docs/rpc-protocol.md.

Everything here is plain Python (struct, socket, hmac): the server imports this module on a
device that may have no numpy, and a C implementation follows the same rules.

A frame is ``u32 length`` (little-endian) followed by ``length`` bytes of body. A body is
``u8 opcode`` followed by one encoded value. Values are tagged (``u8 tag`` then the payload).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time

from ..errors import RPCError

MAGIC = b"KILN"
# Version 2 added streamed values (T_STREAM, T_STREAM_TENSOR, OP_DATA), error codes in error
# replies and refusals, and the queued handshake status.
VERSION = 2
# A frame may carry at most this many body bytes. Bulk data (uploads, array copies) is sent
# in CHUNK-sized pieces, so a peer never has to hold more than one frame in memory.
MAX_FRAME = 64 * 1024 * 1024 + 4096
CHUNK = 16 * 1024 * 1024
# Bytes and tensor values are carried inside a frame while the frame's payload stays under
# this; larger ones are streamed after it in OP_DATA frames of at most CHUNK bytes, so no
# value size is limited by MAX_FRAME and neither side ever holds more than one chunk of them
# outside their final place.
INLINE_BUDGET = CHUNK
# How long a reader polls a socket before it sleeps in recv(). Waking a sleeping process on
# another core costs 40-60 us on a loaded VM; polling briefly keeps a small call's round
# trip near 30 us. The poll is bounded, so an idle side goes to sleep after this long.
SPIN_SECONDS = 300e-6
# Frames before authentication (hello, auth) are tiny: a stranger cannot make us allocate.
MAX_HANDSHAKE_FRAME = 4096

# Roles a peer announces in its hello.
ROLE_CLIENT = 1          # a session client talking to a server (directly or via a proxy)
ROLE_SERVER = 2          # a server talking to a tracker or to a proxy (--through-proxy)
ROLE_TRACKER_CLIENT = 3  # a client or the query tool talking to a tracker
ROLE_PROXY = 4           # a proxy registering with a tracker

# Handshake status codes (first byte of the welcome / auth result).
HS_OK = 0
HS_AUTH = 1
HS_ERROR = 2
HS_QUEUED = 3  # the server is busy: wait, the final status follows when this client's turn comes

# Error codes: the "code" of an ERROR reply and of a handshake refusal, so a program can tell
# failures apart without reading the English message.
E_REMOTE = 1        # the remote function or kernel raised (the user's code failed)
E_BAD_REQUEST = 2   # malformed request or arguments that do not follow docs/rpc-protocol.md
E_UNSUPPORTED = 3   # unknown opcode, protocol version or feature this server does not offer
E_BUSY = 4          # the server is serving or reserved for another client
E_TIMEOUT = 5       # the session outlived its session_timeout
E_WORKER_DIED = 6   # the session's worker process died (signal) or exited abnormally
E_SHUTDOWN = 7      # the server is shutting down, or ended the session because the client left
E_AUTH = 8          # authentication failed
ERROR_NAMES = {E_REMOTE: "remote exception", E_BAD_REQUEST: "bad request", E_UNSUPPORTED: "unsupported",
               E_BUSY: "session busy", E_TIMEOUT: "timeout", E_WORKER_DIED: "worker died",
               E_SHUTDOWN: "shutdown", E_AUTH: "authentication failed"}

# Session opcodes (client -> worker). Replies use OP_RETURN or OP_ERROR.
OP_RETURN = 0
OP_ERROR = 1
OP_CALL = 2            # [func_id, args...]                       -> value
OP_GET_FUNCTION = 3    # [module_id or 0 (global), name]          -> FuncRef or None
OP_LOAD_MODULE = 4     # [name]                                   -> ModuleRef
OP_UPLOAD = 5          # [name, offset, bytes, final]             -> None
OP_DOWNLOAD = 6        # [name, offset, max_bytes]                -> bytes
OP_REMOVE = 7          # [name]                                   -> None
OP_LISTDIR = 8         # []                                       -> [names]
OP_EMPTY = 9           # [shape, dtype, device]                   -> ArrayRef
OP_COPY_IN = 10        # [array_id, byte_offset, bytes]           -> None
OP_COPY_OUT = 11       # [array_id, byte_offset, nbytes]          -> bytes
OP_FREE = 12           # [object ids...]                          -> None
OP_TIME_EVAL = 13      # [module_id, name, device, number, repeat, min_repeat_ms, args...] -> [costs]
OP_DEVICE_EXISTS = 14  # [device]                                 -> int
OP_SHUTDOWN = 15       # []                                       -> None (worker exits)
OP_SYNC = 16           # [device]                                 -> None
OP_MODULE_INFO = 17    # [module_id]                              -> {entry_name}
OP_DATA = 18           # raw bytes of a streamed value (no tag), after the frame announcing it

# Value tags.
T_NONE, T_INT, T_FLOAT, T_STR, T_BYTES, T_LIST, T_DICT, T_BOOL = 0, 1, 2, 3, 4, 5, 6, 7
T_TENSOR, T_DEVICE, T_ARRAY_REF, T_MODULE_REF, T_FUNC_REF = 8, 9, 10, 11, 12
T_STREAM, T_STREAM_TENSOR = 13, 14  # bytes / tensor whose data follows the frame in OP_DATA frames

_yield = getattr(os, "sched_yield", lambda: None)

_U8 = struct.Struct("<B")
_OPCODES = [bytes((op,)) for op in range(256)]
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_DEV = struct.Struct("<ii")
_REF = struct.Struct("<BQ")
_U64 = struct.Struct("<Q")
_MAX_DEPTH = 32


class ProtocolError(RPCError):
    """The peer sent bytes that do not follow docs/rpc-protocol.md."""


class ConnectionLost(RPCError):
    """The peer closed the connection or it broke mid-frame."""


class CodedError(RPCError):
    """An error the peer reported with an error code (``E_*``; 0 when the peer sent none)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = int(code) if isinstance(code, int) and not isinstance(code, bool) else 0


# ---------------------------------------------------------------------------------------------
# Values that have no Python builtin equivalent. The session layer maps them to user objects.

class Device:
    """A device named on the wire: (device_type, device_id), DLPack numbering."""
    __slots__ = ("device_type", "device_id")

    def __init__(self, device_type: int, device_id: int = 0):
        self.device_type, self.device_id = int(device_type), int(device_id)

    def __eq__(self, other):
        return isinstance(other, Device) and (self.device_type, self.device_id) == (other.device_type, other.device_id)

    def __hash__(self):
        return hash((self.device_type, self.device_id))

    def __repr__(self):
        return f"Device({self.device_type}, {self.device_id})"


class Tensor:
    """Tensor data sent by value: dtype string, shape, device and raw row-major bytes."""
    __slots__ = ("dtype", "shape", "device", "data")

    def __init__(self, dtype: str, shape, device: Device, data):
        self.dtype, self.shape, self.device, self.data = dtype, tuple(int(s) for s in shape), device, data


class Stream:
    """A streamed value's place in a decoded message: ``nbytes`` bytes that follow the frame in
    OP_DATA frames (Channel.recv_stream receives them)."""
    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int):
        self.nbytes = nbytes

    def __repr__(self):
        return f"Stream({self.nbytes} bytes)"


class Ref:
    """A handle to an object living in the remote worker (array, module or function).

    Arrays carry their shape/dtype/device so the client can answer ``.shape`` without a round trip.
    """
    __slots__ = ("tag", "id", "dtype", "shape", "device")

    def __init__(self, tag: int, obj_id: int, dtype: str = "", shape=(), device: Device | None = None):
        self.tag, self.id, self.dtype, self.shape, self.device = tag, obj_id, dtype, tuple(shape), device


class Encoded:
    """A value already in wire form (e.g. the reference to a remote array, sent on every call)."""
    __slots__ = ("data",)

    def __init__(self, value):
        parts: list = []
        _encode(value, parts, None, 0)
        self.data = b"".join(bytes(p) for p in parts)


# ---------------------------------------------------------------------------------------------
# Encoding. encode() returns a list of buffers so large bytes are sent without being copied.

def encode(value, parts: list | None = None, hook=None) -> list:
    """Encode ``value`` into a list of bytes-like parts. ``hook(value)`` may return a replacement
    value (Tensor, Ref, Device) for objects the codec does not know, or raise TypeError."""
    out = [] if parts is None else parts
    _encode(value, out, hook, 0)
    return out


class _Streams:
    """What an encoding may stream: the inline bytes left and the views to stream, in order."""
    __slots__ = ("left", "views")

    def __init__(self, budget: int):
        self.left, self.views = budget, []

    def inline(self, nbytes: int) -> bool:
        if nbytes > self.left:
            return False
        self.left -= nbytes
        return True


def _encode(v, out: list, hook, depth: int, st: _Streams | None = None) -> None:
    if depth > _MAX_DEPTH:
        raise ProtocolError(f"value nested deeper than {_MAX_DEPTH} levels; flatten it")
    t = type(v)
    # Fast paths for what every call carries: small ints and pre-encoded references.
    if t is Encoded:
        out.append(v.data)
        return
    if t is int and -(1 << 63) <= v < (1 << 63):
        out.append(b"\x01" + _I64.pack(v))
        return
    if v is None:
        out.append(b"\x00")
    elif v is True or v is False:
        out.append(bytes((T_BOOL, 1 if v else 0)))
    elif isinstance(v, int):
        if not -(1 << 63) <= v < (1 << 63):
            raise ProtocolError(f"integer {v} does not fit in 64 bits")
        out.append(b"\x01" + _I64.pack(v))
    elif isinstance(v, float):
        out.append(b"\x02" + _F64.pack(v))
    elif isinstance(v, str):
        b = v.encode("utf-8")
        out.append(b"\x03" + _U32.pack(len(b)) + b)
    elif isinstance(v, (bytes, bytearray, memoryview)):
        m = memoryview(v).cast("B")
        if st is not None and not st.inline(m.nbytes):
            out.append(b"\x0d" + _U64.pack(m.nbytes))
            st.views.append(m)
            return
        out.append(b"\x04" + _U32.pack(m.nbytes))
        out.append(m)
    elif isinstance(v, (list, tuple)):
        out.append(b"\x05" + _U32.pack(len(v)))
        for item in v:
            _encode(item, out, hook, depth + 1, st)
    elif isinstance(v, dict):
        out.append(b"\x06" + _U32.pack(len(v)))
        for k, item in v.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise ProtocolError(f"dict key {k!r} must be a str or an int to cross RPC")
            _encode(k, out, hook, depth + 1, st)
            _encode(item, out, hook, depth + 1, st)
    elif isinstance(v, Device):
        out.append(b"\x09" + _DEV.pack(v.device_type, v.device_id))
    elif isinstance(v, Tensor):
        data = memoryview(v.data).cast("B")
        if st is not None and not st.inline(data.nbytes):
            out.append(b"\x0e" + _array_meta(v.dtype, v.shape, v.device) + _U64.pack(data.nbytes))
            st.views.append(data)
            return
        out.append(_tensor_header(v.dtype, v.shape, v.device) + _U32.pack(data.nbytes))
        out.append(data)
    elif isinstance(v, Ref):
        out.append(_REF.pack(v.tag, v.id))
        if v.tag == T_ARRAY_REF:
            out.append(_array_meta(v.dtype, v.shape, v.device))
    else:
        if hook is None:
            raise TypeError(f"cannot send a {type(v).__name__} over RPC; send ints, floats, str, "
                            "bytes, NDArrays, devices, modules, functions, or lists/dicts of them")
        _encode(hook(v), out, None, depth + 1, st)


def _array_meta(dtype: str, shape, device: Device) -> bytes:
    d = dtype.encode()
    return (_U32.pack(len(d)) + d + _U32.pack(len(shape)) + b"".join(_I64.pack(s) for s in shape)
            + _DEV.pack(device.device_type, device.device_id))


def _tensor_header(dtype, shape, device) -> bytes:
    return b"\x08" + _array_meta(dtype, shape, device)


def pack_message(opcode: int, value, hook=None) -> list:
    """The buffers of one frame: length, opcode and encoded value (nothing streamed)."""
    return _pack(opcode, value, hook, None)[0]


def _pack(opcode: int, value, hook, st: _Streams | None) -> tuple[list, int]:
    """(pack_message's buffers, the frame's body length); with ``st``, large bytes and tensors
    become stream announcements and their views are left in ``st.views``."""
    parts = [b"", _OPCODES[opcode] if 0 <= opcode < 256 else _U8.pack(opcode)]
    _encode(value, parts, hook, 0, st)
    # Every part is bytes or a byte-format memoryview (_encode casts), so len() is its size.
    length = sum(map(len, parts))
    if length > MAX_FRAME:
        raise ProtocolError(f"message of {length} bytes exceeds the {MAX_FRAME}-byte frame limit; "
                            "send large data in chunks")
    parts[0] = _U32.pack(length)
    return parts, length


# ---------------------------------------------------------------------------------------------
# Decoding works on a memoryview of one frame; bytes values are zero-copy slices of it.

_SHAPES = [struct.Struct(f"<{n}q") for n in range(65)]
# Decoded array references by their bytes. A Ref is never changed after it is made, so one
# object can stand for every occurrence.
_REF_CACHE: dict[bytes, "Ref"] = {}


class _Reader:
    __slots__ = ("buf", "pos", "ref_hook", "streams")

    def __init__(self, buf: memoryview, pos: int = 0):
        self.buf, self.pos = buf, pos
        self.streams: list[Stream] = []

    # Fixed-size fields are read with unpack_from at the current position: slicing a memoryview
    # per field made decoding a kernel call cost more than the call itself.
    def _need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > len(self.buf):
            raise ProtocolError(f"value runs past the end of the frame (needs {n} bytes at offset "
                                f"{pos}, frame has {len(self.buf)})")
        self.pos = pos + n
        return pos

    def take(self, n: int) -> memoryview:
        pos = self._need(n)
        return self.buf[pos:pos + n]

    def u32(self) -> int:
        return _U32.unpack_from(self.buf, self._need(4))[0]

    def string(self) -> str:
        n = self.u32()
        pos = self._need(n)
        try:
            return str(self.buf[pos:pos + n], "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string value is not valid UTF-8") from None

    def device(self) -> Device:
        return Device(*_DEV.unpack_from(self.buf, self._need(8)))

    def array_meta(self):
        dtype = self.string()
        ndim = self.u32()
        if ndim > 64:
            raise ProtocolError(f"tensor has {ndim} dimensions; at most 64 are allowed")
        shape_struct = _SHAPES[ndim]
        shape = shape_struct.unpack_from(self.buf, self._need(shape_struct.size))
        if any(s < 0 for s in shape):
            raise ProtocolError(f"tensor shape {shape} has a negative dimension")
        return dtype, shape, self.device()

    def _stream(self) -> Stream:
        s = Stream(_U64.unpack_from(self.buf, self._need(8))[0])
        self.streams.append(s)
        return s

    def array_ref(self) -> "Ref":
        """An array reference (after its tag), remembered by its bytes: a kernel call passes the
        same arrays every time, and building the Ref again cost more than the call's dispatch."""
        buf, start = self.buf, self.pos
        key = None
        try:
            (dlen,) = _U32.unpack_from(buf, start + 8)
            (ndim,) = _U32.unpack_from(buf, start + 12 + dlen)
            end = start + 24 + dlen + 8 * ndim
            if ndim <= 64 and end <= len(buf):
                key = bytes(buf[start:end])
                ref = _REF_CACHE.get(key)
                if ref is not None:
                    self.pos = end
                    return ref
        except struct.error:
            pass  # truncated: the checked reads below report it
        obj_id = _U64.unpack_from(buf, self._need(8))[0]
        ref = Ref(T_ARRAY_REF, obj_id, *self.array_meta())
        if key is not None:
            if len(_REF_CACHE) >= 4096:
                _REF_CACHE.clear()
            _REF_CACHE[key] = ref
        return ref

    def value(self, depth: int = 0):
        if depth > _MAX_DEPTH:
            raise ProtocolError(f"value nested deeper than {_MAX_DEPTH} levels")
        tag = self.buf[self._need(1)]
        if tag == T_INT:
            return _I64.unpack_from(self.buf, self._need(8))[0]
        if tag == T_ARRAY_REF:  # before the rest: every kernel call carries several
            return self.array_ref()
        if tag == T_NONE:
            return None
        if tag == T_FLOAT:
            return _F64.unpack_from(self.buf, self._need(8))[0]
        if tag == T_STR:
            return self.string()
        if tag == T_BYTES:
            return self.take(self.u32())
        if tag == T_BOOL:
            return bool(self.buf[self._need(1)])
        if tag == T_LIST:
            n = self.u32()
            # Each element takes at least one byte: a bogus count fails before allocating.
            if n > len(self.buf) - self.pos:
                raise ProtocolError(f"list claims {n} elements but the frame is too short")
            return [self.value(depth + 1) for _ in range(n)]
        if tag == T_DICT:
            n = self.u32()
            if 2 * n > len(self.buf) - self.pos:
                raise ProtocolError(f"dict claims {n} entries but the frame is too short")
            out = {}
            for _ in range(n):
                k = self.value(depth + 1)
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise ProtocolError(f"dict key of type {type(k).__name__}; keys must be str or int")
                out[k] = self.value(depth + 1)
            return out
        if tag == T_DEVICE:
            return self.device()
        if tag == T_TENSOR:
            dtype, shape, dev = self.array_meta()
            return Tensor(dtype, shape, dev, self.take(self.u32()))
        if tag in (T_MODULE_REF, T_FUNC_REF):
            return Ref(tag, _U64.unpack_from(self.buf, self._need(8))[0])
        if tag == T_STREAM:
            return self._stream()
        if tag == T_STREAM_TENSOR:
            dtype, shape, dev = self.array_meta()
            return Tensor(dtype, shape, dev, self._stream())
        raise ProtocolError(f"unknown value tag {tag} at offset {self.pos - 1}")


def decode(buf, pos: int = 0):
    """Decode the single value that fills ``buf[pos:]`` (no streamed values allowed)."""
    v, streams = decode_streamed(buf, pos)
    if streams:
        raise ProtocolError("a streamed value where none is allowed (handshake or tracker message)")
    return v


def decode_streamed(buf, pos: int = 0):
    """(value, [Stream...]): the value filling ``buf[pos:]`` and its streamed parts, in the order
    their bytes follow the frame."""
    r = _Reader(memoryview(buf), pos)
    v = r.value()
    if r.pos != len(r.buf):
        raise ProtocolError(f"{len(r.buf) - r.pos} stray bytes after the value")
    return v, r.streams


def unpack_message(body: memoryview):
    """(opcode, value) of a frame body."""
    if len(body) < 1:
        raise ProtocolError("empty frame: a body needs at least an opcode byte")
    return body[0], decode(body, 1)


def unpack_request(body: memoryview):
    """(opcode, value, [Stream...]) of a frame body that may announce streamed values."""
    if len(body) < 1:
        raise ProtocolError("empty frame: a body needs at least an opcode byte")
    if body[0] == OP_DATA:
        raise ProtocolError("an OP_DATA frame that no streamed value announced")
    return (body[0], *decode_streamed(body, 1))


def replace_streams(value, done: dict):
    """``value`` with every Stream ``s`` replaced by ``done[id(s)]`` (a Tensor keeps its place and
    gets the data)."""
    t = type(value)
    if t is Stream:
        return done[id(value)]
    if t is Tensor and type(value.data) is Stream:
        value.data = done[id(value.data)]
        return value
    if t is list:
        return [replace_streams(v, done) for v in value]
    if t is dict:
        return {k: replace_streams(v, done) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------------------
# Frame I/O on a blocking socket.

class Channel:
    """Frames over one socket. Small frames are parsed out of a shared receive buffer, so a
    request usually costs one recv syscall; big frames are received straight into their own
    buffer."""

    def __init__(self, sock: socket.socket, max_frame: int = MAX_FRAME, spin: float = SPIN_SECONDS):
        self.sock = sock
        self.spin = spin
        self.max_frame = max_frame
        self._buf = bytearray(65536)
        self._view = memoryview(self._buf)
        self._start = self._end = 0
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # not TCP (socketpair in tests)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send_parts(self, parts: list) -> None:
        sock = self.sock
        try:
            total = sum(len(p) if isinstance(p, bytes) else memoryview(p).nbytes for p in parts)
            if total <= 65536:
                sock.sendall(b"".join(parts))
                return
            views = [memoryview(p).cast("B") for p in parts]
            while views:
                sent = sock.sendmsg(views[:512])
                while views and sent >= views[0].nbytes:
                    sent -= views[0].nbytes
                    views.pop(0)
                if sent:
                    views[0] = views[0][sent:]
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ConnectionLost(f"connection lost while sending: {e}") from None

    def send(self, opcode: int, value, hook=None) -> None:
        """Send one message; bytes and tensors past the frame's inline budget follow it as
        OP_DATA frames, sent straight from their buffers."""
        st = _Streams(INLINE_BUDGET)
        parts, length = _pack(opcode, value, hook, st)
        if length <= 65532:  # a small frame (most calls): one write of one joined buffer
            try:
                self.sock.sendall(b"".join(parts))
            except (BrokenPipeError, ConnectionResetError) as e:
                raise ConnectionLost(f"connection lost while sending: {e}") from None
        else:
            self.send_parts(parts)
        for view in st.views:
            for offset in range(0, view.nbytes, CHUNK):
                piece = view[offset:offset + CHUNK]
                self.send_parts([_U32.pack(piece.nbytes + 1) + _OPCODES[OP_DATA], piece])

    def _fill(self, need: int) -> None:
        """Ensure at least ``need`` buffered bytes (need <= buffer size)."""
        if self._end - self._start >= need:
            return
        if self._start:
            n = self._end - self._start
            self._buf[:n] = self._buf[self._start:self._end]
            self._start, self._end = 0, n
        while self._end < need:
            try:
                got = self._recv_spin(self._view[self._end:])
            except (ConnectionResetError, BrokenPipeError) as e:
                raise ConnectionLost(f"connection lost: {e}") from None
            if not got:
                if self._end == 0:
                    raise ConnectionLost("the peer closed the connection")
                raise ConnectionLost(f"the peer closed the connection in the middle of a frame "
                                     f"({self._end} of {need} bytes received)")
            self._end += got

    def _recv_spin(self, view) -> int:
        if self.spin:
            deadline = None
            while True:
                try:
                    return self.sock.recv_into(view, 0, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    now = time.perf_counter()
                    if deadline is None:
                        deadline = now + self.spin
                    elif now > deadline:
                        break
                    # Give the core away between polls: the peer that will answer (worker,
                    # relay) may be waiting for this very core. A pure busy poll holds it until
                    # the scheduler's tick, which cost 200-700 us per call whenever two spinners
                    # and anything else shared two cores.
                    _yield()
        return self.sock.recv_into(view)

    def _recv_rest(self, view: memoryview, have: int, what: str, before: int = 0, total: int | None = None) -> None:
        """Receive straight from the socket into ``view[have:]`` until ``view`` is full (its first
        ``have`` bytes came from the buffer). A peer closing first is ConnectionLost naming
        ``what`` and the bytes received (``before`` more came earlier, of ``total``)."""
        n = len(view)
        while have < n:
            try:
                got = self.sock.recv_into(view[have:])
            except (ConnectionResetError, BrokenPipeError) as e:
                raise ConnectionLost(f"connection lost: {e}") from None
            if not got:
                raise ConnectionLost(f"the peer closed the connection in the middle of {what} "
                                     f"({before + have} of {n if total is None else total} bytes received)")
            have += got

    def recv(self) -> memoryview:
        """The body of the next frame."""
        self._fill(4)
        length = _U32.unpack_from(self._buf, self._start)[0]
        if length > self.max_frame:
            raise ProtocolError(f"frame of {length} bytes exceeds the {self.max_frame}-byte limit")
        if length + 4 <= len(self._buf):
            self._fill(4 + length)
            start = self._start + 4
            self._start = start + length
            # Copy out: the shared buffer is reused by the next recv.
            return memoryview(bytes(self._view[start:start + length]))
        body = bytearray(length)
        have = self._end - self._start - 4
        body[:have] = self._view[self._start + 4:self._end]
        self._start = self._end = 0
        view = memoryview(body)
        self._recv_rest(view, have, "a frame")
        return view

    def recv_message(self):
        """(opcode, value) of the next message, its streamed values received into new buffers
        (bytes become a memoryview of a bytearray, a tensor's data likewise)."""
        op, value, streams = unpack_request(self.recv())
        if streams:
            done = {}
            for s in streams:
                try:
                    buf = memoryview(bytearray(s.nbytes))
                except (MemoryError, OverflowError):
                    raise ProtocolError(f"a streamed value of {s.nbytes} bytes does not fit in memory "
                                        "here") from None
                self.recv_stream(s.nbytes, buf)
                done[id(s)] = buf
            value = replace_streams(value, done)
        return op, value

    def recv_request(self):
        """(opcode, value, [Stream...]): the streams' bytes are still on the wire; receive each,
        in order, with recv_stream before the next recv (the worker picks their destination)."""
        return unpack_request(self.recv())

    def recv_stream(self, nbytes: int, dest: memoryview | None = None, write=None) -> None:
        """Receive a streamed value's ``nbytes`` from its OP_DATA frames: straight into the
        writable byte view ``dest``, or piece by piece through ``write(offset, view)`` (the view
        is reused for the next piece; at most CHUNK bytes are held here)."""
        got, scratch = 0, None
        while got < nbytes:
            self._fill(5)
            length = _U32.unpack_from(self._buf, self._start)[0]
            n = length - 1
            if self._buf[self._start + 4] != OP_DATA or n < 1 or n > CHUNK or n > nbytes - got:
                raise ProtocolError(f"expected an OP_DATA frame of at most {min(CHUNK, nbytes - got)} bytes "
                                    f"({got} of a {nbytes}-byte streamed value received), got opcode "
                                    f"{self._buf[self._start + 4]} with {n} bytes")
            self._start += 5
            if dest is not None:
                target = dest[got:got + n]
            else:
                if scratch is None:
                    scratch = memoryview(bytearray(min(CHUNK, nbytes)))
                target = scratch[:n]
            have = min(self._end - self._start, n)
            target[:have] = self._view[self._start:self._start + have]
            self._start += have
            if self._start == self._end:
                self._start = self._end = 0
            self._recv_rest(target, have, "a streamed value", got, nbytes)
            if write is not None:
                write(got, target)
            got += n

    def request_into(self, opcode: int, value, dest: memoryview, hook=None) -> None:
        """Like request, for a reply that is bytes of exactly len(dest): they are received
        straight into dest (array downloads skip an intermediate copy). Any other reply is
        decoded as usual and reported."""
        self.send(opcode, value, hook)
        self._fill(4 + 6)
        length = _U32.unpack_from(self._buf, self._start)[0]
        head = self._start + 4
        n = len(dest)
        if (length != 6 + n or self._buf[head] != OP_RETURN or self._buf[head + 1] != T_BYTES
                or _U32.unpack_from(self._buf, head + 2)[0] != n or length > self.max_frame):
            op, reply = self.recv_message()
            if op == OP_ERROR:
                raise RemoteError(reply)
            raise ProtocolError(f"expected {n} bytes in reply to opcode {opcode}, got opcode {op}")
        have = min(self._end - (head + 6), n)
        dest[:have] = self._view[head + 6:head + 6 + have]
        self._start += 10 + have
        if self._start == self._end:
            self._start = self._end = 0
        self._recv_rest(dest, have, "a frame")

    def request(self, opcode: int, value, hook=None):
        """Send one message and wait for its reply (OP_RETURN value, or raise for OP_ERROR)."""
        self.send(opcode, value, hook)
        op, reply = self.recv_message()
        if op == OP_RETURN:
            return reply
        if op == OP_ERROR:
            raise RemoteError(reply)
        raise ProtocolError(f"unexpected reply opcode {op}")

    def pending(self) -> bool:
        """True if a frame's bytes are already buffered (select() would not see them)."""
        return self._end > self._start


class RemoteError(CodedError):
    """An exception raised on the remote side, re-raised on the client with its message;
    ``code`` says what kind of failure it was (``E_*``)."""

    def __init__(self, info):
        if isinstance(info, dict):
            msg = f"{info.get('type', 'Error')}: {info.get('message', '')}"
            code = info.get("code", 0)
        else:
            msg, code = str(info), 0
        super().__init__(msg, code)


def error_info(type_name: str, message: str, code: int, traceback: str = "") -> dict:
    """The value of an ERROR reply."""
    return {"type": type_name, "message": message, "traceback": traceback, "code": code}


# ---------------------------------------------------------------------------------------------
# Handshake. The connecting side speaks first:
#   C -> S  HELLO  dict {magic, version, role, key, nonce}
#   S -> C  dict {status: OK} | {status: AUTH, nonce} | {status: ERROR, message}
#   C -> S  (if AUTH) dict {proof: HMAC-SHA256(token, "kiln-rpc" | server nonce | client nonce | role)}
#   S -> C  dict {status: OK} | {status: ERROR, message}
# Both messages are ordinary frames with opcode 0.

def _proof(token: str, server_nonce: bytes, client_nonce: bytes, role: int) -> bytes:
    msg = b"kiln-rpc" + bytes(server_nonce) + bytes(client_nonce) + bytes((role,))
    return hmac.new(token.encode(), msg, hashlib.sha256).digest()


def client_handshake(ch: Channel, role: int, key: str, token: str, extra: dict | None = None) -> dict:
    """Run the connecting side of the handshake; returns the server's final reply dict."""
    nonce = os.urandom(16)
    hello = {"magic": MAGIC, "version": VERSION, "role": role, "key": key, "nonce": nonce}
    if extra:
        hello.update(extra)
    ch.send(0, hello)
    reply = _handshake_reply(ch)
    if reply.get("status") == HS_AUTH:
        if not token:
            raise CodedError("the peer requires an authentication token; pass auth_token=... or set "
                             "KILN_RPC_TOKEN to the token the server was started with", E_AUTH)
        ch.send(0, {"proof": _proof(token, reply.get("nonce", b""), nonce, role)})
        reply = _handshake_reply(ch)
    if reply.get("status") == HS_QUEUED:
        # The server finishes another session first (TVM queues such connections too): wait
        # for our turn however long it takes; the server keeps the connection.
        timeout = ch.sock.gettimeout()
        ch.sock.settimeout(None)
        while reply.get("status") == HS_QUEUED:
            reply = _handshake_reply(ch)
        ch.sock.settimeout(timeout)
    if reply.get("status") != HS_OK:
        raise CodedError(f"connection refused by the peer: {reply.get('message', 'no reason given')}",
                         reply.get("code", 0))
    return reply


def _handshake_reply(ch: Channel) -> dict:
    op, reply = ch.recv_message()
    if not isinstance(reply, dict):
        raise ProtocolError("the peer is not a kiln RPC endpoint (bad handshake reply)")
    return reply


def check_hello(hello) -> str | None:
    """Why a hello is invalid, or None when it is acceptable (hello_error_code says which E_*)."""
    if not isinstance(hello, dict):
        return "handshake must be a dict"
    if bytes(hello.get("magic", b"")) != MAGIC:
        return "bad magic: this port speaks the kiln RPC protocol"
    if hello.get("version") != VERSION:
        return f"protocol version {hello.get('version')!r} is not supported (this side speaks {VERSION})"
    if not isinstance(hello.get("key"), str) or not isinstance(hello.get("role"), int) \
            or isinstance(hello.get("role"), bool):
        return "hello needs an int 'role' and a str 'key'"
    nonce = hello.get("nonce", b"")
    if not isinstance(nonce, memoryview) or len(nonce) != 16:
        return "hello needs a 16-byte 'nonce'"
    return None


def hello_error_code(hello) -> int:
    """The error code for check_hello's complaint: another version is unsupported, the rest is bad."""
    if isinstance(hello, dict) and bytes(hello.get("magic", b"")) == MAGIC and hello.get("version") != VERSION:
        return E_UNSUPPORTED
    return E_BAD_REQUEST


def auth_challenge() -> bytes:
    return os.urandom(16)


def verify_proof(token: str, server_nonce: bytes, hello: dict, reply) -> bool:
    if not isinstance(reply, dict) or not isinstance(reply.get("proof"), memoryview):
        return False
    expect = _proof(token, server_nonce, bytes(hello["nonce"]), hello["role"])
    return hmac.compare_digest(expect, bytes(reply["proof"]))
