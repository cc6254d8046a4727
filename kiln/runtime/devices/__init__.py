"""Device APIs, one module per device kind, loaded on first use.

Each module exposes ``API``, an object with ``exist(device_id)``, ``alloc(nbytes, device_id)``
(returns ``(address, owner)``; the memory lives as long as ``owner``), ``copy_from_host(dst,
src_ndarray, device_id)``, ``copy_to_host(dst_ndarray, src, device_id)`` and ``sync(device_id)``.
"""

from __future__ import annotations

import importlib

from ...errors import KilnError
from ..device_types import _TYPE_NAMES

# DLPack device type -> module implementing it. Kinds without an entry are not in this build.
DEVICE_APIS = {
    1: "kiln.runtime.devices.cpu",
    2: "kiln.runtime.devices.cuda",
    4: "kiln.runtime.devices.opencl",
    12: "kiln.vta.device",  # ext_dev: the VTA simulator's memory (runtime-side, numpy + ctypes only)
}

_loaded: dict[int, object] = {}


def find_api(device_type: int):
    """The device API for ``device_type``, or None when this build cannot drive it."""
    if device_type in _loaded:
        return _loaded[device_type]
    api = None
    module_name = DEVICE_APIS.get(device_type)
    if module_name is not None:
        try:
            api = importlib.import_module(module_name).API
        except ModuleNotFoundError as err:
            # Only "this device module is not written yet" means absent; a missing dependency
            # inside an existing module (pyopencl, cuda-python) must surface with its message.
            if err.name != module_name:
                raise
    _loaded[device_type] = api
    return api


def get_api(device_type: int):
    api = find_api(device_type)
    if api is None:
        name = _TYPE_NAMES.get(device_type, str(device_type))
        raise KilnError(f"device '{name}' is not available in this build of kiln's runtime "
                        "(no device API module for it); use tvm.cpu() or run on a remote "
                        "device through RPC")
    return api


def made_once(cache: dict, lock, key, make):
    """``cache[key]``, made by ``make()`` the first time it is asked for; under ``lock`` so that
    one thread makes it (a device's context, queue, ...). ``make`` must not take ``lock``."""
    value = cache.get(key)
    if value is None:
        with lock:
            value = cache.get(key)
            if value is None:
                value = cache[key] = make()
    return value
