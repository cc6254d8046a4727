"""``tvm.ext_dev(0)``: the simulated accelerator's memory.

The simulators' DMA reads and writes host memory directly (a board's DRAM shared with its CPU,
as on VTA's Zynq boards), so arrays on ext_dev are 64-byte aligned host buffers and copies are
memmoves; what makes them accelerator arrays is the device type a module checks.
"""

from __future__ import annotations

from ..runtime.devices.cpu import CPUDeviceAPI


class ExtDevAPI(CPUDeviceAPI):
    def exist(self, device_id: int) -> bool:
        return device_id == 0  # one simulated accelerator per process

    def attribute(self, device_id: int, name: str):
        return {"device_name": "kiln VTA simulator"}.get(name)


API = ExtDevAPI()
