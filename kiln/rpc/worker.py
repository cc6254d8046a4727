"""The session worker: executes one client's requests in its own process.

The server forks one worker per session (see server.py), so a crash or hang in user code
only ends that session. The worker holds the session's objects (arrays, modules, functions)
in a table keyed by integer ids the client refers to.

The runtime (and numpy) is imported on first use: a worker on a device without numpy can still
take uploads, list files and call functions that need no arrays.
"""

from __future__ import annotations

import ctypes
import os
import time
import traceback

from . import files, protocol as P

# Functions a client can fetch with session.get_function(name) besides those of loaded
# modules. One literal table, no import-time registration.
def _echo(*args):
    return list(args) if len(args) != 1 else args[0]


def _workpath(worker, name):
    return files.resolve(worker.workdir, name)


def _device_attribute(device_type, device_id, name):
    """A device property (``remote.cl().max_threads_per_block``); tuples travel as lists."""
    from ..runtime.device import Device
    value = Device(int(device_type), int(device_id))._attribute(str(name))
    return list(value) if isinstance(value, tuple) else value


# name -> (callable, needs the worker as first argument)
SERVER_FUNCTIONS = {
    "device.attribute": (_device_attribute, False),
    "rpc.echo": (_echo, False),
    "rpc.workpath": (_workpath, True),
    "tvm.rpc.server.workpath": (_workpath, True),
    "rpc.getpid": (lambda: os.getpid(), False),
    "rpc.sleep": (lambda s: time.sleep(float(s)), False),
}


def _runtime():
    from ..runtime import ndarray, device  # noqa: F401  (numpy is needed from here on)
    return ndarray


class Worker:
    def __init__(self, channel: P.Channel, workdir: str, extra_functions: dict | None = None):
        self.ch = channel
        self.workdir = workdir
        self.objects: dict[int, object] = {}
        self.next_id = 1
        self.functions = dict(SERVER_FUNCTIONS)
        self.functions.update(extra_functions or {})
        self.handlers = {
            P.OP_CALL: self.call, P.OP_GET_FUNCTION: self.get_function,
            P.OP_LOAD_MODULE: self.load_module, P.OP_UPLOAD: self.upload,
            P.OP_DOWNLOAD: self.download, P.OP_REMOVE: self.remove, P.OP_LISTDIR: self.listdir,
            P.OP_EMPTY: self.empty, P.OP_COPY_IN: self.copy_in, P.OP_COPY_OUT: self.copy_out,
            P.OP_TIME_EVAL: self.time_eval, P.OP_DEVICE_EXISTS: self.device_exists,
            P.OP_SYNC: self.sync, P.OP_MODULE_INFO: self.module_info,
        }

    # -- main loop -----------------------------------------------------------------------------
    def serve(self) -> None:
        ch = self.ch
        while True:
            try:
                op, args, streams = ch.recv_request()
                if streams:
                    args = self._receive_streams(op, args, streams)
            except P.ConnectionLost:
                return
            except Exception as e:  # noqa: BLE001 - a bad frame or a stream that has no place
                # The stream can no longer be trusted to be in sync: report and end the session.
                self._reply_error(e, P.E_BAD_REQUEST)
                return
            if op == P.OP_FREE:  # no reply: lets the client free objects from __del__ lazily
                for obj_id in args if isinstance(args, list) else ():
                    self.objects.pop(obj_id, None)
                continue
            if op == P.OP_SHUTDOWN:
                ch.send(P.OP_RETURN, None)
                return
            handler = self.handlers.get(op)
            if handler is None:
                self._reply_error(P.ProtocolError(f"unknown opcode {op}; this server speaks protocol "
                                                  f"version {P.VERSION}"), P.E_UNSUPPORTED)
                continue
            try:
                if not isinstance(args, list):
                    raise P.ProtocolError(f"opcode {op} needs a list of arguments")
                result = handler(*args)
            except P.ProtocolError as e:
                self._reply_error(e, P.E_BAD_REQUEST)
                continue
            except Exception as e:  # noqa: BLE001 - every user error goes back to the client
                self._reply_error(e, P.E_REMOTE)
                continue
            try:
                ch.send(P.OP_RETURN, result, self.to_wire)
            except P.ConnectionLost:
                return
            except Exception as e:  # noqa: BLE001 - e.g. a return value that cannot be sent
                self._reply_error(e, P.E_REMOTE)

    def _reply_error(self, e: BaseException, code: int) -> None:
        tb = traceback.format_exc(limit=8) if not isinstance(e, P.ProtocolError) else ""
        try:
            self.ch.send(P.OP_ERROR, P.error_info(type(e).__name__, str(e), code, tb))
        except P.RPCError:
            pass

    # -- streamed values -----------------------------------------------------------------------
    def _receive_streams(self, op, args, streams):
        """Receive the request's streamed values, each into its final place, and return the
        arguments with them filled in. A tensor given to a graph executor's set_input lands in
        the executor's input array itself; any other tensor in a new array on its device, bytes
        in a new buffer. So the worker holds each value once, plus at most one chunk."""
        done = {}
        direct = self._set_input_destination(op, args)
        for s in streams:
            owner = next((a for a in _walk(args) if type(a) is P.Tensor and a.data is s), None)
            if owner is None:  # plain bytes
                buf = memoryview(bytearray(s.nbytes))
                self.ch.recv_stream(s.nbytes, buf)
                done[id(s)] = buf
            elif direct is not None and owner is args[2]:
                self.ch.recv_stream(s.nbytes, direct[1])
                done[id(s)] = direct[0]
            else:
                done[id(s)] = self._receive_tensor(owner, s)
        return _fill_streams(args, done)

    def _set_input_destination(self, op, args):
        """(value to pass, writable bytes of the input array) when the request is
        ``executor.set_input(key, <streamed tensor>)`` whose tensor matches a CPU input."""
        if op != P.OP_CALL or type(args) is not list or len(args) != 3 or type(args[2]) is not P.Tensor \
                or type(args[2].data) is not P.Stream:
            return None
        func = self.objects.get(args[0].id if type(args[0]) is P.Ref else args[0])
        if not _is_set_input(func):
            return None
        executor = func.__self__
        t = args[2]
        try:
            dst = executor.get_input(args[1])
        except (KeyError, IndexError, ValueError, TypeError):
            return None  # the call itself reports the bad key
        if (getattr(dst, "device", None) is None or dst.device.device_type != 1
                or tuple(dst.shape) != t.shape or str(dst.dtype) != t.dtype or dst.nbytes != t.data.nbytes):
            return None
        import numpy as np
        raw = (ctypes.c_char * dst.nbytes).from_address(dst._address()) if dst.nbytes else bytearray(0)
        # set_input then copies the array onto itself (a memmove in place), which runs the
        # executor's own checks and input-changed hooks without a second buffer.
        alias = np.frombuffer(raw, dtype=dst.dtype).reshape(dst.shape)
        return alias, memoryview(raw).cast("B")

    def _receive_tensor(self, t: P.Tensor, s: P.Stream):
        """A streamed tensor received into a new array on its device (bytes if the runtime is
        unavailable, as on a device without numpy)."""
        try:
            nd = _runtime()
        except ImportError:
            buf = memoryview(bytearray(s.nbytes))
            self.ch.recv_stream(s.nbytes, buf)
            t.data = buf
            return t
        from ..runtime.device import Device
        arr = nd.empty(t.shape, t.dtype, Device(t.device.device_type, t.device.device_id))
        if arr.nbytes != s.nbytes:
            raise P.ProtocolError(f"a streamed {t.dtype}{list(t.shape)} tensor announces {s.nbytes} bytes; "
                                  f"its shape needs {arr.nbytes}")
        if arr.device.device_type == 1 and arr.nbytes:
            self.ch.recv_stream(s.nbytes, memoryview((ctypes.c_char * arr.nbytes).from_address(arr._address())).cast("B"))
        else:
            self.ch.recv_stream(s.nbytes, write=lambda offset, view: self._write(arr, offset, view))
        return arr

    # -- object table --------------------------------------------------------------------------
    def _store(self, obj) -> int:
        obj_id = self.next_id
        self.next_id += 1
        self.objects[obj_id] = obj
        return obj_id

    def _get(self, ref, kind: str):
        obj_id = ref.id if isinstance(ref, P.Ref) else ref
        try:
            return self.objects[obj_id]
        except (KeyError, TypeError):
            raise KeyError(f"{kind} #{obj_id} does not exist in this session (freed, or from "
                           "another session)") from None

    def to_wire(self, value):
        """Map a runtime object in a result to a wire value (hook for protocol.encode)."""
        nd = _runtime()
        from ..runtime.device import Device
        if isinstance(value, nd.NDArray):
            return P.Ref(P.T_ARRAY_REF, self._store(value), value.dtype, value.shape,
                         P.Device(value.device.device_type, value.device.device_id))
        if isinstance(value, Device):
            return P.Device(value.device_type, value.device_id)
        if hasattr(value, "get_function") or type(value).__name__.endswith("Module"):
            return P.Ref(P.T_MODULE_REF, self._store(value))
        if callable(value):
            return P.Ref(P.T_FUNC_REF, self._store(value))
        if hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalar
            return value.item()
        if hasattr(value, "results") and hasattr(value, "mean"):  # a benchmark result
            return {"results": list(value.results), "mean": value.mean}
        raise TypeError(f"cannot return a {type(value).__name__} over RPC")

    def from_wire(self, value):
        """Turn decoded argument values into runtime objects."""
        if isinstance(value, P.Ref):
            return self._get(value, {P.T_ARRAY_REF: "array", P.T_MODULE_REF: "module"}.get(value.tag, "function"))
        if isinstance(value, P.Device):
            from ..runtime.device import Device
            return Device(value.device_type, value.device_id)
        if isinstance(value, P.Tensor):
            return self._tensor_to_array(value)
        if isinstance(value, memoryview):
            return bytes(value)
        if isinstance(value, list):
            return [self.from_wire(v) for v in value]
        if isinstance(value, dict):
            return {k: self.from_wire(v) for k, v in value.items()}
        return value

    def _tensor_to_array(self, t: P.Tensor):
        nd = _runtime()
        from ..runtime.device import Device
        arr = nd.empty(t.shape, t.dtype, Device(t.device.device_type, t.device.device_id))
        self._write(arr, 0, t.data)
        return arr

    # -- handlers ------------------------------------------------------------------------------
    def call(self, func_ref, *args):
        func = self._get(func_ref, "function")
        objects = self.objects
        if len(args) == 2 and type(args[1]) is P.Tensor and _is_set_input(func) and _numpy_usable():
            # A parameter or input sent inline: the executor copies it from the received frame
            # (a temporary array would be one more allocation and copy per parameter).
            import numpy as np
            t = args[1]
            return func(self.from_wire(args[0]), np.frombuffer(t.data, dtype=t.dtype).reshape(t.shape))
        # Kernel calls pass arrays by reference: look those up directly (from_wire's checks and
        # error text are for everything else, and for ids that do not exist).
        return func(*[objects[a.id] if type(a) is P.Ref and a.id in objects else self.from_wire(a)
                      for a in args])

    def get_function(self, module_ref, name):
        if module_ref:
            mod = self._get(module_ref, "module")
            try:
                func = mod[name] if not hasattr(mod, "get_function") else mod.get_function(name)
            except (AttributeError, KeyError) as e:
                raise AttributeError(f"module has no function {name!r}: {e}") from None
            return P.Ref(P.T_FUNC_REF, self._store(func))
        entry = self.functions.get(name)
        if entry is None:
            found = _runtime_global(name)
            if found is None:
                return None
            return P.Ref(P.T_FUNC_REF, self._store(found))
        func, wants_worker = entry
        if wants_worker:
            func = (lambda f: lambda *a: f(self, *a))(func)
        return P.Ref(P.T_FUNC_REF, self._store(func))

    def load_module(self, name):
        path = files.resolve(self.workdir, name, must_exist=True)
        from ..runtime import module
        return P.Ref(P.T_MODULE_REF, self._store(module.load_module(path)))

    def upload(self, name, offset, data, final):
        files.write_chunk(self.workdir, name, offset, data)
        return None

    def download(self, name, offset, max_bytes):
        return files.read_chunk(self.workdir, name, offset, min(max_bytes, P.CHUNK))

    def remove(self, name):
        files.remove(self.workdir, name)

    def listdir(self):
        return files.listdir(self.workdir)

    def empty(self, shape, dtype, device):
        nd = _runtime()
        dev = self.from_wire(device)
        if dev.device_type == 1 and not _numpy_usable():
            return self.to_wire(_host_array(shape, dtype, dev))
        return self.to_wire(nd.empty(tuple(shape), dtype, dev))

    def copy_in(self, arr_ref, offset, data):
        self._write(self._get(arr_ref, "array"), offset, data)

    def copy_out(self, arr_ref, offset, nbytes):
        arr = self._get(arr_ref, "array")
        _check_range(arr, offset, nbytes)
        if arr.device.device_type == 1:
            # Zero-copy: the reply is sent straight from the array's memory.
            buf = (ctypes.c_char * nbytes).from_address(arr._address() + offset)
            return memoryview(buf).cast("B")
        api = _device_api(arr)
        if hasattr(api, "read_bytes"):  # only the requested chunk leaves the device
            return memoryview(api.read_bytes(arr._address(), offset, nbytes, arr.device.device_id))
        return memoryview(arr.numpy()).cast("B")[offset:offset + nbytes]

    def _write(self, arr, offset, data):
        data = memoryview(data).cast("B")
        _check_range(arr, offset, data.nbytes)
        if arr.device.device_type == 1:
            ctypes.memmove(arr._address() + offset, (ctypes.c_char * data.nbytes).from_buffer_copy(data)
                           if data.readonly else (ctypes.c_char * data.nbytes).from_buffer(data),
                           data.nbytes)
            return
        api = _device_api(arr)
        if hasattr(api, "write_bytes"):  # the chunk goes straight to its place on the device
            api.write_bytes(arr._address(), offset, data, arr.device.device_id)
            return
        host = arr.numpy()
        memoryview(host).cast("B")[offset:offset + data.nbytes] = data
        arr.copyfrom(host)

    def time_eval(self, module_ref, name, device, number, repeat, min_repeat_ms, *args):
        mod = self._get(module_ref, "module")
        from ..runtime import evaluator
        timer = evaluator.time_evaluator(mod, name, self.from_wire(device), number=number,
                                         repeat=repeat, min_repeat_ms=min_repeat_ms)
        res = timer(*[self.from_wire(a) for a in args])
        return [float(r) for r in res.results]

    def module_info(self, module_ref):
        mod = self._get(module_ref, "module")
        return {"entry_name": getattr(mod, "entry_name", "") or "", "type_key": type(mod).__name__}

    def device_exists(self, device):
        return int(bool(self.from_wire(device).exist))

    def sync(self, device):
        self.from_wire(device).sync()


def _is_set_input(func) -> bool:
    """Whether ``func`` is a graph executor's set_input (its inputs can receive data in place)."""
    return getattr(func, "__name__", "") == "set_input" and hasattr(getattr(func, "__self__", None), "get_input")


def _numpy_usable() -> bool:
    """False on a device whose numpy is a stand-in: document 001 hides a missing numpy behind a
    numpy.py of empty classes, which the runtime imports but cannot compute with."""
    try:
        import numpy
    except ImportError:
        return False
    return all(hasattr(numpy, name) for name in ("empty", "frombuffer", "integer", "ascontiguousarray"))


_ALIGN = 128  # as the runtime's allocations: kernels may use aligned vector loads


def _host_array(shape, dtype: str, dev):
    """A CPU array made without numpy: the runtime's NDArray over a ctypes buffer. Uploading,
    loading a .so, calling its kernels on such arrays and reading them back need nothing else."""
    from ..runtime.dlpack import DTYPES
    from ..runtime.ndarray import NDArray
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported by kiln arrays; use one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"shape {shape!r} must be a list of non-negative ints")
    nbytes = 1
    for d in shape:
        nbytes *= d
    nbytes = nbytes * DTYPES[dtype][1] // 8
    buf = (ctypes.c_char * (nbytes + _ALIGN))()
    address = ctypes.addressof(buf)
    return NDArray(address + (-address) % _ALIGN, tuple(shape), dtype, dev, buf)


def _walk(value):
    """Every value inside ``value`` (lists and dicts opened), depth first."""
    yield value
    if type(value) is list:
        for v in value:
            yield from _walk(v)
    elif type(value) is dict:
        for v in value.values():
            yield from _walk(v)


def _fill_streams(value, done: dict):
    """``value`` with each streamed bytes value and each tensor with streamed data replaced by
    what _receive_streams made of it."""
    t = type(value)
    if t is P.Stream:
        return done[id(value)]
    if t is P.Tensor and type(value.data) is P.Stream:
        return done[id(value.data)]
    if t is list:
        return [_fill_streams(v, done) for v in value]
    if t is dict:
        return {k: _fill_streams(v, done) for k, v in value.items()}
    return value


def _device_api(arr):
    from ..runtime import devices
    return devices.get_api(arr.device.device_type)


def _check_range(arr, offset, nbytes):
    if offset < 0 or nbytes < 0 or offset + nbytes > arr.nbytes:
        raise ValueError(f"byte range [{offset}, {offset + nbytes}) is outside the array's "
                         f"{arr.nbytes} bytes")


def _runtime_global(name):
    """A function the runtime registered globally, if the runtime offers such a table."""
    try:
        from ..runtime import registry  # type: ignore[attr-defined]
    except ImportError:
        return None
    getter = getattr(registry, "get_global_func", None)
    return getter(name, allow_missing=True) if getter else None
