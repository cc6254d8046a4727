"""Compilation targets: ``Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon")``.

A target is a kind (llvm, c, cuda, opencl) plus options. The option table below says which
options each kind accepts and how to read them; anything else is a ``TargetError`` that names
the bad part and lists what is known. ``str(target)`` gives back a string that parses to an
equal target, so targets can travel through tuning logs and module metadata.
"""

from __future__ import annotations

import contextvars
import shlex

from ..errors import TargetError

# Option name -> type. "list" options are comma separated (-keys=a,b / -mattr=+x,-y).
_COMMON = {"keys": "list", "device": "str", "model": "str", "tag": "str", "libs": "list",
           "host": "str", "from_device": "int"}
_CPU = {**_COMMON, "mtriple": "str", "mcpu": "str", "mattr": "list", "mabi": "str",
        "mfloat-abi": "str", "num-cores": "int", "opt-level": "int", "system-lib": "bool",
        "link-params": "bool", "fast-math": "bool"}
_GPU = {**_COMMON, "max_num_threads": "int", "thread_warp_size": "int", "max_threads_per_block": "int",
        "max_shared_memory_per_block": "int", "registers_per_block": "int"}
KINDS = {
    "llvm": _CPU,
    "c": _CPU,
    "cuda": {**_GPU, "arch": "str", "mcpu": "str"},
    "opencl": {**_GPU, "image_base_address_alignment": "int", "texture_spatial_limit": "int"},
    "ext_dev": _COMMON,  # an accelerator: "ext_dev -device=vta" (kiln/vta)
}
# Keys every target of a kind has, after any -device/-keys given by the user.
_DEFAULT_KEYS = {"llvm": ("cpu",), "c": ("cpu",), "cuda": ("cuda", "gpu"), "opencl": ("opencl", "gpu"), "ext_dev": ()}
_GPU_DEFAULTS = {"cuda": {"max_num_threads": 1024, "thread_warp_size": 32,
                          "max_shared_memory_per_block": 48 * 1024},
                 "opencl": {"max_num_threads": 256, "thread_warp_size": 1,
                            "max_shared_memory_per_block": 48 * 1024}}
# Mobile GPUs: OpenCL local memory is 32 KiB on Mali (Midgard/Bifrost/Valhall) and Adreno.
_DEVICE_DEFAULTS = {"mali": {"max_shared_memory_per_block": 32 * 1024},
                    "adreno": {"max_shared_memory_per_block": 32 * 1024}}


def _defaults(kind: str, attrs: dict) -> dict:
    """Limits a GPU target has unless its options say otherwise (the kernels are checked against them)."""
    out = dict(_GPU_DEFAULTS.get(kind, {}))
    if kind == "opencl":
        out.update(_DEVICE_DEFAULTS.get(attrs.get("device", ""), {}))
    return out
# Target tags naming NVIDIA GPUs: Target("nvidia/nvidia-h100") is Target("cuda -arch=sm_90 -tag=...").
NVIDIA_TAGS = {"nvidia/nvidia-h100": "sm_90", "nvidia/nvidia-h200": "sm_90", "nvidia/nvidia-a100": "sm_80",
               "nvidia/nvidia-a10g": "sm_86", "nvidia/nvidia-l4": "sm_89", "nvidia/nvidia-t4": "sm_75",
               "nvidia/tesla-v100": "sm_70", "nvidia/geforce-rtx-3090": "sm_86",
               "nvidia/geforce-rtx-4090": "sm_89"}
# Option spellings TVM users write, mapped to ours.
_ALIASES = {"target": "mtriple", "num_cores": "num-cores"}


class Target:
    """A compilation target: ``Target("llvm -mcpu=native")``, ``Target("opencl", host="llvm")``.

    Fields: ``kind`` (its ``.name`` is the kind string), ``attrs`` (parsed options),
    ``keys``, ``host``, ``mtriple``, ``mcpu``, ``mattr``, ``model``. Use it as a context
    manager to make it ``Target.current()``::

        with tvm.target.Target("llvm -mcpu=cortex-a72 -mtriple=aarch64-linux-gnu"):
            ...
    """

    def __init__(self, target, host=None):
        if isinstance(target, Target):
            self.kind, self.attrs, self.keys = target.kind, dict(target.attrs), target.keys
            self.host = target.host
        elif isinstance(target, dict):
            self._from_dict(target)
        elif isinstance(target, str):
            self._from_string(target)
        else:
            raise TargetError(f"cannot make a Target from {type(target).__name__} {target!r}; "
                              "pass a string such as 'llvm -mcpu=native' or a dict")
        if host is not None:
            self.host = host if isinstance(host, Target) else Target(host)
        if self.host is not None and self.host.kind.name not in ("llvm", "c"):
            raise TargetError(f"target host {self.host} must be a CPU target (llvm or c)")
        self._token = None

    # Parsing --------------------------------------------------------------------------------
    def _from_string(self, text: str) -> None:
        try:
            parts = shlex.split(text)
        except ValueError as err:
            raise TargetError(f"cannot parse target string {text!r}: {err}") from None
        if not parts:
            raise TargetError("empty target string; known kinds: " + ", ".join(KINDS))
        if parts[0].startswith("nvidia/"):
            if parts[0] not in NVIDIA_TAGS:
                raise TargetError(f"unknown target tag {parts[0]!r}; known: {', '.join(sorted(NVIDIA_TAGS))}")
            parts = ["cuda", f"-arch={NVIDIA_TAGS[parts[0]]}", f"-tag={parts[0]}", *parts[1:]]
        opts: dict = {}
        for part in parts[1:]:
            if not part.startswith("-"):
                raise TargetError(f"target {text!r}: option {part!r} must look like -name=value")
            name, eq, value = part.lstrip("-").partition("=")
            opts[name] = value if eq else True
        self._init(parts[0], opts, text)

    def _from_dict(self, config: dict) -> None:
        config = dict(config)
        kind = config.pop("kind", None)
        if kind is None:
            raise TargetError(f"target dict {config!r} has no 'kind'; known kinds: {', '.join(KINDS)}")
        host = config.pop("host", None)
        self._init(kind, config, repr(config))
        if host is not None:
            self.host = host if isinstance(host, Target) else Target(host)

    def _init(self, kind: str, opts: dict, text: str) -> None:
        if kind not in KINDS:
            raise TargetError(f"unknown target kind {kind!r} in {text!r}; known kinds: {', '.join(KINDS)}")
        table = KINDS[kind]
        attrs: dict = {}
        for name, value in opts.items():
            name = _ALIASES.get(name, name)
            if name not in table:
                raise TargetError(f"target {text!r}: unknown option -{name} for kind {kind!r}; "
                                  f"known options: {', '.join('-' + k for k in sorted(table))}")
            attrs[name] = _convert(table[name], value, name, text)
        if kind == "cuda" and "arch" not in attrs and "mcpu" in attrs:
            attrs["arch"] = attrs.pop("mcpu")
        for key, value in _defaults(kind, attrs).items():
            attrs.setdefault(key, value)
        self.kind = TargetKind(kind)
        host = attrs.pop("host", None)
        self.host = Target(host) if host else None
        self.attrs = attrs
        self.keys = _keys(kind, attrs)

    # Fields ---------------------------------------------------------------------------------
    @property
    def mtriple(self) -> str:
        return self.attrs.get("mtriple", "")

    @property
    def mcpu(self) -> str:
        return self.attrs.get("mcpu", "")

    @property
    def cortex_m(self) -> bool:
        """Whether ``-mcpu`` names a Cortex-M core (a microcontroller target)."""
        return str(self.mcpu or "").lower().startswith("cortex-m")

    @property
    def mattr(self) -> tuple:
        return tuple(self.attrs.get("mattr", ()))

    @property
    def model(self) -> str:
        return self.attrs.get("model", "unknown")

    @property
    def device_name(self) -> str:
        return self.attrs.get("device", "")

    @property
    def libs(self) -> tuple:
        return tuple(self.attrs.get("libs", ()))

    @property
    def arch(self) -> str:
        return self.attrs.get("arch", "")

    @property
    def max_num_threads(self) -> int:
        return self.attrs.get("max_num_threads", 1)

    @property
    def thread_warp_size(self) -> int:
        return self.attrs.get("thread_warp_size", 1)

    def get_target_device_type(self) -> int:
        """The DLPack device type code this target's kernels run on."""
        return {"llvm": 1, "c": 1, "cuda": 2, "opencl": 4, "ext_dev": 12}[self.kind.name]

    # Text and comparison ----------------------------------------------------------------------
    def __str__(self) -> str:
        parts = [self.kind.name]
        implied = _keys(self.kind.name, {k: v for k, v in self.attrs.items() if k != "keys"})
        for name, value in self.attrs.items():
            if name == "keys" and tuple(value) == implied:
                continue
            if _defaults(self.kind.name, self.attrs).get(name) == value:
                continue
            parts.append(_format(name, value))
        text = " ".join(parts)
        return text

    def __repr__(self) -> str:
        if self.host is not None:
            return f"Target({str(self)!r}, host={str(self.host)!r})"
        return f"Target({str(self)!r})"

    def export(self) -> dict:
        """The target as a dict (``Target(t.export())`` equals ``t``)."""
        out = {"kind": self.kind.name, **self.attrs, "keys": list(self.keys)}
        if self.host is not None:
            out["host"] = self.host.export()
        return out

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = Target(other)
        return isinstance(other, Target) and str(self) == str(other) and str(self.host) == str(other.host)

    def __hash__(self) -> int:
        return hash((str(self), str(self.host)))

    def with_host(self, host) -> "Target":
        return Target(self, host=host)

    # Context ----------------------------------------------------------------------------------
    def __enter__(self) -> "Target":
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)
        self._token = None

    @staticmethod
    def current(allow_none: bool = True) -> "Target | None":
        """The target of the innermost ``with Target(...)`` block, or None."""
        target = _CURRENT.get()
        if target is None and not allow_none:
            raise TargetError("no target is active; use `with tvm.target.Target('llvm'):`")
        return target

    @staticmethod
    def list_kinds() -> list[str]:
        return list(KINDS)


class TargetKind:
    """The kind of a target; ``target.kind.name`` is "llvm", "cuda", ..."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"TargetKind({self.name!r})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return self.name == other
        return isinstance(other, TargetKind) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


_CURRENT: contextvars.ContextVar[Target | None] = contextvars.ContextVar("kiln_target", default=None)


def _convert(kind: str, value, name: str, text: str):
    if kind == "list":
        if isinstance(value, (list, tuple)):
            return tuple(str(v) for v in value)
        if value is True or value == "":
            raise TargetError(f"target {text!r}: option -{name} needs a value, e.g. -{name}=a,b")
        return tuple(v for v in str(value).split(",") if v)
    if kind == "int":
        try:
            return int(value)
        except (TypeError, ValueError):
            raise TargetError(f"target {text!r}: option -{name} must be an integer, got {value!r}") from None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true"):
            return True
        if str(value).lower() in ("0", "false"):
            return False
        raise TargetError(f"target {text!r}: option -{name} must be true or false, got {value!r}")
    if value is True or value == "":
        raise TargetError(f"target {text!r}: option -{name} needs a value, e.g. -{name}=...")
    return str(value)


def _format(name: str, value) -> str:
    if isinstance(value, (tuple, list)):
        value = ",".join(value)
    elif isinstance(value, bool):
        value = "1" if value else "0"
    text = f"-{name}={value}"
    return shlex.quote(text) if any(c.isspace() for c in text) else text


def _keys(kind: str, attrs: dict) -> tuple:
    """User keys first, then the device's, then the kind's defaults (no duplicates)."""
    keys = list(attrs.get("keys", ()))
    device = attrs.get("device")
    if device == "adreno":
        keys += ["adreno", "opencl", "gpu"]
    elif device:
        keys.append(device)
    keys += _DEFAULT_KEYS[kind]
    out: list = []
    for key in keys:
        if key not in out:
            out.append(key)
    return tuple(out)


# Helpers with the seed API's names ----------------------------------------------------------


def arm_cpu(model: str = "unknown", options=None) -> Target:
    """An ARM CPU board by model name: ``arm_cpu("rasp4b")``, ``arm_cpu("pixel2")``."""
    presets = {
        "pixel2": "-mtriple=arm64-linux-android -mattr=+neon",
        "mate10": "-mtriple=arm64-linux-android -mattr=+neon",
        "p20": "-mtriple=arm64-linux-android -mattr=+neon",
        "rasp3b": "-mtriple=armv7l-linux-gnueabihf -mattr=+neon",
        "rasp4b": "-mtriple=armv8l-linux-gnueabihf -mcpu=cortex-a72 -mattr=+neon,+vfp4",
        "rasp4b64": "-mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon",
        "rk3399": "-mtriple=aarch64-linux-gnu -mattr=+neon",
        "pynq": "-mtriple=armv7a-linux-eabi -mattr=+neon",
        "ultra96": "-mtriple=aarch64-linux-gnu -mattr=+neon",
        "beagleai": "-mtriple=armv7a-linux-gnueabihf -mattr=+neon,+vfp4,+thumb2 -mcpu=cortex-a15",
        "stm32mp1": "-mtriple=armv7a-linux-gnueabihf -mattr=+neon,+vfp4,+thumb2 -mcpu=cortex-a7",
        "thunderx": "-mtriple=aarch64-linux-gnu -mattr=+neon,+crc,+lse -mcpu=thunderxt88",
    }
    preset = presets.get(model, "-mtriple=aarch64-linux-gnu -mattr=+neon")
    extra = " ".join(options) if isinstance(options, (list, tuple)) else (options or "")
    return Target(f"llvm -keys=arm_cpu,cpu -device=arm_cpu -model={model} {preset} {extra}".strip())


def cuda(model: str = "unknown", arch: str | None = None, options=None) -> Target:
    """A CUDA GPU: ``cuda(arch="sm_90")``."""
    text = f"cuda -model={model}" + (f" -arch={arch}" if arch else "")
    extra = " ".join(options) if isinstance(options, (list, tuple)) else (options or "")
    return Target(f"{text} {extra}".strip())


def opencl(model: str = "unknown", options=None) -> Target:
    extra = " ".join(options) if isinstance(options, (list, tuple)) else (options or "")
    return Target(f"opencl -model={model} {extra}".strip())


def adreno(model: str = "unknown", options=None) -> Target:
    """A Qualcomm Adreno GPU through OpenCL, hosted by an Android arm64 CPU."""
    extra = " ".join(options) if isinstance(options, (list, tuple)) else (options or "")
    return Target(f"opencl -device=adreno -model={model} {extra}".strip(),
                  host="llvm -mtriple=aarch64-linux-android")


# Microcontroller models TVM 0.13's ``micro()`` knows (and kiln's emulated boards) -> their -mcpu.
MICRO_SUPPORTED_MODELS = {
    "host": None, "atsamd51": "cortex-m4", "cxd5602gg": "cortex-m4", "esp32": None, "imxrt10xx": "cortex-m7",
    "mps2_an385": "cortex-m3", "mps2_an386": "cortex-m4", "mps2_an500": "cortex-m7", "mps2_an521": "cortex-m33",
    "mps3_an547": "cortex-m55", "nrf52840": "cortex-m4", "nrf5340dk": "cortex-m33", "rp2040": "cortex-m0",
    "sam3x8e": "cortex-m3", "stm32f746xx": "cortex-m7", "stm32h7xx": "cortex-m7", "stm32l4r5zi": "cortex-m4",
    "stm32u5xx": "cortex-m33",
}


def micro(model: str = "host", options=None) -> Target:
    """A microcontroller by model: ``micro("host")`` is ``c -model=host``; ``micro("stm32f746xx")`` is
    ``c -keys=arm_cpu,cpu -mcpu=cortex-m7 -model=stm32f746xx`` (Cortex-M models get the arm_cpu schedules)."""
    if model not in MICRO_SUPPORTED_MODELS:
        raise TargetError(f"micro: model {model!r} is unknown; known: {', '.join(sorted(MICRO_SUPPORTED_MODELS))}")
    mcpu = MICRO_SUPPORTED_MODELS[model]
    text = f"c -keys=arm_cpu,cpu -mcpu={mcpu} -model={model}" if mcpu else f"c -model={model}"
    extra = " ".join(options) if isinstance(options, (list, tuple)) else (options or "")
    return Target(f"{text} {extra}".strip())


def create(target) -> Target:
    return Target(target)
