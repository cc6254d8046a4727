"""Host modules that carry device code (docs/abi.md, "GPU modules").

The compiler embeds the kernels in the metadata (``device_code``); the host functions launch
them through the ``__kiln_device_launch`` pointer each such library defines. After dlopen the
loader builds the device module from the metadata and points that symbol at a ctypes callback
that launches kernels with it.
"""

from __future__ import annotations

import ctypes
import threading

from ..errors import KilnError

# int32_t (*)(void* ctx, int32_t kernel_id, const KilnValue* args, const int32_t* type_codes,
#             int32_t num_args, const int64_t* launch /* gx gy gz bx by bz */, int64_t dyn_shared)
LaunchHook = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64)

_KILN_FLOAT = 2

# The hook installed in each library, by the address of its __kiln_device_launch. A library
# loaded twice (same path) is one dlopen handle with one such pointer, so the callback lives here
# rather than in either module: the pointer must never outlive the callback it names.
_hooks: dict[int, object] = {}
# The exception a callback caught, per thread, for the Python caller to raise (the C host code
# only sees -1).
_pending = threading.local()


def device_modules(metadata: dict) -> list:
    """The device module(s) described by ``metadata["device_code"]`` (none for CPU modules)."""
    code = metadata.get("device_code") if isinstance(metadata, dict) else None
    if not code:
        return []
    kind = code.get("type_key") or code.get("kind")
    if kind == "opencl":
        from .devices.opencl import OpenCLModule
        return [OpenCLModule(code.get("source", ""), list(code.get("kernels", [])))]
    if kind == "cuda":
        from .devices.cuda import CUDAModule
        return [CUDAModule(dict(code))]
    raise KilnError(f"the module carries {kind!r} device code, which this runtime cannot run "
                    "(it runs 'opencl' and 'cuda'); rebuild for a target this device supports")


def install_launch_hook(lib: ctypes.CDLL, device_module, library_name: str) -> None:
    """Point the library's ``__kiln_device_launch`` at a callback launching ``device_module``."""
    try:
        address = ctypes.addressof(ctypes.c_void_p.in_dll(lib, "__kiln_device_launch"))
    except ValueError:
        raise KilnError(f"{library_name}: its metadata carries device code but it does not define "
                        "__kiln_device_launch; rebuild it with this kiln version") from None

    fast = getattr(device_module, "launch_raw", None)  # CUDA: launches keyed by their raw bytes

    def launch(ctx, kernel_id, args, codes, num_args, dims, dyn_shared):
        try:
            if fast is not None and kernel_id >= 0:
                fast(kernel_id, args, codes, num_args, dims, dyn_shared)
                return 0
            n = int(num_args)
            ints = (ctypes.c_int64 * n).from_address(args) if n else ()
            floats = (ctypes.c_double * n).from_address(args) if n else ()
            types = (ctypes.c_int32 * n).from_address(codes) if n else ()
            values = [floats[i] if types[i] == _KILN_FLOAT else ints[i] for i in range(n)]
            if kernel_id < 0:
                _workspace(int(kernel_id), values, getattr(device_module, "device_api", None))
                return 0
            extents = (ctypes.c_int64 * 6).from_address(dims)
            device_module.launch(int(kernel_id), values, tuple(extents[0:3]), tuple(extents[3:6]),
                                 int(dyn_shared))
            return 0
        except BaseException as err:  # noqa: BLE001 - raised again by the Python caller
            _pending.error = err
            return -1

    callback = LaunchHook(launch)
    ctypes.c_void_p.from_address(address).value = ctypes.cast(callback, ctypes.c_void_p).value
    _hooks[address] = callback


# Device workspace of running host functions (tensors between kernels), by handle. The host code
# asks through the launch hook: kernel id -1 = allocate [nbytes, address of the handle slot, a
# buffer on the wanted device], -2 = free [handle] (docs/abi.md "GPU modules").
_workspaces: dict[int, object] = {}


def _workspace(kind: int, values: list, API=None) -> None:
    if API is None:  # OpenCL modules; CUDA modules name their device API
        from .devices.opencl import API

    if kind == -1:
        nbytes, slot, like = values
        handle, owner = API.alloc(int(nbytes), API.device_of(int(like)) or 0 if like else 0)
        _workspaces[handle] = owner
        ctypes.c_void_p.from_address(int(slot)).value = handle
    elif kind == -2:
        _workspaces.pop(int(values[0]), None)
    elif kind == -3:  # an RGBA image for a texture-scoped tensor (docs/adreno.md)
        width, height, bits, slot, like = values
        if not hasattr(API, "alloc_image"):
            raise KilnError("device hook: this device has no images (texture scopes need OpenCL)")
        device_id = API.device_of(int(like)) or 0 if like else 0
        handle, owner = API.alloc_image(int(width), int(height), "float16" if bits == 16 else "float32",
                                        device_id)
        _workspaces[handle] = owner
        ctypes.c_void_p.from_address(int(slot)).value = handle
    else:
        raise KilnError(f"device hook: unknown request {kind} (host code newer than this runtime?)")


def take_error() -> BaseException | None:
    """The exception the last failing launch in this thread raised, once."""
    err = getattr(_pending, "error", None)
    _pending.error = None
    return err
