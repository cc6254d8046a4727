"""NDArray: an n-dimensional array on a device, laid out as the kernels expect.

Each array owns a ctypes ``DLTensor`` describing it (compact row-major, 64-byte aligned when
kiln allocated it), so passing it to a kernel is one pointer: ``_handle``.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from . import devices
from .device import CPU, CUDA, Device, cpu, device
from .dlpack import DTYPES, DLTensor, dtype_from_dl, dtype_name, export_capsule, import_capsule


class NDArray:
    """An array on a device. Create one with ``tvm.nd.array`` or ``tvm.nd.empty``.

    >>> a = tvm.nd.array(np.arange(4, dtype="float32"))
    >>> a.shape, a.dtype, a.numpy()
    ((4,), 'float32', array([0., 1., 2., 3.], dtype=float32))
    """

    __slots__ = ("shape", "dtype", "device", "_owner", "_tensor", "_shape_arr", "_handle",
                 "_nbytes", "_sig", "__weakref__")

    def __init__(self, data: int, shape: tuple[int, ...], dtype: str, dev: Device, owner,
                 byte_offset: int = 0):
        """Wrap memory at ``data`` (kept alive by ``owner``). Prefer ``tvm.nd.empty``."""
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.device = dev
        self._owner = owner
        code, bits = DTYPES[dtype]
        self._nbytes = math.prod(self.shape) * bits // 8
        self._shape_arr = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        t = DLTensor()
        t.data = data
        t.device.device_type, t.device.device_id = dev.device_type, dev.device_id
        t.ndim = len(self.shape)
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
        t.shape = ctypes.cast(self._shape_arr, ctypes.POINTER(ctypes.c_int64))
        t.strides = None  # compact row-major, as docs/abi.md lets kernels assume
        t.byte_offset = byte_offset
        self._tensor = t
        self._handle = ctypes.addressof(t)
        # What a kernel call checks first, compared in one step (see runtime/function.py).
        self._sig = (dtype, len(self.shape), dev.device_type)

    # -- properties ------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def handle(self):
        """``DLTensor*`` as a ctypes pointer, for passing to foreign code."""
        return ctypes.pointer(self._tensor)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def _address(self) -> int:
        return self._tensor.data + self._tensor.byte_offset

    # -- copies ----------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A numpy copy of the contents."""
        out = np.empty(self.shape, dtype=self.dtype)
        devices.get_api(self.device.device_type).copy_to_host(out, self._address(),
                                                              self.device.device_id)
        return out

    asnumpy = numpy

    def copyfrom(self, source) -> NDArray:
        """Overwrite the contents with ``source`` (numpy array, NDArray or nested list)."""
        if isinstance(source, NDArray):
            if source.device == self.device and self.device.device_type != CPU:
                return self._copy_on_device(source)
            source = source.numpy()
        elif not isinstance(source, np.ndarray):
            source = np.asarray(source, dtype=self.dtype)
        if source.shape != self.shape:
            raise ValueError(f"copyfrom: source has shape {source.shape}, this array has "
                             f"shape {self.shape}; reshape the source first")
        if source.dtype != np.dtype(self.dtype):
            raise ValueError(f"copyfrom: source has dtype {source.dtype}, this array has dtype "
                             f"{self.dtype}; convert with source.astype('{self.dtype}')")
        source = np.ascontiguousarray(source)
        devices.get_api(self.device.device_type).copy_from_host(self._address(), source,
                                                                self.device.device_id)
        return self

    def _copy_on_device(self, source: NDArray) -> NDArray:
        """A copy that never leaves the device (both arrays on self.device)."""
        if source.shape != self.shape or source.dtype != self.dtype:
            raise ValueError(f"copyfrom: source is {source.dtype}{source.shape}, this array is "
                             f"{self.dtype}{self.shape}; they must match")
        api = devices.get_api(self.device.device_type)
        api.copy_between(self._address(), source._address(), self._nbytes, self.device.device_id)
        return self

    def copyto(self, target) -> NDArray:
        """Copy into ``target``: an NDArray of the same shape and dtype, or a Device (new array)."""
        if isinstance(target, Device):
            return array(self.numpy(), target)
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        if hasattr(target, "copyfrom"):  # a remote array
            target.copyfrom(self.numpy())
            return target
        raise TypeError(f"copyto: target must be a Device or an NDArray, got {type(target).__name__}")

    def __setitem__(self, index, value) -> None:
        if not (isinstance(index, slice) and index == slice(None)):
            raise ValueError("NDArray only supports whole-array assignment (arr[:] = value); "
                             "use .numpy() to work on parts of it")
        if isinstance(value, (int, float, bool)):
            value = np.full(self.shape, value, dtype=self.dtype)
        self.copyfrom(value)

    # -- DLPack ----------------------------------------------------------------------------
    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if self.device.device_type == CUDA and self.device.session is None and not copy and (
                dl_device is None or tuple(dl_device)[0] == CUDA):
            # Zero-copy to torch/cupy: the same primary context. Our work runs on the legacy
            # default stream; finish it so a consumer on any stream sees the results.
            self.device.sync()
            versioned = max_version is not None and tuple(max_version) >= (1, 0)
            return export_capsule(self._tensor, self, versioned)
        if self.device.device_type != CPU:
            if dl_device is not None and tuple(dl_device)[0] == CPU and copy is not False:
                return array(self.numpy()).__dlpack__(max_version=max_version)
            raise BufferError(
                f"this array lives on {self.device} (device memory a host library cannot "
                "read); DLPack consumers such as numpy need host memory: use arr.numpy(), "
                "or copy it with arr.copyto(tvm.cpu()) first")
        if copy:
            return array(self.numpy(), self.device).__dlpack__()
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return export_capsule(self._tensor, self, versioned)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device.device_type, self.device.device_id)

    def __repr__(self) -> str:
        body = str(self.numpy()) if self.device.device_type == CPU else "..."
        return f"<kiln.NDArray shape={self.shape}, dtype={self.dtype}, {self.device}>\n{body}"


def empty(shape, dtype="float32", dev: Device | None = None, mem_scope: str | None = None) -> NDArray:
    """An uninitialized array: ``tvm.nd.empty((2, 3), "int32", tvm.cpu())``.

    ``mem_scope="global.texture"`` (or ``-nhwc`` / ``-weight``) on an OpenCL device makes an RGBA
    image holding a 5-D tensor whose innermost dimension is 4 (docs/adreno.md).
    """
    dev = cpu(0) if dev is None else dev
    if dev.session is not None:
        return dev.session.nd_empty(shape, dtype, dev)
    shape = _check_shape(shape)
    dtype = dtype_name(dtype)
    api = devices.get_api(dev.device_type)
    if mem_scope not in (None, "global"):
        if not hasattr(api, "alloc_texture"):
            raise ValueError(f"mem_scope {mem_scope!r}: {dev} has no textures (OpenCL devices do)")
        data, owner = api.alloc_texture(shape, dtype, mem_scope, dev.device_id)
        return NDArray(data, shape, dtype, dev, owner)
    nbytes = math.prod(shape) * DTYPES[dtype][1] // 8
    data, owner = api.alloc(nbytes, dev.device_id)
    return NDArray(data, shape, dtype, dev, owner)


def array(arr, dev: Device | None = None) -> NDArray:
    """A copy of ``arr`` (numpy array, NDArray, list or scalar) on ``dev`` (default cpu(0))."""
    dev = cpu(0) if dev is None else dev
    if isinstance(arr, NDArray):
        arr = arr.numpy()
    elif not isinstance(arr, np.ndarray):
        arr = np.asarray(arr)
    if dev.session is not None:
        return dev.session.nd_array(arr, dev)
    out = empty(arr.shape, arr.dtype, dev)
    out.copyfrom(arr)
    return out


def from_dlpack(obj) -> NDArray:
    """An NDArray sharing memory with ``obj`` (numpy array, torch tensor, ...): no copy."""
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"from_dlpack: {type(obj).__name__} has no __dlpack__ method")
    try:
        capsule = obj.__dlpack__(max_version=(1, 0))
    except TypeError:  # producers that predate DLPack 1.0 take no keyword
        capsule = obj.__dlpack__()
    imported = import_capsule(capsule)
    t = imported.tensor
    if imported.read_only:
        raise ValueError("from_dlpack: the tensor is read-only and kernels may write to it; "
                         "make it writable or copy it with tvm.nd.array(...)")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    dtype = dtype_from_dl(t.dtype)
    if t.strides:
        compact = _compact_strides(shape)
        strides = tuple(t.strides[i] for i in range(t.ndim))
        if any(s != c for s, c, d in zip(strides, compact, shape) if d != 1):
            raise ValueError(f"from_dlpack: the tensor has strides {strides} (in elements) but "
                             f"kernels need compact row-major {compact}; make it contiguous "
                             "first (np.ascontiguousarray / .contiguous())")
    if t.device.device_type != CPU:
        devices.get_api(t.device.device_type)  # raises: not available in this build
    dev = device(t.device.device_type, t.device.device_id)
    return NDArray(t.data or 0, shape, dtype, dev, imported, byte_offset=t.byte_offset)


def _compact_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def _check_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ValueError(f"shape must be a tuple of non-negative ints, got {shape!r}") from None
    if any(d < 0 for d in shape):
        raise ValueError(f"shape must be a tuple of non-negative ints, got {shape!r}")
    return shape
