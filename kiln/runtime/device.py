"""Devices: a (DLPack device type, index) pair, e.g. ``tvm.cpu(0)`` or ``tvm.cuda(1)``.

A local device has ``session = None``. The RPC client builds remote devices by setting
``session`` to its session object; arrays and modules created on such a device are then
dispatched to that session (see ``kiln.runtime.ndarray``).
"""

from __future__ import annotations

from .device_types import _TYPE_NAMES, CPU, CUDA, CUDA_HOST, EXT_DEV, METAL, OPENCL, ROCM, VULKAN  # noqa: F401

# Every spelling users (and target strings) use for a device kind.
_NAME_TO_TYPE = {
    "cpu": CPU, "llvm": CPU, "c": CPU, "stackvm": CPU, "ext_dev": EXT_DEV,
    "cuda": CUDA, "gpu": CUDA, "nvptx": CUDA,
    "cuda_host": CUDA_HOST,
    "opencl": OPENCL, "cl": OPENCL,
    "vulkan": VULKAN, "metal": METAL, "rocm": ROCM,
}


class Device:
    """A device that holds arrays and runs kernels.

    >>> dev = tvm.device("cpu", 0)
    >>> str(dev), dev.device_type, dev.exist
    ('cpu(0)', 1, True)
    """

    __slots__ = ("device_type", "device_id", "session")

    def __init__(self, device_type: int, device_id: int = 0, session=None):
        if device_type not in _TYPE_NAMES:
            raise ValueError(f"unknown device type code {device_type!r}; "
                             f"known codes: {sorted(_TYPE_NAMES)} (DLPack numbering)")
        self.device_type = int(device_type)
        self.device_id = int(device_id)
        self.session = session

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES[self.device_type]

    @property
    def exist(self) -> bool:
        """Whether this device is present (False for a device kind this build cannot drive)."""
        if self.session is not None:
            return self.session.device_exist(self)
        from . import devices
        api = devices.find_api(self.device_type)
        return api is not None and api.exist(self.device_id)

    def _attribute(self, name: str):
        if self.session is not None:
            return self.session.device_attr(self, name)
        from . import devices
        api = devices.find_api(self.device_type)
        if api is None or not api.exist(self.device_id):
            return None  # as TVM: an absent device has no attributes
        query = getattr(api, "attribute", None)
        return query(self.device_id, name) if query is not None else None

    max_threads_per_block = property(lambda self: self._attribute("max_threads_per_block"),
                                     doc="Most work-items (threads) in one work-group (block).")
    max_shared_memory_per_block = property(
        lambda self: self._attribute("max_shared_memory_per_block"),
        doc="Bytes of shared (OpenCL: __local) memory one block may use.")
    warp_size = property(lambda self: self._attribute("warp_size"),
                         doc="Threads that run in lockstep (1 on OpenCL, which promises none).")
    max_thread_dimensions = property(lambda self: self._attribute("max_thread_dimensions"),
                                     doc="Largest block extent per dimension (x, y, z).")
    multi_processor_count = property(lambda self: self._attribute("multi_processor_count"),
                                     doc="Compute units (SMs) of the device.")
    device_name = property(lambda self: self._attribute("device_name"))
    compute_version = property(lambda self: self._attribute("compute_version"),
                               doc='The device\'s version: "3.0" for an OpenCL 3.0 device.')
    max_clock_rate = property(lambda self: self._attribute("max_clock_rate"), doc="In kHz.")

    def sync(self) -> None:
        """Wait until every operation queued on this device has finished."""
        if self.session is not None:
            self.session.device_sync(self)
            return
        from . import devices
        devices.get_api(self.device_type).sync(self.device_id)

    def __eq__(self, other) -> bool:
        return (isinstance(other, Device) and self.device_type == other.device_type
                and self.device_id == other.device_id and self.session is other.session)

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id, id(self.session)))

    def __repr__(self) -> str:
        where = "" if self.session is None else f" @ {self.session!r}"
        return f"{self.type_name}({self.device_id}){where}"

    __str__ = __repr__


def device(dev_type: str | int, dev_id: int = 0) -> Device:
    """``tvm.device("cuda", 1)``; also accepts "llvm", "cl", "cpu(0)"-style strings and type codes."""
    if isinstance(dev_type, Device):
        return dev_type
    if isinstance(dev_type, int):
        return Device(dev_type, dev_id)
    if not isinstance(dev_type, str):
        raise TypeError(f"device type must be a name like 'cpu' or a DLPack code, got {dev_type!r}")
    name = dev_type.strip()
    if name.endswith(")") and "(" in name:  # "cuda(1)": the form str(dev) prints
        name, _, index = name[:-1].partition("(")
        dev_id = int(index)
    kind = name.split()[0].lower() if name.split() else ""
    if kind not in _NAME_TO_TYPE:
        raise ValueError(f"unknown device {dev_type!r}; use one of {sorted(_NAME_TO_TYPE)}")
    return Device(_NAME_TO_TYPE[kind], dev_id)


def cpu(dev_id: int = 0) -> Device:
    return Device(CPU, dev_id)


def cuda(dev_id: int = 0) -> Device:
    return Device(CUDA, dev_id)


def cl(dev_id: int = 0) -> Device:
    return Device(OPENCL, dev_id)


def ext_dev(dev_id: int = 0) -> Device:
    """The accelerator (kiln's VTA simulator): ``tvm.ext_dev(0)``."""
    return Device(EXT_DEV, dev_id)


gpu = cuda
opencl = cl
