"""The accelerator's configuration: ``env = vta.get_env()`` and what the compiler derives from it.

A configuration is a ``vta_config.json`` of log2 sizes, as VTA's own: LOG_BATCH, LOG_BLOCK (or
LOG_BLOCK_IN / LOG_BLOCK_OUT), LOG_{INP,WGT,ACC}_WIDTH (8, 8, 32 bits: the only widths built),
LOG_{UOP,INP,WGT,ACC}_BUFF_SIZE (SRAM bytes), plus the cycle model's DMA_BYTES_PER_CYCLE,
DMA_LATENCY and CMD_QUEUE_DEPTH. A plain size (``"BLOCK_IN": 16``, ``"INP_BUFF_SIZE": 32768``)
is accepted too and must be a power of two. An invalid configuration raises ``VTAConfigError``
with one line naming the constraint it breaks.

``with vta.Environment(cfg):`` makes a configuration current for a block (a context variable,
no global state); ``vta.get_env()`` returns the current one, else the default file's.
"""

from __future__ import annotations

import contextvars
import json
import os

from ..errors import KilnError

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "vta_config.json")
_current: contextvars.ContextVar = contextvars.ContextVar("kiln_vta_env", default=None)
_default_env = None

# Instruction field widths that do not depend on the configuration (isa.py lays them out).
ITER_BITS = 14  # GEMM/ALU loop extents
UOP_WORD_BITS = 32
INSN_BITS = 128

_SIZE_KEYS = ("BATCH", "BLOCK_IN", "BLOCK_OUT", "INP_WIDTH", "WGT_WIDTH", "ACC_WIDTH",
              "UOP_BUFF_SIZE", "INP_BUFF_SIZE", "WGT_BUFF_SIZE", "ACC_BUFF_SIZE")
_OTHER_KEYS = ("TARGET", "HW_VER", "DMA_BYTES_PER_CYCLE", "DMA_LATENCY", "CMD_QUEUE_DEPTH",
               "CLOCK_MHZ", "LOG_BLOCK")
_DEFAULTS = {"DMA_BYTES_PER_CYCLE": 8, "DMA_LATENCY": 64, "CMD_QUEUE_DEPTH": 512, "CLOCK_MHZ": 100,
             "TARGET": "sim", "HW_VER": "0.0.2"}


class VTAConfigError(KilnError, ValueError):
    """A VTA configuration breaks a constraint; the message names it."""


def _log2_exact(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value & (value - 1):
        raise VTAConfigError(f"vta config: {name}={value!r} is not a power of two; "
                             f"give LOG_{name} (its log2) or a power-of-two {name}")
    return value.bit_length() - 1


def _read_logs(cfg: dict) -> dict:
    """LOG_<key> for every size key, from LOG_<key>, <key>, or LOG_BLOCK for the two blocks."""
    known = set(_OTHER_KEYS) | set(_SIZE_KEYS) | {"LOG_" + k for k in _SIZE_KEYS}
    for key in cfg:
        if key not in known:
            raise VTAConfigError(f"vta config: unknown key {key!r}; known keys: LOG_BATCH, LOG_BLOCK, "
                                 "LOG_*_WIDTH, LOG_*_BUFF_SIZE, DMA_BYTES_PER_CYCLE, DMA_LATENCY, CMD_QUEUE_DEPTH")
    logs = {}
    for key in _SIZE_KEYS:
        if "LOG_" + key in cfg:
            v = cfg["LOG_" + key]
            if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > 30:
                raise VTAConfigError(f"vta config: LOG_{key}={v!r} must be an integer in 0..30")
            logs[key] = v
        elif key in cfg:
            logs[key] = _log2_exact(key, cfg[key])
        elif key in ("BLOCK_IN", "BLOCK_OUT") and "LOG_BLOCK" in cfg:
            logs[key] = cfg["LOG_BLOCK"]
        else:
            raise VTAConfigError(f"vta config: LOG_{key} is missing" +
                                 ("; give LOG_BLOCK or LOG_BLOCK_IN/LOG_BLOCK_OUT" if "BLOCK" in key else ""))
    return logs


class Environment:
    """The hardware configuration and the names the compiler uses with it.

    >>> env = vta.get_env()
    >>> env.BATCH, env.BLOCK_IN, env.BLOCK_OUT, env.inp_dtype, env.acc_scope
    (1, 16, 16, 'int8', 'local.acc_buffer')
    """

    inp_scope = "local.inp_buffer"
    wgt_scope = "local.wgt_buffer"
    acc_scope = "local.acc_buffer"
    dma_copy = "dma_copy"  # pragma on a copy loop: a LOAD/STORE
    alu = "alu"  # pragma on an elementwise loop over accumulators: an ALU instruction
    target_host = "llvm"

    def __init__(self, cfg: dict | None = None):
        cfg = dict(_DEFAULTS, **(cfg if cfg is not None else _load(DEFAULT_CONFIG)))
        self.cfg = cfg
        logs = _read_logs(cfg)
        self.LOG_BATCH, self.LOG_BLOCK_IN, self.LOG_BLOCK_OUT = logs["BATCH"], logs["BLOCK_IN"], logs["BLOCK_OUT"]
        self.LOG_INP_WIDTH, self.LOG_WGT_WIDTH, self.LOG_ACC_WIDTH = logs["INP_WIDTH"], logs["WGT_WIDTH"], logs["ACC_WIDTH"]
        for key in ("UOP", "INP", "WGT", "ACC"):
            setattr(self, f"LOG_{key}_BUFF_SIZE", logs[f"{key}_BUFF_SIZE"])
        self.TARGET = str(cfg["TARGET"])
        self.HW_VER = str(cfg["HW_VER"])
        for key in ("DMA_BYTES_PER_CYCLE", "DMA_LATENCY", "CMD_QUEUE_DEPTH", "CLOCK_MHZ"):
            v = cfg[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if key == "DMA_LATENCY" else 1):
                raise VTAConfigError(f"vta config: {key}={v!r} must be a positive integer")
            setattr(self, key, v)
        self._derive()
        self._check()

    # -- derived sizes -------------------------------------------------------------------------
    def _derive(self) -> None:
        self.BATCH, self.BLOCK_IN, self.BLOCK_OUT = 1 << self.LOG_BATCH, 1 << self.LOG_BLOCK_IN, 1 << self.LOG_BLOCK_OUT
        self.INP_WIDTH, self.WGT_WIDTH, self.ACC_WIDTH = (1 << self.LOG_INP_WIDTH, 1 << self.LOG_WGT_WIDTH,
                                                          1 << self.LOG_ACC_WIDTH)
        self.OUT_WIDTH = self.INP_WIDTH
        self.UOP_BUFF_SIZE, self.INP_BUFF_SIZE = 1 << self.LOG_UOP_BUFF_SIZE, 1 << self.LOG_INP_BUFF_SIZE
        self.WGT_BUFF_SIZE, self.ACC_BUFF_SIZE = 1 << self.LOG_WGT_BUFF_SIZE, 1 << self.LOG_ACC_BUFF_SIZE
        # One "element" of each SRAM is the block the GEMM core consumes or produces in one cycle.
        self.INP_ELEM_BYTES = self.BATCH * self.BLOCK_IN * self.INP_WIDTH // 8
        self.WGT_ELEM_BYTES = self.BLOCK_OUT * self.BLOCK_IN * self.WGT_WIDTH // 8
        self.ACC_ELEM_BYTES = self.BATCH * self.BLOCK_OUT * self.ACC_WIDTH // 8
        self.OUT_ELEM_BYTES = self.BATCH * self.BLOCK_OUT * self.OUT_WIDTH // 8
        self.UOP_ELEM_BYTES = UOP_WORD_BITS // 8
        self.INP_DEPTH = self.INP_BUFF_SIZE // self.INP_ELEM_BYTES
        self.WGT_DEPTH = self.WGT_BUFF_SIZE // self.WGT_ELEM_BYTES
        self.ACC_DEPTH = self.ACC_BUFF_SIZE // self.ACC_ELEM_BYTES
        self.UOP_DEPTH = self.UOP_BUFF_SIZE // self.UOP_ELEM_BYTES
        self.inp_dtype, self.wgt_dtype, self.acc_dtype = (f"int{self.INP_WIDTH}", f"int{self.WGT_WIDTH}",
                                                          f"int{self.ACC_WIDTH}")
        self.out_dtype = self.inp_dtype
        self.mock_mode = False

    def _check(self) -> None:
        if (self.INP_WIDTH, self.WGT_WIDTH, self.ACC_WIDTH) != (8, 8, 32):
            raise VTAConfigError(f"vta config: LOG_INP_WIDTH/LOG_WGT_WIDTH/LOG_ACC_WIDTH = {self.LOG_INP_WIDTH}/"
                                 f"{self.LOG_WGT_WIDTH}/{self.LOG_ACC_WIDTH}; only int8 x int8 -> int32 (3/3/5) is built")
        for key, elem in (("UOP", self.UOP_ELEM_BYTES), ("INP", self.INP_ELEM_BYTES),
                          ("WGT", self.WGT_ELEM_BYTES), ("ACC", self.ACC_ELEM_BYTES)):
            size = getattr(self, f"{key}_BUFF_SIZE")
            if size < elem:
                raise VTAConfigError(f"vta config: LOG_{key}_BUFF_SIZE={getattr(self, f'LOG_{key}_BUFF_SIZE')} "
                                     f"({size} B) is smaller than one {key.lower()} block ({elem} B); raise it to "
                                     f"at least {elem.bit_length() - 1}")
        w = self.field_bits
        if w["uop"] > UOP_WORD_BITS - 1:
            raise VTAConfigError(f"vta config: LOG_UOP_BUFF_SIZE={self.LOG_UOP_BUFF_SIZE} gives {self.UOP_DEPTH} "
                                 "micro-ops, more than the 31-bit uop index of GEMM/ALU instructions holds")
        gemm_uop = w["acc"] + w["inp"] + w["wgt"]
        if gemm_uop > UOP_WORD_BITS:
            raise VTAConfigError(f"vta config: a GEMM micro-op needs {w['acc']}+{w['inp']}+{w['wgt']} = {gemm_uop} "
                                 "index bits (acc+inp+wgt depth), more than the 32-bit micro-op; shrink "
                                 "LOG_ACC/INP/WGT_BUFF_SIZE or grow the blocks")
        from .isa import layout_bits
        for op, bits in layout_bits(self).items():
            if bits > INSN_BITS:
                raise VTAConfigError(f"vta config: a {op} instruction needs {bits} bits, more than {INSN_BITS}; "
                                     "shrink the buffer sizes (their index fields)")

    @property
    def field_bits(self) -> dict:
        """Index widths: bits to address each SRAM's blocks and the micro-op buffer."""
        def bits(n):
            return max(1, (n - 1).bit_length())
        return {"uop": bits(self.UOP_DEPTH) + 1, "acc": bits(self.ACC_DEPTH), "inp": bits(self.INP_DEPTH),
                "wgt": bits(self.WGT_DEPTH)}

    # -- names the tutorials use ---------------------------------------------------------------
    @property
    def model(self) -> str:
        return (f"sim_{self.BATCH}x{self.BLOCK_IN}x{self.BLOCK_OUT}_i{self.INP_WIDTH}w{self.WGT_WIDTH}a{self.ACC_WIDTH}"
                f"_{self.LOG_UOP_BUFF_SIZE}_{self.LOG_INP_BUFF_SIZE}_{self.LOG_WGT_BUFF_SIZE}_{self.LOG_ACC_BUFF_SIZE}")

    @property
    def target(self):
        from ..target import Target
        return Target(f"ext_dev -device=vta -model={self.model}", host=self.target_host)

    target_vta_cpu = property(lambda self: self.target_host)

    @property
    def gemm(self):
        """The GEMM core as a tensor intrinsic (``s[C].tensorize(axis, env.gemm)``)."""
        from .intrin import gemm_intrin
        return gemm_intrin(self)

    def export(self) -> dict:
        """The configuration as log sizes (what a module records and the simulator is built from)."""
        out = {f"LOG_{k}": getattr(self, f"LOG_{k}") for k in
               ("BATCH", "BLOCK_IN", "BLOCK_OUT", "INP_WIDTH", "WGT_WIDTH", "ACC_WIDTH",
                "UOP_BUFF_SIZE", "INP_BUFF_SIZE", "WGT_BUFF_SIZE", "ACC_BUFF_SIZE")}
        out.update(TARGET=self.TARGET, HW_VER=self.HW_VER, DMA_BYTES_PER_CYCLE=self.DMA_BYTES_PER_CYCLE,
                   DMA_LATENCY=self.DMA_LATENCY, CMD_QUEUE_DEPTH=self.CMD_QUEUE_DEPTH, CLOCK_MHZ=self.CLOCK_MHZ)
        return out

    def replace(self, **changes) -> "Environment":
        """A copy with some keys changed: ``env.replace(LOG_BLOCK_IN=5, LOG_BLOCK_OUT=5)``."""
        return Environment({**self.export(), **changes})

    def __enter__(self):
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc):
        _current.reset(self._token)

    def __repr__(self) -> str:
        return f"vta.Environment({self.model})"


def _load(path: str) -> dict:
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as err:
        raise VTAConfigError(f"vta config: cannot read {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise VTAConfigError(f"vta config: {path} is not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(cfg, dict):
        raise VTAConfigError(f"vta config: {path} must hold a JSON object of LOG_* keys")
    return cfg


def from_file(path: str) -> Environment:
    """The configuration in a ``vta_config.json``."""
    return Environment(_load(os.fspath(path)))


def get_env() -> Environment:
    """The current configuration (``with vta.Environment(...)``), else the default vta_config.json."""
    global _default_env
    env = _current.get()
    if env is not None:
        return env
    if _default_env is None:
        _default_env = Environment()
    return _default_env
