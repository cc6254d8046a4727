"""The C simulators (src/vta/), built on first use with the system C compiler and called via ctypes.

``run(env, insns, uops, arrays, mode)`` executes an encoded instruction stream on the functional
simulator (``mode="functional"``: bit-exact, fastest) or the cycle model (``mode="cycle"``: also
bit-exact, and it times the pipeline) and returns a ``Stats``. This file is runtime-side: it
imports numpy and ctypes only, so an RPC server can serve the simulator as a device.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..errors import KilnError

SRC = Path(__file__).resolve().parents[2] / "src" / "vta"
_SOURCES = ("decode.c", "exec.c", "sim.c")
MODES = {"functional": 0, "cycle": 1}
_lib = None


class VTASimError(KilnError):
    """The simulator refused an instruction stream (out-of-range access, deadlock, bad opcode)."""


class _Config(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int32) for name in (
        "log_batch", "log_block_in", "log_block_out", "inp_depth", "wgt_depth", "acc_depth", "uop_depth",
        "uop_bits", "acc_bits", "inp_bits", "wgt_bits", "dma_bytes_per_cycle", "dma_latency", "cmd_queue_depth")]


STAT_FIELDS = ("cycles", "busy_load", "busy_compute", "busy_store", "busy_fetch", "busy_dma", "gemm_cycles",
               "alu_cycles", "gemm_blocks", "alu_blocks", "load_bytes", "store_bytes", "uop_bytes", "stall_load",
               "stall_compute", "stall_store")


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in STAT_FIELDS] + [("insn_count", ctypes.c_uint64 * 5)]


class Stats(dict):
    """Counters of one run: cycles, per-unit busy cycles, bytes moved, instructions by opcode.

    ``utilization()`` gives each unit's busy fraction of the run (cycle model only).
    """

    def utilization(self) -> dict:
        total = max(self["cycles"], 1)
        return {"gemm": self["gemm_cycles"] / total, "alu": self["alu_cycles"] / total,
                "load": self["busy_load"] / total, "compute": self["busy_compute"] / total,
                "store": self["busy_store"] / total, "dma": self["busy_dma"] / total,
                "fetch": self["busy_fetch"] / total}


def _compiler() -> str:
    for cc in ("cc", "gcc", "clang"):
        for d in os.get_exec_path():
            if os.access(os.path.join(d, cc), os.X_OK):
                return cc
    raise KilnError("the VTA simulator needs a C compiler: install gcc (apt-get install gcc) or clang")


def _build_dir() -> str:
    from .. import config
    root = config.get().cache_dir
    if root.strip().lower() in ("", "off", "0", "none", "false", "no"):
        return tempfile.mkdtemp(prefix="kiln-vta-")
    path = os.path.join(os.path.abspath(os.path.expanduser(root)), "vta")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return tempfile.mkdtemp(prefix="kiln-vta-")  # a folder others can write: not for code we load
    except OSError:
        return tempfile.mkdtemp(prefix="kiln-vta-")
    return path


def library() -> ctypes.CDLL:
    """The simulator library, compiled once per source version."""
    global _lib
    if _lib is not None:
        return _lib
    files = [SRC / name for name in _SOURCES]
    missing = [str(f) for f in files + [SRC / "vta_sim.h"] if not f.is_file()]
    if missing:
        raise KilnError(f"the VTA simulator sources {missing} are missing; run kiln from its source tree")
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files + [SRC / "vta_sim.h"])).hexdigest()[:16]
    folder = _build_dir()
    so = os.path.join(folder, f"libvta-sim-{digest}.so")
    if not os.path.exists(so):
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
        os.close(fd)
        try:
            cmd = [_compiler(), "-std=gnu11", "-O2", "-Wall", "-fPIC", "-shared", "-fvisibility=hidden",
                   *map(str, files), "-o", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                raise KilnError(f"compiling the VTA simulator failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
            os.replace(tmp, so)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    lib = ctypes.CDLL(so)
    lib.vta_run.restype = ctypes.c_int
    lib.vta_run.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                            ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                            ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Stats), ctypes.c_char_p, ctypes.c_int]
    lib.vta_decode.restype = ctypes.c_int
    lib.vta_decode.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
    _lib = lib
    return lib


def c_config(hw: dict) -> _Config:
    """The C struct from a configuration's exported dict (``env.export()``), derived like environment.py."""
    b, bi, bo = 1 << hw["LOG_BATCH"], 1 << hw["LOG_BLOCK_IN"], 1 << hw["LOG_BLOCK_OUT"]
    depth = {"inp": (1 << hw["LOG_INP_BUFF_SIZE"]) // (b * bi), "wgt": (1 << hw["LOG_WGT_BUFF_SIZE"]) // (bo * bi),
             "acc": (1 << hw["LOG_ACC_BUFF_SIZE"]) // (b * bo * 4), "uop": (1 << hw["LOG_UOP_BUFF_SIZE"]) // 4}

    def bits(n):
        return max(1, (n - 1).bit_length())
    return _Config(hw["LOG_BATCH"], hw["LOG_BLOCK_IN"], hw["LOG_BLOCK_OUT"], depth["inp"], depth["wgt"],
                   depth["acc"], depth["uop"], bits(depth["uop"]) + 1, bits(depth["acc"]), bits(depth["inp"]),
                   bits(depth["wgt"]), hw["DMA_BYTES_PER_CYCLE"], hw["DMA_LATENCY"], hw["CMD_QUEUE_DEPTH"])


DECODED_FIELDS = ("opcode", "pop_prev", "pop_next", "push_prev", "push_next", "memory_type", "dram_seg",
                  "sram_base", "dram_base", "y_size", "x_size", "x_stride", "y_pad_0", "y_pad_1", "x_pad_0",
                  "x_pad_1", "reset", "alu_opcode", "use_imm", "imm", "uop_bgn", "uop_end", "iter_out", "iter_in",
                  "dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in", "wgt_factor_out",
                  "wgt_factor_in")


def c_decode(hw: dict, word: np.ndarray) -> dict:
    """The C decoder's reading of one 128-bit instruction (for the round-trip test)."""
    word = np.ascontiguousarray(word, dtype=np.uint64)
    out = (ctypes.c_int64 * len(DECODED_FIELDS))()
    cfg = c_config(hw)
    if library().vta_decode(ctypes.byref(cfg), word.ctypes.data, out) < 0:
        raise VTASimError(f"undefined opcode in {word}")
    return dict(zip(DECODED_FIELDS, list(out)))


def run(hw: dict, insns: np.ndarray, uops: np.ndarray, segments, mode: str = "functional") -> Stats:
    """Execute ``insns`` ((n, 2) uint64) with micro-ops ``uops`` (uint32) on DRAM ``segments``.

    ``segments`` are (address, nbytes) pairs or numpy arrays: segment k of every LOAD/STORE.
    """
    if mode not in MODES:
        raise ValueError(f"simulator mode {mode!r}; use one of {sorted(MODES)}")
    if len(segments) > 15:
        raise VTASimError(f"a call passes {len(segments)} arrays; the DMA segment field addresses at most 15")
    insns = np.ascontiguousarray(insns, dtype=np.uint64)
    uops = np.ascontiguousarray(uops, dtype=np.uint32)
    ptrs = (ctypes.c_void_p * max(len(segments), 1))()
    sizes = (ctypes.c_int64 * max(len(segments), 1))()
    for k, seg in enumerate(segments):
        if isinstance(seg, np.ndarray):
            ptrs[k], sizes[k] = seg.ctypes.data, seg.nbytes
        else:
            ptrs[k], sizes[k] = seg
    cfg, stats = c_config(hw), _Stats()
    err = ctypes.create_string_buffer(512)
    rc = library().vta_run(ctypes.byref(cfg), insns.ctypes.data, len(insns), uops.ctypes.data, len(uops),
                           ptrs, sizes, len(segments), MODES[mode], ctypes.byref(stats), err, len(err))
    if rc:
        raise VTASimError(f"VTA {mode} simulator: {err.value.decode()}")
    out = Stats({name: getattr(stats, name) for name in STAT_FIELDS})
    out["insn_count"] = dict(zip(("LOAD", "STORE", "GEMM", "FINISH", "ALU"), list(stats.insn_count)))
    return out
