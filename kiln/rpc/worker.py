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
                op, args = ch.recv_message()
            except P.ConnectionLost:
                return
            except P.ProtocolError as e:
                # The stream can no longer be trusted to be in sync: report and end the session.
                self._reply_error(e)
                return
            if op == P.OP_FREE:  # no reply: lets the client free objects from __del__ lazily
                for obj_id in args if isinstance(args, list) else ():
                    self.objects.pop(obj_id, None)
                continue
            if op == P.OP_SHUTDOWN:
                ch.send(P.OP_RETURN, None)
                return
            handler = self.handlers.get(op)
            try:
                if handler is None:
                    raise P.ProtocolError(f"unknown opcode {op}")
                if not isinstance(args, list):
                    raise P.ProtocolError(f"opcode {op} needs a list of arguments")
                result = handler(*args)
            except Exception as e:  # noqa: BLE001 - every user error goes back to the client
                self._reply_error(e)
                continue
            try:
                ch.send(P.OP_RETURN, result, self.to_wire)
            except P.ConnectionLost:
                return
            except Exception as e:  # noqa: BLE001 - e.g. a return value that cannot be sent
                self._reply_error(e)

    def _reply_error(self, e: BaseException) -> None:
        tb = traceback.format_exc(limit=8) if not isinstance(e, P.ProtocolError) else ""
        try:
            self.ch.send(P.OP_ERROR, {"type": type(e).__name__, "message": str(e), "traceback": tb})
        except P.RPCError:
            pass

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
        arr = nd.empty(tuple(shape), dtype, self.from_wire(device))
        return self.to_wire(arr)

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
