"""Calling compiled kernels: check arguments against the module metadata, pack, call.

The kernel does not check what it receives (docs/abi.md), so every argument is checked here,
and a mismatch raises ValueError naming the function, the argument, what was expected and
what was given. Everything that does not depend on the call's arguments (type codes, argument
buffers, bound C function) is computed once per function to keep a call at a few µs.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..errors import KilnError
from .ndarray import NDArray

KILN_INT, KILN_FLOAT, KILN_HANDLE, KILN_DLTENSOR = 0, 2, 3, 7

_INT_RANGE = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1),
              "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1),
              "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
              "uint64": (0, 2**64 - 1), "bool": (0, 1)}

KernelType = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)


class ArgSpec:
    """One argument of a kernel, from the metadata's ``args`` list."""

    __slots__ = ("name", "kind", "dtype", "shape", "code", "symbolic", "int_range", "sig",
                 "fixed", "syms")

    def __init__(self, func: str, entry: dict):
        self.name = entry.get("name", "?")
        self.kind = entry.get("kind")
        self.dtype = entry.get("dtype", "")
        self.shape = tuple(entry.get("shape") or ())
        self.symbolic = any(isinstance(d, str) for d in self.shape)
        self.int_range = _INT_RANGE.get(self.dtype)
        # Precomputed for the call path: compare with NDArray._sig in one step, then the dims.
        self.fixed = tuple((i, d) for i, d in enumerate(self.shape) if not isinstance(d, str))
        self.syms = tuple((i, d) for i, d in enumerate(self.shape) if isinstance(d, str))
        self.sig = (self.dtype, len(self.shape), int(entry.get("device_type", 1)))
        if self.kind == "tensor":
            self.code = KILN_DLTENSOR
        elif self.kind == "handle":
            self.code = KILN_HANDLE
        elif self.kind == "scalar":
            self.code = KILN_FLOAT if self.dtype.startswith("float") else KILN_INT
        else:
            raise KilnError(f"module metadata: {func} argument {self.name!r} has unknown kind "
                            f"{self.kind!r}; this runtime knows tensor, scalar, handle "
                            "(the module may need a newer kiln)")

    def shape_text(self) -> str:
        return "(" + ", ".join(str(d) for d in self.shape) + ("," if len(self.shape) == 1 else "") + ")"


class PackedFunc:
    """A callable kernel of a loaded module: ``f(a, b, 3)``. Returns None; raises on errors."""

    def __init__(self, name: str, address: int, meta: dict, device_type: int, last_error,
                 module=None):
        self.name = name
        self.address = address
        self.module = module  # keeps the library loaded while the function is alive
        self.args = [ArgSpec(name, dict(a, device_type=device_type)) for a in meta.get("args", [])]
        self._cfunc = KernelType(address)
        self._n = len(self.args)
        self._device_type = device_type
        self._last_error = last_error
        self._codes = (ctypes.c_int32 * max(self._n, 1))(*[a.code for a in self.args])
        self._codes_ptr = ctypes.c_void_p(ctypes.addressof(self._codes))
        self._pool: list = []  # free argument buffers; list pop/append are atomic (threads)

    def _new_buffer(self):
        ints = (ctypes.c_int64 * max(self._n, 1))()
        floats = (ctypes.c_double * max(self._n, 1)).from_buffer(ints)  # KilnValue's other view
        return ints, floats, ctypes.c_void_p(ctypes.addressof(ints))

    def __call__(self, *args) -> None:
        buf = self._pool.pop() if self._pool else self._new_buffer()
        self._pack(args, buf)  # on a bad argument the buffer is simply dropped
        rc = self._cfunc(buf[2], self._codes_ptr, self._n)
        self._pool.append(buf)
        if rc:
            self._raise(rc)

    def _raise(self, rc: int):
        if self._device_type != 1:  # a kernel launch failed in Python: raise what it raised
            from .device_code import take_error
            err = take_error()
            if err is not None:
                raise err
        message = self._last_error() or f"returned {rc} without a message"
        if not message.startswith(self.name + ":"):
            message = f"{self.name}: {message}"
        raise KilnError(message)

    def prepare(self, *args):
        """Check and pack ``args`` once; return ``(cfunc, args_ptr, codes_ptr, n, keep)`` for a
        tight timing loop. ``keep`` must stay alive while the pointers are used."""
        buf = self._new_buffer()
        self._pack(args, buf)
        return self._cfunc, buf[2], self._codes_ptr, self._n, (buf, args)

    # -- checking and packing ------------------------------------------------------------------
    def _pack(self, args, buf) -> None:
        if len(args) != self._n:
            names = ", ".join(a.name for a in self.args)
            raise TypeError(f"{self.name} takes {self._n} arguments ({names}), got {len(args)}")
        ints, floats, _ = buf
        dims = {}
        i = 0
        for spec, value in zip(self.args, args):
            code = spec.code
            if code == KILN_DLTENSOR:
                if not isinstance(value, NDArray):
                    self._bad_tensor(spec, value)
                if value._sig != spec.sig:
                    self._bad_layout(spec, value)
                shape = value.shape
                if not spec.symbolic:
                    if shape != spec.shape:
                        self._mismatch(spec, f"has shape {_fmt(shape)}, expected {spec.shape_text()}")
                else:
                    for axis, want in spec.fixed:
                        if shape[axis] != want:
                            self._mismatch(spec, f"has shape {_fmt(shape)}, expected {spec.shape_text()}")
                    for axis, sym in spec.syms:
                        if dims.setdefault(sym, shape[axis]) != shape[axis]:
                            self._inconsistent(spec, shape, sym, dims[sym], args)
                ints[i] = value._handle
            elif code == KILN_FLOAT:
                if not isinstance(value, (float, int, np.floating, np.integer)) or isinstance(value, bool):
                    self._mismatch(spec, f"must be a number ({spec.dtype}), got {type(value).__name__}")
                floats[i] = value
            elif code == KILN_INT:
                if not isinstance(value, (int, np.integer, np.bool_)):
                    self._mismatch(spec, f"must be an int ({spec.dtype}), got {type(value).__name__}")
                lo, hi = spec.int_range or (-2**63, 2**63 - 1)
                if not lo <= value <= hi:
                    self._mismatch(spec, f"= {value} does not fit in {spec.dtype} [{lo}, {hi}]")
                ints[i] = int(value) if value <= 2**63 - 1 else int(value) - 2**64
            else:  # KILN_HANDLE
                ints[i] = _handle_value(self, spec, value)
            i += 1

    def _inconsistent(self, spec: ArgSpec, shape, sym: str, bound: int, args) -> None:
        # Find which earlier argument fixed the symbol, for the message.
        source = next(a.name for a, v in zip(self.args, args)
                      if a.code == KILN_DLTENSOR and any(s == sym and v.shape[ax] == bound
                                                         for ax, s in a.syms))
        self._mismatch(spec, f"has shape {_fmt(shape)}, expected {spec.shape_text()} "
                       f"with {sym}={bound} (set by argument '{source}')")

    def _bad_tensor(self, spec: ArgSpec, value):
        if isinstance(value, np.ndarray):
            self._mismatch(spec, "is a numpy.ndarray; wrap it with tvm.nd.array(value, dev) "
                           "(kernels take kiln NDArrays)")
        self._mismatch(spec, f"must be an NDArray ({spec.dtype}{spec.shape_text()}), "
                       f"got {type(value).__name__}")

    def _bad_layout(self, spec: ArgSpec, value: NDArray):
        if value.dtype != spec.dtype:
            self._mismatch(spec, f"has dtype {value.dtype}, expected {spec.dtype}")
        if len(value.shape) != len(spec.shape):
            self._mismatch(spec, f"has {len(value.shape)} dimensions (shape {_fmt(value.shape)}), "
                           f"expected {len(spec.shape)} (shape {spec.shape_text()})")
        from .device import Device
        want = Device(self._device_type, 0).type_name
        maker = {1: "cpu", 2: "cuda", 4: "cl"}.get(self._device_type, f"device('{want}', ")
        self._mismatch(spec, f"is on {value.device}, expected a {want} device (this function "
                       f"runs on {want}): copy it with tvm.nd.array(x, tvm.{maker}(0))")

    def _mismatch(self, spec: ArgSpec, text: str):
        raise ValueError(f"{self.name}: argument '{spec.name}' {text}")

    def __repr__(self) -> str:
        sig = ", ".join(f"{a.name}: {a.dtype}{a.shape_text() if a.kind == 'tensor' else ''}"
                        for a in self.args)
        return f"<kiln.PackedFunc {self.name}({sig})>"


class _Call(ctypes.Structure):
    """One entry of __kiln_run_list's array (docs/abi.md)."""

    _fields_ = [("function", ctypes.c_void_p), ("args", ctypes.c_void_p),
                ("codes", ctypes.c_void_p), ("num_args", ctypes.c_int32)]


RunListType = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p)


class CallList:
    """Prepared calls of CPU kernels run in order by one C call (a module's ``__kiln_run_list``),
    so a model of 50 kernels pays one ctypes crossing per run instead of 50 (about 1 µs each).

    ``calls``: (function, prepared) pairs, ``prepared`` as ``PackedFunc.prepare`` returns it.
    Calling returns None, or ``(index, rc)`` of the first call that failed."""

    def __init__(self, runner_address: int, calls: list):
        self._runner = RunListType(runner_address)
        self._calls = (_Call * len(calls))(*[
            _Call(func.address, args.value, codes.value, n) for func, (_, args, codes, n, _) in calls])
        self._count = len(calls)
        self._keep = [prepared for _, prepared in calls]  # the argument buffers the entries point into
        self._failed = ctypes.c_int32(0)
        self._failed_ptr = ctypes.byref(self._failed)

    def __len__(self) -> int:
        return self._count

    def __call__(self):
        rc = self._runner(self._calls, self._count, self._failed_ptr)
        return (self._failed.value, rc) if rc else None


def run_list_address(func) -> int | None:
    """The ``__kiln_run_list`` that can call ``func`` from C: only for CPU kernels of a native
    library that exports it (libraries built before it existed, offloaded subgraphs and GPU
    launches are called from Python)."""
    if not isinstance(func, PackedFunc) or func._device_type != 1:
        return None
    return getattr(func.module, "run_list_address", None)


def _handle_value(func: PackedFunc, spec: ArgSpec, value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, (ctypes.c_void_p, ctypes._Pointer)):
        return ctypes.cast(value, ctypes.c_void_p).value or 0
    func._mismatch(spec, f"must be a pointer (int or ctypes pointer), got {type(value).__name__}")


def _fmt(shape) -> str:
    return str(tuple(shape))
