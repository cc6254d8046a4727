"""The module ``vta.build`` returns: encoded instructions and micro-ops that the simulator runs.

A call ``f(a, b, c)`` maps argument k to DRAM segment k (kiln/vta/isa.py) and runs the stream on
the functional simulator, or on the cycle model when the configuration's TARGET is "tsim" or
the module was built/loaded with ``mode="cycle"``; ``f.last_stats`` holds the run's counters.
Arrays may live on ``tvm.ext_dev(0)`` (host memory the accelerator's DMA reads, see device.py)
or on the CPU. ``save``/``export_library`` write one file that ``load_module`` reads back,
locally, through ``rpc.LocalSession`` or on an RPC server: runtime side only (numpy, ctypes).
"""

from __future__ import annotations

import json
import struct

import numpy as np

from ..errors import FileFormatError, KilnError
from ..runtime.module import Module
from . import simulator

MAGIC = b"KILNVTA1"
_HEADER = struct.Struct("<Q")


class VTAFunction:
    """One compiled function: ``f(*arrays)``; its instruction stream and micro-ops."""

    def __init__(self, name: str, hw: dict, insns: np.ndarray, uops: np.ndarray, args: list, mode: str):
        self.name, self.hw, self.insns, self.uops, self.args, self.mode = name, hw, insns, uops, args, mode
        self.last_stats = None

    def __call__(self, *arrays):
        if len(arrays) != len(self.args):
            raise TypeError(f"{self.name} takes {len(self.args)} arrays ({', '.join(a['name'] for a in self.args)}), "
                            f"got {len(arrays)}")
        segments = []
        for spec, arr in zip(self.args, arrays):
            segments.append(_segment(self.name, spec, arr))
        self.last_stats = simulator.run(self.hw, self.insns, self.uops, segments, self.mode)
        return None


def _segment(fname: str, spec: dict, arr):
    shape, dtype = tuple(getattr(arr, "shape", ())), str(getattr(arr, "dtype", ""))
    if shape != tuple(spec["shape"]) or dtype != spec["dtype"]:
        raise ValueError(f"{fname}: argument {spec['name']} must be {spec['dtype']}{list(spec['shape'])}, "
                         f"got {dtype}{list(shape)}")
    if isinstance(arr, np.ndarray):
        if not arr.flags.c_contiguous:
            raise ValueError(f"{fname}: argument {spec['name']} must be a contiguous array")
        return arr
    if getattr(arr, "device", None) is not None and arr.device.device_type not in (1, 12):
        raise ValueError(f"{fname}: argument {spec['name']} lives on {arr.device}; the accelerator reads "
                         "arrays on tvm.ext_dev(0) or tvm.cpu(0)")
    return (arr._address(), arr.nbytes)


class VTAModule(Module):
    type_key = "vta"

    def __init__(self, functions: dict, hw: dict):
        super().__init__()
        self.functions, self.hw = functions, hw

    @property
    def entry_name(self) -> str:
        return next(iter(self.functions))

    def function_names(self) -> list[str]:
        return list(self.functions)

    def _get_function(self, name: str):
        return self.functions.get(name)

    def set_mode(self, mode: str) -> "VTAModule":
        """Run on the ``"functional"`` simulator or the ``"cycle"`` model from now on."""
        if mode not in simulator.MODES:
            raise ValueError(f"simulator mode {mode!r}; use one of {sorted(simulator.MODES)}")
        for f in self.functions.values():
            f.mode = mode
        return self

    def get_source(self, fmt: str = "") -> str:
        from .isa import decode
        from .environment import Environment
        env = Environment(self.hw)
        lines = []
        for f in self.functions.values():
            lines.append(f"// {f.name}: {len(f.insns)} instructions, {len(f.uops)} micro-ops")
            lines += [repr(i) for i in decode(f.insns, env)]
        return "\n".join(lines)

    def save(self, file_name: str, fmt: str = "") -> None:
        header = {"hw": self.hw, "functions": []}
        blobs = []
        for f in self.functions.values():
            header["functions"].append({"name": f.name, "args": f.args, "mode": f.mode,
                                        "insns": len(f.insns), "uops": len(f.uops)})
            blobs += [np.ascontiguousarray(f.insns, np.uint64).tobytes(), np.ascontiguousarray(f.uops, np.uint32).tobytes()]
        text = json.dumps(header).encode()
        with open(file_name, "wb") as out:
            out.write(MAGIC + _HEADER.pack(len(text)) + text + b"".join(blobs))

    def export_library(self, file_name: str, fcompile=None, **kwargs) -> None:
        self.save(file_name)


def load(path: str) -> VTAModule:
    """Read a file written by ``VTAModule.save``."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise FileFormatError(f"{path} is not a kiln VTA module (no {MAGIC!r} header)")
    (n,) = _HEADER.unpack_from(data, len(MAGIC))
    pos = len(MAGIC) + 8
    try:
        header = json.loads(data[pos:pos + n])
        pos += n
        functions = {}
        for spec in header["functions"]:
            ni, nu = int(spec["insns"]), int(spec["uops"])
            if ni < 0 or nu < 0 or pos + 16 * ni + 4 * nu > len(data):
                raise ValueError("truncated")
            insns = np.frombuffer(data, np.uint64, 2 * ni, pos).reshape(ni, 2)
            pos += 16 * ni
            uops = np.frombuffer(data, np.uint32, nu, pos)
            pos += 4 * nu
            functions[spec["name"]] = VTAFunction(spec["name"], header["hw"], insns, uops, spec["args"], spec["mode"])
    except (ValueError, KeyError, TypeError) as err:
        raise FileFormatError(f"{path}: damaged VTA module ({err}); rebuild it with vta.build") from None
    if not functions:
        raise KilnError(f"{path}: a VTA module without functions")
    from .environment import Environment, VTAConfigError
    try:  # the simulator sizes its SRAMs from this: only configurations that pass the checks
        Environment(header["hw"])
    except (VTAConfigError, TypeError, AttributeError) as err:
        raise FileFormatError(f"{path}: its accelerator configuration is invalid ({err})") from None
    return VTAModule(functions, header["hw"])
