"""OpenCL devices through pyopencl: memory, copies, and the kernels of OpenCL modules.

Device ``i`` is the i-th device of the first OpenCL platform that has any (or of the platform
whose name contains ``KILN_OPENCL_PLATFORM``). Each device gets one context and one in-order
queue with profiling enabled, so every kernel launch yields an event ``time_evaluator`` can read.
An array's data is its ``cl_mem`` handle (``Buffer.int_ptr``); the API keeps a table from handle
to buffer so kernels can be launched with arrays the host code only knows by handle.

pyopencl is imported on first use: the runtime (and ``tvm.cl(0).exist``) works without it.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ...errors import KilnError
from . import made_once
from .kernel_args import check_launch, launch_device, scalar_casts

_INSTALL = "pip install 'kiln[opencl]' (pyopencl) and an OpenCL driver (apt-get install pocl-opencl-icd)"


def _cl():
    try:
        import pyopencl
    except ImportError:
        raise KilnError(f"OpenCL needs pyopencl: {_INSTALL}") from None
    return pyopencl


class _Allocation:
    """Owner of one buffer (NDArray._owner); its handle leaves the table when it is freed."""

    __slots__ = ("buffer", "device_id", "image", "__weakref__")

    def __init__(self, buffer, device_id: int, image=None):
        self.buffer = buffer
        self.device_id = device_id
        self.image = image  # (width, height) of an RGBA image (texture scopes), None for buffers


class OpenCLDeviceAPI:
    def __init__(self):
        self._lock = threading.Lock()
        self._devices = None       # list of pyopencl Device, found on first use
        self._contexts: dict[int, object] = {}
        self._queues: dict[int, object] = {}
        # cl_mem handle -> weakref(_Allocation); entries die with their arrays.
        self._buffers: dict[int, weakref.ref] = {}

    # -- devices -----------------------------------------------------------------------------
    def devices(self) -> list:
        if self._devices is None:
            self._devices = _find_devices()
        return self._devices

    def exist(self, device_id: int) -> bool:
        try:
            return 0 <= device_id < len(self.devices())
        except KilnError:  # no pyopencl: no OpenCL devices
            return False

    def device(self, device_id: int):
        devices = self.devices()
        if not 0 <= device_id < len(devices):
            raise KilnError(f"opencl({device_id}) does not exist: this machine has "
                            f"{len(devices)} OpenCL device(s). "
                            + ("" if devices else f"Install one: {_INSTALL}; check with 'clinfo'"))
        return devices[device_id]

    def context(self, device_id: int = 0):
        return made_once(self._contexts, self._lock, device_id, lambda: _cl().Context([self.device(device_id)]))

    def queue(self, device_id: int = 0):
        q = self._queues.get(device_id)
        if q is not None:
            return q
        cl, ctx = _cl(), self.context(device_id)  # before the lock: context() takes it too
        return made_once(self._queues, self._lock, device_id,
                         lambda: cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE))

    def attribute(self, device_id: int, name: str):
        """A property of device ``device_id`` under the name TVM's Device uses for it."""
        if name == "exist":
            return self.exist(device_id)
        d = self.device(device_id)
        if name == "max_threads_per_block":
            return int(d.max_work_group_size)
        if name == "max_shared_memory_per_block":
            return int(d.local_mem_size)
        if name == "warp_size":
            # OpenCL promises no lockstep width; 1 is the only size every device honours.
            return 1
        if name == "max_thread_dimensions":
            return tuple(int(x) for x in d.max_work_item_sizes)
        if name == "multi_processor_count":
            return int(d.max_compute_units)
        if name == "device_name":
            return str(d.name).strip()
        if name == "compute_version":
            # "OpenCL 3.0 <vendor text>" -> "3.0"
            parts = str(d.version).split()
            return parts[1] if len(parts) > 1 else str(d.version)
        if name == "max_clock_rate":
            return int(d.max_clock_frequency) * 1000  # kHz, as TVM reports it
        if name == "max_image2d":
            return (int(d.image2d_max_width), int(d.image2d_max_height))
        if name == "image_support":
            return bool(d.image_support)
        if name == "driver_version":
            return str(d.driver_version)
        raise AttributeError(f"OpenCL devices have no attribute {name!r}")

    # -- memory ------------------------------------------------------------------------------
    def alloc(self, nbytes: int, device_id: int = 0) -> tuple[int, _Allocation]:
        cl = _cl()
        # OpenCL refuses zero-sized buffers; an empty array still needs a valid handle.
        buf = cl.Buffer(self.context(device_id), cl.mem_flags.READ_WRITE, max(int(nbytes), 1))
        owner = _Allocation(buf, device_id)
        handle = buf.int_ptr
        self._buffers[handle] = weakref.ref(owner, lambda _, h=handle: self._buffers.pop(h, None))
        return handle, owner

    def alloc_image(self, width: int, height: int, dtype: str = "float32",
                    device_id: int = 0) -> tuple[int, _Allocation]:
        """An RGBA image of width x height texels (CL_FLOAT / CL_HALF_FLOAT) for a texture tensor.

        The limit is the device's own (CL_DEVICE_IMAGE2D_MAX_WIDTH / HEIGHT), asked every time.
        """
        cl = _cl()
        if not self.attribute(device_id, "image_support"):
            raise KilnError(f"opencl({device_id}) ({self.attribute(device_id, 'device_name')}) has no image "
                            "support; build for plain 'opencl' (buffers) instead of texture scopes")
        max_w, max_h = self.attribute(device_id, "max_image2d")
        if not (0 < width <= max_w and 0 < height <= max_h):
            raise KilnError(f"a texture of {width} x {height} texels does not fit opencl({device_id})'s "
                            f"images (at most {max_w} x {max_h}): build with -texture_spatial_limit="
                            f"{min(max_w, max_h)} so the compiler folds the tensor differently, or keep "
                            "it in scope 'global'")
        kind = cl.channel_type.HALF_FLOAT if dtype == "float16" else cl.channel_type.FLOAT
        fmt = cl.ImageFormat(cl.channel_order.RGBA, kind)
        make = getattr(cl, "create_image", cl.Image)  # newer pyopencl deprecates the Image constructor
        img = make(self.context(device_id), cl.mem_flags.READ_WRITE, fmt, shape=(int(width), int(height)))
        owner = _Allocation(img, device_id, (int(width), int(height)))
        handle = img.int_ptr
        self._buffers[handle] = weakref.ref(owner, lambda _, h=handle: self._buffers.pop(h, None))
        return handle, owner

    def alloc_texture(self, shape, dtype: str, scope: str, device_id: int = 0,
                      limit: int | None = None) -> tuple[int, _Allocation]:
        """An image for a 5-D tensor (innermost 4) in texture ``scope``, folded as the compiler
        folds it (kiln/tir/transform/texture.py): the first fold within this device's limits and
        ``limit`` (the library's -texture_spatial_limit, which the kernels were folded within)."""
        if scope not in _TEXTURE_SPLITS:
            raise ValueError(f"unknown mem_scope {scope!r}: use global, {', '.join(_TEXTURE_SPLITS)}")
        if len(shape) != 5 or shape[4] != 4 or dtype not in ("float32", "float16"):
            raise ValueError(f"mem_scope {scope} holds float32/float16 5-D tensors whose innermost dimension "
                             f"is 4 (NCHW4c ...), got {dtype}{tuple(shape)}")
        max_w, max_h = self.attribute(device_id, "max_image2d")
        if limit:
            max_w, max_h = min(max_w, int(limit)), min(max_h, int(limit))
        splits = [_TEXTURE_SPLITS[scope]] + [k for k in (3, 2, 1, 4) if k != _TEXTURE_SPLITS[scope]]
        fits = [(_prod(shape[k:4]), _prod(shape[:k])) for k in splits]
        width, height = next(((w, h) for w, h in fits if w <= max_w and h <= max_h), fits[0])
        return self.alloc_image(width, height, dtype, device_id)

    def image_of(self, handle: int):
        """(width, height) when ``handle`` is an image from alloc_image, else None."""
        ref = self._buffers.get(handle)
        owner = ref() if ref is not None else None
        return owner.image if owner is not None else None

    def buffer(self, handle: int):
        """The pyopencl Buffer behind a handle from ``alloc`` (or any live cl_mem)."""
        ref = self._buffers.get(handle)
        owner = ref() if ref is not None else None
        if owner is not None:
            return owner.buffer
        if not handle:
            raise KilnError("a NULL buffer was passed to an OpenCL kernel")
        return _cl().Buffer.from_int_ptr(handle, retain=True)

    def device_of(self, handle: int) -> int | None:
        ref = self._buffers.get(handle)
        owner = ref() if ref is not None else None
        return owner.device_id if owner is not None else None

    def copy_from_host(self, dst: int, src: np.ndarray, device_id: int = 0) -> None:
        image = self.image_of(dst)
        if image is not None:  # texels in row-major order are the tensor's bytes
            _cl().enqueue_copy(self.queue(device_id), self.buffer(dst), np.ascontiguousarray(src),
                               origin=(0, 0), region=image, is_blocking=True)
            return
        if src.nbytes:
            _cl().enqueue_copy(self.queue(device_id), self.buffer(dst), src, is_blocking=True)

    def copy_to_host(self, dst: np.ndarray, src: int, device_id: int = 0) -> None:
        image = self.image_of(src)
        if image is not None:
            _cl().enqueue_copy(self.queue(device_id), dst, self.buffer(src), origin=(0, 0), region=image,
                               is_blocking=True)
            return
        if dst.nbytes:
            _cl().enqueue_copy(self.queue(device_id), dst, self.buffer(src), is_blocking=True)

    def write_bytes(self, dst: int, offset: int, data, device_id: int = 0) -> None:
        """Bytes into part of a buffer (RPC uploads arrive in chunks)."""
        view = memoryview(data).cast("B")
        if view.nbytes:
            _cl().enqueue_copy(self.queue(device_id), self.buffer(dst), np.frombuffer(view, np.uint8),
                               dst_offset=int(offset), is_blocking=True)

    def read_bytes(self, src: int, offset: int, nbytes: int, device_id: int = 0) -> np.ndarray:
        """Part of a buffer, as uint8 host memory."""
        out = np.empty(int(nbytes), np.uint8)
        if nbytes:
            _cl().enqueue_copy(self.queue(device_id), out, self.buffer(src), src_offset=int(offset),
                               is_blocking=True)
        return out

    def copy_between(self, dst: int, src: int, nbytes: int, device_id: int = 0) -> None:
        """Copy ``nbytes`` from one buffer (or image) to another of the same device, on the device."""
        dst_img, src_img = self.image_of(dst), self.image_of(src)
        if dst_img is not None or src_img is not None:  # image <-> buffer / image (texture scopes)
            cl, q = _cl(), self.queue(device_id)
            if dst_img is not None and src_img is not None:
                cl.enqueue_copy(q, self.buffer(dst), self.buffer(src), src_origin=(0, 0), dest_origin=(0, 0),
                                region=dst_img)
            elif dst_img is not None:
                cl.enqueue_copy(q, self.buffer(dst), self.buffer(src), offset=0, origin=(0, 0), region=dst_img)
            else:
                cl.enqueue_copy(q, self.buffer(dst), self.buffer(src), origin=(0, 0), region=src_img, offset=0)
            return
        if nbytes:
            _cl().enqueue_copy(self.queue(device_id), self.buffer(dst), self.buffer(src),
                               byte_count=int(nbytes))

    def sync(self, device_id: int = 0) -> None:
        if device_id in self._queues:
            self._queues[device_id].finish()


# Texture scope -> leading dimensions folded into the image height (kiln/tir/transform/texture.py).
_TEXTURE_SPLITS = {"global.texture": 3, "global.texture-nhwc": 2, "global.texture-weight": 1}


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _find_devices() -> list:
    from ... import config
    cl = _cl()
    wanted = config.get().opencl_platform.lower()
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # the ICD loader found no platform at all
        return []
    if wanted:
        chosen = [p for p in platforms if wanted in p.name.lower()]
        if not chosen:
            names = ", ".join(repr(p.name) for p in platforms) or "none"
            raise KilnError(f"KILN_OPENCL_PLATFORM={wanted!r} matches no OpenCL platform; "
                            f"platforms here: {names}")
        platforms = chosen
    for p in platforms:
        try:
            found = p.get_devices()
        except cl.Error:  # a platform with no devices raises CL_DEVICE_NOT_FOUND
            continue
        if found:
            return list(found)
    return []


API = OpenCLDeviceAPI()


# -- device modules -----------------------------------------------------------------------------
_SCALARS = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
            "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
            "bool": np.int8, "float16": np.float16, "float32": np.float32, "float64": np.float64}


class OpenCLModule:
    """The OpenCL half of a GPU module: kernel source plus how to call each kernel.

    ``kernels[i]`` is ``{"name", "params": [{"name", "kind": "buffer"|"scalar", "dtype"}],
    "thread_tags"}`` (docs/abi.md, "GPU modules"). The program is built once per device
    context, on the first launch there, and kept.
    """

    type_key = "opencl"

    def __init__(self, source: str, kernels: list[dict]):
        if not isinstance(source, str) or not isinstance(kernels, list):
            raise TypeError("OpenCLModule(source: str, kernels: list[dict])")
        self.source = source
        self.kernels = kernels
        self.imported_modules: list = []
        self._built: dict[int, list] = {}   # device id -> pyopencl Kernel per kernels entry
        self._lock = threading.Lock()
        self._casts = [scalar_casts(k, _SCALARS, "OpenCL") for k in kernels]
        # [w, h] of each image2d_t parameter (texture scopes), None for buffers: checked at launch,
        # since a buffer bound to an image parameter (or the reverse) crashes some drivers.
        self._images = [[tuple(p["image"]) if p.get("image") else None for p in k.get("params", [])]
                        for k in kernels]
        self.events: list | None = None     # set to a list to collect launch events (timing)

    # Module-like surface, so it can sit in imported_modules beside host modules.
    def get_source(self, fmt: str = "") -> str:
        if fmt not in ("", "cl", "opencl"):
            raise KilnError(f"get_source: an opencl module has only its OpenCL C source "
                            f"(format 'cl'), not {fmt!r}")
        return self.source

    def function_names(self) -> list[str]:
        return [k["name"] for k in self.kernels]

    def _get_function(self, name: str):
        return None  # kernels are launched by the host functions, not called by name

    def get_function(self, name: str, query_imports: bool = False):
        raise AttributeError(f"the opencl module's kernels ({', '.join(self.function_names())}) "
                             "are launched by the host module's functions; call those")

    def build(self, device_id: int = 0) -> list:
        """The program's kernels for ``device_id``, compiling the source the first time."""
        return made_once(self._built, self._lock, device_id, lambda: self._compile(device_id))

    def _compile(self, device_id: int) -> list:
        cl = _cl()
        program = cl.Program(API.context(device_id), self.source)
        try:
            program.build()
        except cl.Error as err:  # pyopencl puts the compiler's build log in the message
            raise KilnError(f"OpenCL program does not build on "
                            f"{API.attribute(device_id, 'device_name')}: {err}") from None
        return [getattr(program, k["name"]) for k in self.kernels]

    def launch(self, kernel_id: int, values: list, grid, block, dyn_shared_bytes: int = 0,
               device_id: int | None = None):
        """Run kernel ``kernel_id`` on ``grid`` work-groups of ``block`` work-items.

        ``values`` follow the kernel's params: cl_mem handles for buffers, numbers for scalars.
        The device is the one the first buffer lives on (device 0 when there is none).
        """
        check_launch("opencl", self.kernels, self._casts, kernel_id, values)
        casts = self._casts[kernel_id]
        if device_id is None:
            device_id = launch_device(API, casts, values)
        kernel = self.build(device_id)[kernel_id]
        images = self._images[kernel_id]
        for i, (cast, value) in enumerate(zip(casts, values)):
            if cast is None:
                self._check_image(kernel_id, i, int(value), images[i])
            kernel.set_arg(i, API.buffer(int(value)) if cast is None else cast(value))
        if dyn_shared_bytes:
            raise KilnError("dynamic shared memory is not supported by the OpenCL runtime yet; "
                            "declare shared buffers with a constant size")
        local = tuple(int(b) for b in block)
        global_size = tuple(int(g) * b for g, b in zip(grid, local))
        # Trailing extents of 1 are dropped so a 1-D kernel is a 1-D NDRange.
        dims = max((i + 1 for i, (g, b) in enumerate(zip(global_size, local)) if g != 1 or b != 1),
                   default=1)
        if any(g == 0 for g in global_size[:dims]):
            return None  # an empty grid (a zero-sized tensor): nothing to run
        cl = _cl()
        try:
            event = cl.enqueue_nd_range_kernel(API.queue(device_id), kernel, global_size[:dims],
                                               local[:dims])
        except cl.Error as err:
            raise KilnError(_launch_failure(self.kernels[kernel_id]["name"], grid, local, device_id,
                                            err)) from None
        if self.events is not None:
            self.events.append(event)
        return event

    def _check_image(self, kernel_id: int, index: int, handle: int, want) -> None:
        if API.device_of(handle) is None:
            return  # a cl_mem this runtime did not make: nothing known to check against
        have = API.image_of(handle)
        if (want is None) == (have is None) and (want is None or tuple(have) == tuple(want)):
            return
        k = self.kernels[kernel_id]
        name = k["params"][index].get("name", index)
        what = f"an image2d_t of {want[0]} x {want[1]} texels" if want else "a buffer"
        got = f"an image of {have[0]} x {have[1]} texels" if have else "a buffer"
        raise KilnError(f"{k['name']}: parameter {name} is {what}, got {got}: pass arrays in the scopes the "
                        "kernel was built for (tvm.nd.empty(..., mem_scope=...); mod.json storage_scope)")

    def __repr__(self) -> str:
        return f"OpenCLModule(kernels=[{', '.join(self.function_names())}])"


def _launch_failure(name: str, grid, block, device_id: int, err) -> str:
    text = f"{name}: launch of {tuple(int(g) for g in grid)} blocks of {block} threads failed: {err}"
    threads = block[0] * block[1] * block[2]
    limit = API.attribute(device_id, "max_threads_per_block")
    if threads > limit:
        text += (f". The block has {threads} threads; opencl({device_id}) allows {limit} per block: "
                 "split the thread axes by smaller factors")
    return text
