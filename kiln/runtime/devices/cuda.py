"""CUDA devices through the driver API of cuda-python (``cuda.bindings.driver``).

Device ``i`` is CUDA ordinal ``i``; its context is the device's primary context, the one the
CUDA runtime (and so torch and cupy) uses too, which makes device pointers valid in both and
lets DLPack hand them over without copies. Every launch, copy and timing event goes to the
legacy default stream, so work is ordered with torch's and cupy's default streams as well
(a graph executor's replayed CUDA graph runs on a blocking stream of its own, which orders the
same way: kiln/runtime/cuda_graphs.py).
An array's data is its ``CUdeviceptr`` (an int, device-side address: offsets are plain adds).

cuda-python is imported on first use: the runtime (and ``tvm.cuda(0).exist``) works without it
and without a driver.
"""

from __future__ import annotations

import base64
import ctypes
import os
import threading

import numpy as np

from ...errors import KilnError
from . import made_once, nvrtc
from .kernel_args import check_launch, launch_device, scalar_casts

_INSTALL = "pip install 'kiln[cuda]' (cuda-bindings, nvidia-cuda-nvrtc) and an NVIDIA driver"


def _drv():
    try:
        from cuda.bindings import driver
    except ImportError:
        raise KilnError(f"CUDA needs cuda-python: {_INSTALL}") from None
    return driver


def _check(result, what: str):
    """The values a driver call returned after its CUresult; a KilnError naming the failure."""
    err, rest = result[0], result[1:]
    if int(err) != 0:
        drv = _drv()
        text = drv.cuGetErrorString(err)
        detail = text[1].decode() if int(text[0]) == 0 and text[1] else getattr(err, "name", str(err))
        raise KilnError(f"CUDA {what} failed: {getattr(err, 'name', err)}: {detail}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


class _Allocation:
    """Owner of one device allocation (NDArray._owner): freed when the last reference goes."""

    __slots__ = ("ptr", "device_id", "__weakref__")

    def __init__(self, ptr: int, device_id: int):
        self.ptr = ptr
        self.device_id = device_id

    def __del__(self):
        try:
            if API.captured_frees is not None:  # a CUDA graph being recorded still uses it: the graph frees it
                API.captured_frees.append((self.ptr, self.device_id))
                return
            API._owners.pop(self.ptr, None)
            API.activate(self.device_id)
            _drv().cuMemFree(self.ptr)
        except Exception:  # noqa: BLE001 - interpreter shutdown or a dead context: nothing to do
            pass


class CUDADeviceAPI:
    def __init__(self):
        self._lock = threading.Lock()
        self._count: int | None = None
        self._pid = os.getpid()
        self._contexts: dict[int, object] = {}
        self._current = threading.local()
        self._owners: dict[int, int] = {}  # ptr -> device id, for the arrays kiln allocated
        # While a CUDA graph is recorded (kiln/runtime/cuda_graphs.py), the recording thread's
        # launches go to its stream (_current.stream; else 0, the legacy default stream) and the
        # frees of device workspace are deferred to the graph, whose replays still use that memory.
        self.captured_frees: list | None = None

    # -- devices -------------------------------------------------------------------------------
    def count(self) -> int:
        if self._count is not None and self._pid != os.getpid():
            # A child forked after CUDA started in its parent must not call the driver (CUDA is
            # not fork-safe): it sees no devices. Start such workers with "spawn".
            return 0
        if self._count is None:
            self._pid = os.getpid()
            try:
                drv = _drv()
                _check(drv.cuInit(0), "cuInit")
                self._count = int(_check(drv.cuDeviceGetCount(), "cuDeviceGetCount"))
            except Exception:  # noqa: BLE001 - no cuda-python, no libcuda, no GPU: no devices
                self._count = 0
        return self._count

    def exist(self, device_id: int) -> bool:
        return 0 <= device_id < self.count()

    def _device(self, device_id: int):
        if not self.exist(device_id):
            raise KilnError(f"cuda({device_id}) does not exist: this machine has {self.count()} CUDA "
                            f"device(s)" + ("" if self.count() else f" (needs an NVIDIA GPU: {_INSTALL})"))
        return _check(_drv().cuDeviceGet(device_id), "cuDeviceGet")

    def context(self, device_id: int = 0):
        return made_once(self._contexts, self._lock, device_id, lambda: _check(
            _drv().cuDevicePrimaryCtxRetain(self._device(device_id)), "cuDevicePrimaryCtxRetain"))

    def activate(self, device_id: int = 0) -> None:
        """Make the device's primary context current in this thread."""
        if self._pid != os.getpid():
            raise KilnError("CUDA was started in the parent of this forked process and cannot be used "
                            "here; start workers with multiprocessing's 'spawn' method")
        if getattr(self._current, "device", None) != device_id:
            _check(_drv().cuCtxSetCurrent(self.context(device_id)), "cuCtxSetCurrent")
            self._current.device = device_id

    def attribute(self, device_id: int, name: str):
        if name == "exist":
            return self.exist(device_id)
        drv = _drv()
        dev = self._device(device_id)
        A = drv.CUdevice_attribute

        def get(attr):
            return int(_check(drv.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({attr.name})"))

        if name == "max_threads_per_block":
            return get(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        if name == "max_shared_memory_per_block":
            return get(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
        if name == "max_shared_memory_per_block_optin":
            return get(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        if name == "warp_size":
            return get(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE)
        if name == "max_thread_dimensions":
            return (get(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X), get(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
                    get(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z))
        if name == "multi_processor_count":
            return get(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        if name == "compute_version":
            return (f"{get(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)}."
                    f"{get(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)}")
        if name == "max_clock_rate":
            return get(A.CU_DEVICE_ATTRIBUTE_CLOCK_RATE)  # kHz
        if name == "device_name":
            raw = _check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
            return bytes(raw).split(b"\0")[0].decode().strip()
        raise AttributeError(f"CUDA devices have no attribute {name!r}")

    # -- memory ---------------------------------------------------------------------------------
    def alloc(self, nbytes: int, device_id: int = 0) -> tuple[int, _Allocation]:
        self.activate(device_id)
        ptr = int(_check(_drv().cuMemAlloc(max(int(nbytes), 1)), f"cuMemAlloc of {nbytes} bytes"))
        owner = _Allocation(ptr, device_id)
        self._owners[ptr] = device_id
        return ptr, owner

    def device_of(self, ptr: int) -> int | None:
        """The device a pointer lives on (also for memory torch or cupy allocated)."""
        got = self._owners.get(ptr)
        if got is not None:
            return got
        drv = _drv()
        try:
            result = drv.cuPointerGetAttribute(
                drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
            return int(result[1]) if int(result[0]) == 0 else None
        except Exception:  # noqa: BLE001 - not a device pointer
            return None

    def copy_from_host(self, dst: int, src: np.ndarray, device_id: int = 0) -> None:
        if src.nbytes:
            self.activate(device_id)
            src = np.ascontiguousarray(src)
            _check(_drv().cuMemcpyHtoD(dst, src.ctypes.data, src.nbytes), "cuMemcpyHtoD")

    def copy_to_host(self, dst: np.ndarray, src: int, device_id: int = 0) -> None:
        if dst.nbytes:
            self.activate(device_id)
            _check(_drv().cuMemcpyDtoH(dst.ctypes.data, src, dst.nbytes), "cuMemcpyDtoH")

    def write_bytes(self, dst: int, offset: int, data, device_id: int = 0) -> None:
        view = np.frombuffer(memoryview(data).cast("B"), np.uint8)
        self.copy_from_host(int(dst) + int(offset), view, device_id)

    def read_bytes(self, src: int, offset: int, nbytes: int, device_id: int = 0) -> np.ndarray:
        out = np.empty(int(nbytes), np.uint8)
        self.copy_to_host(out, int(src) + int(offset), device_id)
        return out

    def copy_between(self, dst: int, src: int, nbytes: int, device_id: int = 0) -> None:
        if nbytes:
            self.activate(device_id)
            _check(_drv().cuMemcpyDtoD(dst, src, int(nbytes)), "cuMemcpyDtoD")

    def sync(self, device_id: int = 0) -> None:
        if device_id in self._contexts:
            self.activate(device_id)
            _check(_drv().cuCtxSynchronize(), "cuCtxSynchronize (a kernel may have faulted)")

    # -- timing ---------------------------------------------------------------------------------
    def elapsed(self, work, device_id: int = 0) -> float:
        """Seconds the device spent between the start and the end of ``work()`` (CUDA events)."""
        drv = _drv()
        self.activate(device_id)
        start = _check(drv.cuEventCreate(0), "cuEventCreate")
        end = _check(drv.cuEventCreate(0), "cuEventCreate")
        try:
            _check(drv.cuEventRecord(start, 0), "cuEventRecord")
            work()
            self.activate(device_id)
            _check(drv.cuEventRecord(end, 0), "cuEventRecord")
            _check(drv.cuEventSynchronize(end), "cuEventSynchronize (a kernel may have faulted)")
            return float(_check(drv.cuEventElapsedTime(start, end), "cuEventElapsedTime")) * 1e-3
        finally:
            drv.cuEventDestroy(start)
            drv.cuEventDestroy(end)


API = CUDADeviceAPI()


# -- device modules -------------------------------------------------------------------------------
_SCALARS = {"int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
            "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
            "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "bool": ctypes.c_int8,
            "float32": ctypes.c_float, "float64": ctypes.c_double}
_STATIC_SHARED = 48 * 1024
_KILN_FLOAT = 2  # type code of a float scalar in the launch hook's arguments


class CUDAModule:
    """The CUDA half of a GPU module (docs/abi.md "GPU modules", docs/cuda.md).

    ``device_code``: ``{"type_key": "cuda", "source", "arch", "ptx"?, "kernels": [...]}``. The
    module is loaded once per device context on the first launch there: a cubin compiled by
    NVRTC for that device's arch when NVRTC is installed, else the PTX (JIT by the driver).
    """

    type_key = "cuda"

    def __init__(self, device_code: dict):
        if not isinstance(device_code, dict) or "kernels" not in device_code:
            raise TypeError("CUDAModule(device_code: dict with 'source' and 'kernels')")
        self.device_code = device_code
        self.kernels = list(device_code["kernels"])
        self.imported_modules: list = []
        self.device_api = API
        self._loaded: dict[int, tuple] = {}  # device id -> (CUmodule, [CUfunction], {fid: shared set})
        self._lock = threading.Lock()
        self._casts = [scalar_casts(k, _SCALARS, "CUDA") for k in self.kernels]
        self._prepared: dict = {}  # launch key -> (function, dims, shared bytes, params, device, keep-alive)
        self._raw: dict = {}  # the same, keyed by the launch hook's raw argument bytes

    def get_source(self, fmt: str = "") -> str:
        return nvrtc.source_of(self.device_code, fmt)

    def function_names(self) -> list[str]:
        return [k["name"] for k in self.kernels]

    def _get_function(self, name: str):
        return None  # kernels are launched by the host functions

    def get_function(self, name: str, query_imports: bool = False):
        raise AttributeError(f"the cuda module's kernels ({', '.join(self.function_names())}) are "
                             "launched by the host module's functions; call those")

    def image_for(self, device_id: int) -> bytes:
        """What cuModuleLoadData gets: the carried cubin when it is for this device's arch, else
        a cubin NVRTC compiles for it (runtime/devices/nvrtc.py, when installed), else the PTX."""
        arch = "sm_" + API.attribute(device_id, "compute_version").replace(".", "")
        code = self.device_code
        built = code.get("arch")
        if built and nvrtc.arch_specific(built):  # sm_90a code (wgmma, ...) runs on that chip only
            if nvrtc.arch_number(built) != nvrtc.arch_number(arch):
                raise KilnError(f"this CUDA module was built for {built}, whose instructions run only on "
                                f"that chip, and cuda({device_id}) is {arch}: rebuild with -arch={arch}")
            arch = nvrtc.normalize_arch(built)
        if code.get("cubin") and code.get("cubin_arch") == arch:
            return base64.b64decode(code["cubin"])
        if nvrtc.have_nvrtc():
            try:
                return nvrtc.compile_source(code["source"], arch, "cubin")
            except KilnError:
                if "ptx" not in code:
                    raise
        if "ptx" not in code:
            raise KilnError(f"this CUDA module carries no PTX (nor a cubin for {arch}) and NVRTC is "
                            f"missing: {_INSTALL}, or rebuild the module where NVRTC is installed")
        return code["ptx"].encode() + b"\0"

    def load(self, device_id: int = 0) -> tuple:
        """(CUmodule, one CUfunction per kernel, launch cache) on ``device_id``, loaded the first time."""
        return made_once(self._loaded, self._lock, device_id, lambda: self._load(device_id))

    def _load(self, device_id: int) -> tuple:
        drv = _drv()
        API.activate(device_id)
        module = _check(drv.cuModuleLoadData(self.image_for(device_id)), "cuModuleLoadData")
        funcs = [_check(drv.cuModuleGetFunction(module, k["name"].encode()), f"cuModuleGetFunction({k['name']})")
                 for k in self.kernels]
        return module, funcs, {}

    def launch(self, kernel_id: int, values: list, grid, block, dyn_shared_bytes: int = 0,
               device_id: int | None = None):
        """Run kernel ``kernel_id`` on ``grid`` blocks of ``block`` threads; ``values`` follow its
        params (device pointers for buffers). The device is the first buffer's (0 without one)."""
        # A graph runs the same launches again and again: their packed arguments are kept.
        key = (kernel_id, tuple(values), tuple(grid), tuple(block), dyn_shared_bytes, device_id)
        ready = self._prepared.get(key)
        if ready is None:
            ready = self._prepare(kernel_id, values, grid, block, dyn_shared_bytes, device_id)
            if ready is None:
                return None  # an empty grid
            if len(self._prepared) >= 1024:
                self._prepared.clear()
            self._prepared[key] = ready
        func, dims, shared, params, dev, _ = ready
        if getattr(API._current, "device", None) != dev:
            API.activate(dev)
        result = _drv().cuLaunchKernel(func, *dims, shared, getattr(API._current, 'stream', 0), params, 0)
        if int(result[0]) != 0:
            entry = self.kernels[kernel_id]
            _check(result, f"launch of {entry['name']} on {dims[:3]} blocks of {dims[3:]} threads "
                           f"({shared} bytes of dynamic shared memory) on cuda({dev})")
        return None

    def launch_raw(self, kernel_id: int, args: int, codes: int, num_args: int, dims: int, dyn_shared: int):
        """The launch hook's call as it comes (addresses of KilnValues, type codes and the six
        extents): the same launch again costs a dict lookup and cuLaunchKernel."""
        n = int(num_args)
        key = (kernel_id, ctypes.string_at(args, 8 * n) if n else b"",
               ctypes.string_at(codes, 4 * n) if n else b"", ctypes.string_at(dims, 48), dyn_shared)
        ready = self._raw.get(key, False)
        if ready is False:
            types = (ctypes.c_int32 * n).from_address(codes) if n else ()
            ints = (ctypes.c_int64 * n).from_address(args) if n else ()
            floats = (ctypes.c_double * n).from_address(args) if n else ()
            values = [floats[i] if types[i] == _KILN_FLOAT else ints[i] for i in range(n)]
            extents = (ctypes.c_int64 * 6).from_address(dims)
            ready = self._prepare(kernel_id, values, tuple(extents[0:3]), tuple(extents[3:6]), int(dyn_shared),
                                  None)
            if len(self._raw) >= 1024:
                self._raw.clear()
            self._raw[key] = ready
        if ready is None:
            return  # an empty grid
        func, dims6, shared, params, dev, _ = ready
        if getattr(API._current, "device", None) != dev:
            API.activate(dev)
        result = _drv().cuLaunchKernel(func, *dims6, shared, getattr(API._current, 'stream', 0), params, 0)
        if int(result[0]) != 0:
            _check(result, f"launch of {self.kernels[kernel_id]['name']} on {dims6[:3]} blocks of {dims6[3:]} "
                           f"threads ({shared} bytes of dynamic shared memory) on cuda({dev})")

    def _prepare(self, kernel_id, values, grid, block, dyn_shared_bytes, device_id):
        check_launch("cuda", self.kernels, self._casts, kernel_id, values)
        casts = self._casts[kernel_id]
        entry = self.kernels[kernel_id]
        if device_id is None:
            device_id = launch_device(API, casts, values)
        grid = tuple(int(g) for g in grid)
        block = tuple(int(b) for b in block)
        if any(g == 0 for g in grid):
            return None
        _, funcs, raised = self.load(device_id)
        func = funcs[kernel_id]
        drv = _drv()
        shared = max(int(dyn_shared_bytes), int(entry.get("shared_bytes", 0)))
        if shared > _STATIC_SHARED and kernel_id not in raised:
            API.activate(device_id)
            _check(drv.cuFuncSetAttribute(
                func, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                f"{entry['name']}: raising its dynamic shared memory to {shared} bytes "
                f"(cuda({device_id}) allows {API.attribute(device_id, 'max_shared_memory_per_block_optin')})")
            raised[kernel_id] = shared
        holders = [ctypes.c_uint64(int(v)) if c is None else c(v) for c, v in zip(casts, values)]
        holders += [_tensor_map(spec, int(values[spec["param"]]), entry["name"]) for spec in entry.get("tensor_maps", ())]
        params = (ctypes.c_void_p * max(len(holders), 1))(*[ctypes.addressof(h) for h in holders])
        return func, grid + block, shared, ctypes.addressof(params), device_id, (holders, params)

    def __repr__(self) -> str:
        return f"CUDAModule(kernels=[{', '.join(self.function_names())}])"


def _tensor_map(spec: dict, address: int, kernel: str):
    """The 128-byte CUtensorMap a kernel's bulk tensor copies read (a by-value parameter after its
    others): the 2-D tensor at ``address`` as the kernel entry's ``tensor_maps`` describes it
    (kiln/codegen/cuda_wgmma.py)."""
    drv = _drv()
    types = {2: drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             4: drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}
    swizzles = {0: drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
                32: drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
                64: drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
                128: drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}
    tmap = _check(drv.cuTensorMapEncodeTiled(
        types[spec["elem_bytes"]], 2, address, [drv.cuuint64_t(d) for d in spec["dims"]],
        [drv.cuuint64_t(spec["row_bytes"])], [drv.cuuint32_t(b) for b in spec["box"]], [drv.cuuint32_t(1)] * 2,
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzles[spec["swizzle"]],
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        f"{kernel}: the tensor map of parameter {spec['param']} ({spec})")
    holder = (ctypes.c_uint64 * 16)()
    ctypes.memmove(holder, tmap.getPtr(), 128)
    return holder
