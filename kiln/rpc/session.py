"""The client side of a session: ``rpc.connect`` and the remote objects it hands out.

A session talks to one worker process on the server. Remote arrays, modules and functions are
handles into that worker's object table; dropping the last Python reference frees the remote
object (the frees ride along with the next request, so ``__del__`` never writes mid-request).
"""

from __future__ import annotations

import math
import os
import socket
import threading

from .. import config
from ..errors import RPCError
from . import protocol as P

_DEVICE_CODES = {"cpu": 1, "llvm": 1, "c": 1, "cuda": 2, "gpu": 2, "nvptx": 2, "cl": 4,
                 "opencl": 4, "vulkan": 7, "metal": 8, "rocm": 10, "ext_dev": 12}


class RPCSession:
    """A connection to one server worker. Get one with ``rpc.connect`` or a tracker's ``request``.

    >>> remote = rpc.connect("127.0.0.1", 9090)
    >>> remote.upload("lib.tar"); f = remote.load_module("lib.tar")
    >>> a = tvm.nd.array(np.ones(4, "float32"), remote.cpu())
    """

    def __init__(self, channel: P.Channel, peer: str = "", session_timeout: float = 0):
        self._ch = channel
        self._lock = threading.RLock()
        self._to_free: list[int] = []
        self.peer = peer
        self.session_timeout = session_timeout
        self._closed = False

    def __repr__(self) -> str:
        return f"RPCSession({self.peer})"

    # -- transport -----------------------------------------------------------------------------
    def _request(self, opcode: int, args: list, raw: bool = False):
        """Send a request, return its decoded reply (``raw``: bytes stay a view of the frame)."""
        with self._lock:
            if self._closed:
                raise RPCError(f"the session with {self.peer} is closed; open a new one with rpc.connect")
            if self._to_free:
                ids, self._to_free = self._to_free, []
                self._ch.send(P.OP_FREE, ids)
            try:
                reply = self._ch.request(opcode, args, _to_wire)
                return reply if raw else self._decode(reply)
            except P.ConnectionLost as e:
                self._closed = True
                raise RPCError(f"lost the session with {self.peer}: {e}. The server or its session "
                               "worker stopped (crash, kill, or session_timeout).") from None

    def _request_into(self, opcode: int, args: list, dest: memoryview) -> None:
        """A request whose bytes reply lands directly in dest."""
        with self._lock:
            if self._closed:
                raise RPCError(f"the session with {self.peer} is closed; open a new one with rpc.connect")
            try:
                self._ch.request_into(opcode, args, dest, _to_wire)
            except P.ConnectionLost as e:
                self._closed = True
                raise RPCError(f"lost the session with {self.peer}: {e}. The server or its session "
                               "worker stopped (crash, kill, or session_timeout).") from None

    def _decode(self, value):
        if isinstance(value, P.Ref):
            if value.tag == P.T_ARRAY_REF:
                return RemoteNDArray(self, value.id, value.shape, value.dtype, self._device(value.device))
            if value.tag == P.T_MODULE_REF:
                return RemoteModule(self, value.id)
            return RemoteFunction(self, value.id)
        if isinstance(value, P.Device):
            return self._device(value)
        if isinstance(value, memoryview):
            return value.tobytes()
        if isinstance(value, list):
            return [self._decode(v) for v in value]
        if isinstance(value, dict):
            return {k: self._decode(v) for k, v in value.items()}
        if isinstance(value, P.Tensor):
            import numpy as np
            return np.frombuffer(value.data, dtype=value.dtype).reshape(value.shape).copy()
        return value

    def _free(self, obj_id: int) -> None:
        self._to_free.append(obj_id)  # list.append is atomic: safe from __del__

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                try:
                    self._ch.send(P.OP_SHUTDOWN, [])
                    self._ch.recv()
                except (RPCError, OSError):
                    pass
                self._ch.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- files ---------------------------------------------------------------------------------
    def upload(self, data, target: str | None = None) -> None:
        """Copy a file (path) or bytes into the session directory as ``target``."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            if target is None:
                raise ValueError("upload(bytes) needs target=<file name>")
            self._upload_bytes(memoryview(data).cast("B"), target)
            return
        path = os.fspath(data)
        target = target or os.path.basename(path)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= P.CHUNK:
                self._upload_bytes(memoryview(f.read()), target)
                return
            offset = 0
            while True:
                chunk = f.read(P.CHUNK)
                final = offset + len(chunk) >= size
                self._request(P.OP_UPLOAD, [target, offset, chunk, final])
                offset += len(chunk)
                if final:
                    return

    def _upload_bytes(self, view: memoryview, target: str) -> None:
        offset = 0
        while True:
            chunk = view[offset:offset + P.CHUNK]
            final = offset + chunk.nbytes >= view.nbytes
            self._request(P.OP_UPLOAD, [target, offset, chunk, final])
            offset += chunk.nbytes
            if final:
                return

    def download(self, name: str) -> bytearray:
        """The bytes of ``name`` from the session directory (a bytearray, as TVM's)."""
        # Grown in place chunk by chunk (a large bytearray is extended by mremap, not copied):
        # joining a list of chunks at the end would hold the file twice.
        out = bytearray()
        while True:
            chunk = self._request(P.OP_DOWNLOAD, [name, len(out), P.CHUNK], raw=True)
            out += chunk  # from the received frame: one copy
            if len(chunk) < P.CHUNK:
                return out

    def remove(self, name: str) -> None:
        self._request(P.OP_REMOVE, [name])

    def listdir(self) -> list[str]:
        return self._request(P.OP_LISTDIR, [])

    def load_module(self, name: str) -> "RemoteModule":
        """Load an uploaded ``.so`` (as is) or ``.tar`` (relinked on the device) as a module."""
        return self._request(P.OP_LOAD_MODULE, [name])

    def get_function(self, name: str) -> "RemoteFunction":
        """A function registered on the server, e.g. ``rpc.echo``."""
        f = self._request(P.OP_GET_FUNCTION, [0, name])
        if f is None:
            raise AttributeError(f"the server has no function named {name!r}")
        return f

    # -- devices -------------------------------------------------------------------------------
    def device(self, dev_type, dev_id: int = 0):
        """A device of the remote machine: ``remote.device("cuda", 0)`` or a target string."""
        from ..runtime.device import Device
        if isinstance(dev_type, str):
            kind = dev_type.split()[0].lower() if dev_type.split() else ""
            if kind not in _DEVICE_CODES:
                raise ValueError(f"unknown device {dev_type!r}; use one of {sorted(_DEVICE_CODES)}")
            dev_type = _DEVICE_CODES[kind]
        return Device(int(dev_type), dev_id, session=self)

    context = device  # the spelling of older TVM, used by 004

    def cpu(self, dev_id: int = 0):
        return self.device(1, dev_id)

    def cuda(self, dev_id: int = 0):
        return self.device(2, dev_id)

    gpu = cuda

    def cl(self, dev_id: int = 0):
        return self.device(4, dev_id)

    def ext_dev(self, dev_id: int = 0):
        """The server's accelerator (the VTA simulator, kiln/vta)."""
        return self.device(12, dev_id)

    def _device(self, d: P.Device):
        from ..runtime.device import Device
        return Device(d.device_type, d.device_id, session=self)

    # The hooks kiln.runtime calls for a Device whose .session is this session.
    def device_exist(self, dev) -> bool:
        return bool(self._request(P.OP_DEVICE_EXISTS, [P.Device(dev.device_type, dev.device_id)]))

    def device_attr(self, dev, name: str):
        """``dev.max_threads_per_block`` and the other Device properties, asked remotely."""
        query = self.__dict__.get("_attr_query")
        if query is None:
            query = self._attr_query = self.get_function("device.attribute")
        value = query(dev.device_type, dev.device_id, name)
        return tuple(value) if isinstance(value, list) else value

    def device_sync(self, dev) -> None:
        self._request(P.OP_SYNC, [P.Device(dev.device_type, dev.device_id)])

    def nd_empty(self, shape, dtype, dev) -> "RemoteNDArray":
        if isinstance(shape, int):
            shape = (shape,)
        return self._request(P.OP_EMPTY, [[int(s) for s in shape], str(_dtype_name(dtype)),
                                          P.Device(dev.device_type, dev.device_id)])

    def nd_array(self, arr, dev) -> "RemoteNDArray":
        out = self.nd_empty(arr.shape, arr.dtype, dev)
        out.copyfrom(arr)
        return out


def _dtype_name(dtype) -> str:
    name = getattr(dtype, "name", None) or str(dtype)
    return {"float": "float32", "int": "int32", "bool_": "bool"}.get(name, name)


def _to_wire(value):
    """protocol.encode hook for client-side objects."""
    if isinstance(value, (RemoteNDArray, RemoteModule, RemoteFunction)):
        return value._ref()
    from ..runtime.device import Device
    if isinstance(value, Device):
        return P.Device(value.device_type, value.device_id)
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # numpy scalar
        return value.item()
    if hasattr(value, "__array_interface__") or type(value).__name__ == "NDArray":
        # A local array passed to a remote function: sent by value, lives on the remote CPU.
        import numpy as np
        a = np.require(value.numpy() if hasattr(value, "numpy") else value, requirements="C")  # keeps 0-d
        return P.Tensor(str(a.dtype), a.shape, P.Device(1, 0), memoryview(a).cast("B"))
    raise TypeError(f"cannot send a {type(value).__name__} over RPC")


class RemoteNDArray:
    """An array living in the remote worker. ``.numpy()`` fetches it, ``.copyfrom`` sends data."""

    def __init__(self, session: RPCSession, obj_id: int, shape, dtype: str, device):
        self._session, self._id = session, obj_id
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self.nbytes = math.prod(self.shape) * _itemsize(dtype)

    def _ref(self) -> P.Encoded:
        # Encoded once: an array is passed on every kernel call, and its reference never changes.
        wire = self.__dict__.get("_wire")
        if wire is None:
            wire = self._wire = P.Encoded(P.Ref(P.T_ARRAY_REF, self._id, self.dtype, self.shape,
                                                P.Device(self.device.device_type, self.device.device_id)))
        return wire

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numpy(self):
        import numpy as np
        out = np.empty(self.shape, dtype=self.dtype)
        view = memoryview(out).cast("B") if out.nbytes else memoryview(b"")
        offset = 0
        while offset < self.nbytes:
            n = min(P.CHUNK, self.nbytes - offset)
            self._session._request_into(P.OP_COPY_OUT, [self._id, offset, n], view[offset:offset + n])
            offset += n
        return out

    asnumpy = numpy

    def copyfrom(self, source) -> "RemoteNDArray":
        import numpy as np
        if isinstance(source, RemoteNDArray) or type(source).__name__ == "NDArray":
            source = source.numpy()
        source = np.ascontiguousarray(source, dtype=self.dtype) if not isinstance(source, np.ndarray) else source
        if source.shape != self.shape or source.dtype != np.dtype(self.dtype):
            raise ValueError(f"copyfrom: source is {source.shape} {source.dtype}, the remote array is "
                             f"{self.shape} {self.dtype}; reshape/astype the source first")
        view = memoryview(np.ascontiguousarray(source)).cast("B") if source.size else memoryview(b"")
        for offset in range(0, self.nbytes, P.CHUNK):
            self._session._request(P.OP_COPY_IN, [self._id, offset, view[offset:offset + P.CHUNK]])
        return self

    def copyto(self, target):
        if hasattr(target, "copyfrom"):
            target.copyfrom(self.numpy())
            return target
        from ..runtime import ndarray
        return ndarray.array(self.numpy(), target)

    def __setitem__(self, index, value):
        if not (isinstance(index, slice) and index == slice(None)):
            raise ValueError("remote arrays support only whole-array assignment (arr[:] = value)")
        import numpy as np
        self.copyfrom(np.broadcast_to(np.asarray(value, dtype=self.dtype), self.shape))

    def __repr__(self):
        return f"<kiln.RemoteNDArray shape={self.shape}, dtype={self.dtype}, {self.device}>"

    def __del__(self):
        try:
            self._session._free(self._id)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _itemsize(dtype: str) -> int:
    digits = "".join(c for c in dtype if c.isdigit())
    if dtype == "bool":
        return 1
    if not digits:
        raise ValueError(f"unknown dtype {dtype!r}")
    return max(int(digits) // 8, 1)


class RemoteFunction:
    """A function in the remote worker; calling it runs it there."""

    def __init__(self, session: RPCSession, obj_id: int):
        self._session, self._id = session, obj_id

    def _ref(self) -> P.Ref:
        return P.Ref(P.T_FUNC_REF, self._id)

    def __call__(self, *args):
        # Remote arrays go in already encoded (the codec's fast path), not through the hook.
        return self._session._request(P.OP_CALL, [self._id, *[
            a._ref() if type(a) is RemoteNDArray else a for a in args]])

    def __del__(self):
        try:
            self._session._free(self._id)
        except Exception:  # noqa: BLE001
            pass


class RemoteModule:
    """A module loaded in the remote worker: ``mod["add_one"](a, b)``, ``mod(a, b)`` (entry)."""

    def __init__(self, session: RPCSession, obj_id: int):
        self._session, self._id = session, obj_id
        self._funcs: dict[str, RemoteFunction] = {}
        self._entry: str | None = None

    def _ref(self) -> P.Ref:
        return P.Ref(P.T_MODULE_REF, self._id)

    def get_function(self, name: str) -> RemoteFunction:
        if name not in self._funcs:
            f = self._session._request(P.OP_GET_FUNCTION, [self._id, name])
            if f is None:
                raise AttributeError(f"the remote module has no function {name!r}")
            self._funcs[name] = f
        return self._funcs[name]

    __getitem__ = get_function

    @property
    def entry_name(self) -> str:
        # A loaded module never changes its entry: ask once, so ``mod(a, b)`` costs one round
        # trip like ``mod["name"](a, b)`` (the function handle is cached by get_function).
        if self._entry is None:
            self._entry = self._session._request(P.OP_MODULE_INFO, [self._id])["entry_name"]
        return self._entry

    def __call__(self, *args):
        return self.get_function(self.entry_name)(*args)

    def time_evaluator(self, func_name: str, dev, number: int = 10, repeat: int = 1,
                       min_repeat_ms: int = 0, **_ignored):
        """A function that times ``func_name`` on the remote device (no network time included)."""
        session = self._session

        def evaluate(*args):
            costs = session._request(P.OP_TIME_EVAL, [
                self._id, func_name, P.Device(dev.device_type, dev.device_id), int(number),
                int(repeat), int(min_repeat_ms), *args])
            return _benchmark_result(costs, int(number))
        return evaluate

    def __del__(self):
        try:
            self._session._free(self._id)
        except Exception:  # noqa: BLE001
            pass


def _benchmark_result(costs: list[float], number: int):
    try:
        from ..runtime.evaluator import ProfileResult
    except ImportError:  # a client without numpy
        return _Costs(costs)
    return ProfileResult(tuple(costs), number)


class _Costs:
    """Seconds per run, one per repeat (used when the runtime's result type is unavailable)."""

    def __init__(self, results):
        self.results = tuple(results)
        ordered = sorted(self.results)
        self.mean = sum(self.results) / len(self.results) if self.results else 0.0
        self.median = ordered[len(ordered) // 2] if ordered else 0.0
        self.min = ordered[0] if ordered else 0.0
        self.max = ordered[-1] if ordered else 0.0
        var = sum((r - self.mean) ** 2 for r in self.results) / max(len(self.results), 1)
        self.std = var ** 0.5

    def __repr__(self):
        return f"BenchmarkResult(mean={self.mean:.3g}s, results={list(self.results)})"


def connect(url: str, port: int, key: str = "", session_timeout: float = 0,
            auth_token: str | None = None, connect_timeout: float = 10, lease_token: str = "") -> RPCSession:
    """Open a session with the server (or proxy) at ``url:port``.

    >>> remote = rpc.connect("127.0.0.1", 9090)
    >>> remote = rpc.connect("proxy-host", 9090, key="rk3399")   # a server behind a proxy

    ``session_timeout`` (seconds, 0 = none) bounds the whole session: the server kills the
    worker after that long and the next call raises.
    """
    token = config.get().rpc_token if auth_token is None else auth_token
    try:
        sock = socket.create_connection((url, int(port)), timeout=connect_timeout)
    except OSError as e:
        raise RPCError(f"cannot connect to RPC server {url}:{port}: {e}. Is the server running "
                       "(python -m kiln.exec.rpc_server) and the port right?") from None
    ch = P.Channel(sock)
    try:
        P.client_handshake(ch, P.ROLE_CLIENT, key, token,
                           {"session_timeout": float(session_timeout), "lease": lease_token})
    except (RPCError, OSError) as e:
        ch.close()
        if isinstance(e, RPCError):
            raise
        raise RPCError(f"handshake with {url}:{port} failed: {e}") from None
    sock.settimeout(None)
    return RPCSession(ch, f"{url}:{port}", session_timeout)
