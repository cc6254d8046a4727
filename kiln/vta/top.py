"""Operators for the accelerator: packed int8 conv2d and dense with a shift/clip requantize.

Layouts are VTA's packed ones: data NCHW{n}{c} as (N/BATCH, C/BLOCK_IN, H, W, BATCH, BLOCK_IN),
kernels OIHW{o}{i} as (O/BLOCK_OUT, I/BLOCK_IN, KH, KW, BLOCK_OUT, BLOCK_IN), outputs like data
with BLOCK_OUT. ``conv2d(env, ...)`` returns the tensors; ``schedule_conv2d(env, ops, tile)``
schedules them with DMA copies into the SRAM scopes, the GEMM intrinsic, one ALU stage for
``clip((acc [+ bias]) >> shift, lo, hi)`` and ``tile.vthreads`` virtual threads over output
channels. ``Tile`` is one point of the space kiln/vta/search.py explores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tile:
    """Output tile per step (rows, cols, output-channel blocks), input-channel blocks per load,
    and virtual threads (splitting the channel tile)."""

    h: int
    w: int
    co: int
    ci: int
    vthreads: int = 1


@dataclass(frozen=True)
class ConvShape:
    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    stride: int
    pad: int

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.kh) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad - self.kw) // self.stride + 1


@dataclass(frozen=True)
class DenseShape:
    """(m, k) x (n, k)^T: batch rows, input features, output features."""

    m: int
    k: int
    n: int


def conv2d(env, shape: ConvShape, shift: int, clip=(-128, 127), round_half_up: bool = False, bias: bool = False):
    """The packed conv2d + requantize: (data, kernel, data_pad, acc, alu, res) tensors.

    The requantize is ``clip(acc >> shift)``, or with round_half_up ``clip((acc + 2**(shift-1))
    >> shift)``: qnn.requantize of a power-of-two scale ratio with rounding="UPWARD". With bias, an
    int32 (O/BLOCK_OUT, BATCH, BLOCK_OUT) tensor is added to the accumulators first (the tensors
    then end with it: data, kernel, data_pad, acc, alu, res, bias)."""
    from kiln import te

    B, BI, BO = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
    dshape = (shape.n // B, shape.c // BI, shape.h, shape.w, B, BI)
    kshape = (shape.o // BO, shape.c // BI, shape.kh, shape.kw, BO, BI)
    data = te.placeholder(dshape, env.inp_dtype, name="data")
    kernel = te.placeholder(kshape, env.wgt_dtype, name="kernel")
    p = shape.pad
    if p:
        def pad_fn(n, c, y, x, b, i):
            inside = te.all(y >= p, y < shape.h + p, x >= p, x < shape.w + p)
            return te.if_then_else(inside, data[n, c, y - p, x - p, b, i], te.const(0, env.inp_dtype))
        dpad = te.compute((dshape[0], dshape[1], shape.h + 2 * p, shape.w + 2 * p, B, BI), pad_fn, name="data_pad")
    else:
        dpad = data
    ic = te.reduce_axis((0, dshape[1]), name="ic")
    ki = te.reduce_axis((0, BI), name="ki")
    dy = te.reduce_axis((0, shape.kh), name="dy")
    dx = te.reduce_axis((0, shape.kw), name="dx")
    s = shape.stride
    acc = te.compute((dshape[0], kshape[0], shape.oh, shape.ow, B, BO),
                     lambda n, o, y, x, b, j: te.sum(
                         dpad[n, ic, y * s + dy, x * s + dx, b, ki].astype(env.acc_dtype) *
                         kernel[o, ic, dy, dx, j, ki].astype(env.acc_dtype), axis=[ic, dy, dx, ki]),
                     name="res_conv")
    lo, hi = clip
    half = (1 << (shift - 1)) if round_half_up and shift > 0 else 0
    bias_t = te.placeholder((kshape[0], B, BO), env.acc_dtype, name="bias") if bias else None

    def total(n, o, y, x, b, j):
        return acc[n, o, y, x, b, j] + bias_t[o, b, j] if bias else acc[n, o, y, x, b, j]
    if half:
        out = te.compute(acc.shape, lambda *i: te.min(te.max((total(*i) + half) >> shift, lo), hi), name="res_alu")
    else:
        out = te.compute(acc.shape, lambda *i: te.min(te.max(total(*i) >> shift, lo), hi), name="res_alu")
    res = te.compute(acc.shape, lambda *i: out(*i).astype(env.out_dtype), name="res")
    return (data, kernel, dpad, acc, out, res) + ((bias_t,) if bias else ())


def schedule_conv2d(env, tensors, tile: Tile):
    from kiln import te

    data, kernel, dpad, acc, out, res = tensors[:6]
    bias = tensors[6] if len(tensors) > 6 else None
    s = te.create_schedule(res.op)
    if dpad is not data:
        s[dpad].compute_inline()
    n, o, y, x, b, j = s[res].op.axis
    o_o, o_i = s[res].split(o, factor=tile.co)
    y_o, y_i = s[res].split(y, factor=tile.h)
    x_o, x_i = s[res].split(x, factor=tile.w)
    s[res].reorder(n, o_o, y_o, x_o, o_i, y_i, x_i, b, j)
    attach = x_o
    if tile.vthreads > 1:
        v, o_i2 = s[res].split(o_i, nparts=tile.vthreads)
        s[res].bind(v, te.thread_axis("cthread"))
        s[res].reorder(n, o_o, y_o, x_o, v, o_i2, y_i, x_i, b, j)
        attach = v
    s[acc].set_scope(env.acc_scope)
    s[out].set_scope(env.acc_scope)
    s[acc].compute_at(s[res], attach)
    s[out].compute_at(s[res], attach)
    s[out].pragma(s[out].op.axis[0], env.alu)
    s[res].pragma(y_i, env.dma_copy)
    an, ao, ay, ax, ab, aj = s[acc].op.axis
    ic, dy, dx, ki = s[acc].op.reduce_axis
    ic_o, ic_i = s[acc].split(ic, factor=tile.ci)
    s[acc].reorder(ic_o, an, ao, ay, ic_i, dy, dx, ax, ab, aj, ki)
    cdata = s.cache_read(dpad, env.inp_scope, [acc])
    ckernel = s.cache_read(kernel, env.wgt_scope, [acc])
    s[cdata].compute_at(s[acc], ic_o)
    s[ckernel].compute_at(s[acc], ic_o)
    s[cdata].pragma(s[cdata].op.axis[0], env.dma_copy)
    s[ckernel].pragma(s[ckernel].op.axis[0], env.dma_copy)
    s[acc].tensorize(ab, env.gemm)
    if bias is not None:
        cbias = s.cache_read(bias, env.acc_scope, [out])
        s[cbias].compute_at(s[res], attach)
        s[cbias].pragma(s[cbias].op.axis[0], env.dma_copy)
        return s, [data, kernel, bias, res]
    return s, [data, kernel, res]


def dense(env, m: int, k: int, n: int, shift: int, clip=(-128, 127), round_half_up: bool = False, bias: bool = False):
    """Packed dense: data (M/BATCH, K/BLOCK_IN, BATCH, BLOCK_IN) x weight (N/BLOCK_OUT, K/BLOCK_IN,
    BLOCK_OUT, BLOCK_IN), requantized as conv2d's: ``clip((acc [+ bias] [+ 2**(shift-1)]) >> shift)``.
    Returns (data, weight, acc, alu, res) and, with bias, the int32 (N/BLOCK_OUT, BATCH, BLOCK_OUT)
    bias tensor last."""
    from kiln import te

    B, BI, BO = env.BATCH, env.BLOCK_IN, env.BLOCK_OUT
    data = te.placeholder((m // B, k // BI, B, BI), env.inp_dtype, name="data")
    weight = te.placeholder((n // BO, k // BI, BO, BI), env.wgt_dtype, name="weight")
    ko = te.reduce_axis((0, k // BI), name="ko")
    ki = te.reduce_axis((0, BI), name="ki")
    acc = te.compute((m // B, n // BO, B, BO), lambda i, j, b, c: te.sum(
        data[i, ko, b, ki].astype(env.acc_dtype) * weight[j, ko, c, ki].astype(env.acc_dtype), axis=[ko, ki]),
        name="res_gemm")
    lo, hi = clip
    half = (1 << (shift - 1)) if round_half_up and shift > 0 else 0
    bias_t = te.placeholder((n // BO, B, BO), env.acc_dtype, name="bias") if bias else None

    def total(i, j, b, c):
        return acc[i, j, b, c] + bias_t[j, b, c] if bias else acc[i, j, b, c]
    if half:
        out = te.compute(acc.shape, lambda *i: te.min(te.max((total(*i) + half) >> shift, lo), hi), name="res_alu")
    else:
        out = te.compute(acc.shape, lambda *i: te.min(te.max(total(*i) >> shift, lo), hi), name="res_alu")
    res = te.compute(acc.shape, lambda *i: out(*i).astype(env.out_dtype), name="res")
    return (data, weight, acc, out, res) + ((bias_t,) if bias else ())


def dense_tile(env, m: int, k: int, n: int, bias: bool = False) -> tuple:
    """(tile_n, tile_k, vthreads) for schedule_dense: the largest output- and reduction-block
    tiles that fit the SRAMs (two virtual threads when the output tile splits), or a
    CompileError naming the SRAM that cannot hold even one block of each."""
    from kiln.errors import CompileError

    mb, kb, nb = m // env.BATCH, k // env.BLOCK_IN, n // env.BLOCK_OUT
    for tn in sorted((d for d in range(1, nb + 1) if nb % d == 0), reverse=True):
        for tk in sorted((d for d in range(1, kb + 1) if kb % d == 0), reverse=True):
            vt = 2 if tn % 2 == 0 else 1
            use = {"inp": vt * mb * tk, "wgt": tn * tk, "acc": (2 + bias) * mb * tn}
            if use["inp"] <= env.INP_DEPTH and use["wgt"] <= env.WGT_DEPTH and use["acc"] <= env.ACC_DEPTH:
                return tn, tk, vt
    raise CompileError(f"vta dense {m}x{k}x{n}: one block of output and reduction needs {mb} inp, 1 wgt and "
                       f"{(2 + bias) * mb} acc blocks; the SRAMs hold {env.INP_DEPTH}, {env.WGT_DEPTH} and "
                       f"{env.ACC_DEPTH}")


def schedule_dense(env, tensors, tile_n: int, tile_k: int, vthreads: int = 1):
    from kiln import te

    data, weight, acc, out, res = tensors[:5]
    bias = tensors[5] if len(tensors) > 5 else None
    s = te.create_schedule(res.op)
    i, j, b, c = s[res].op.axis
    j_o, j_i = s[res].split(j, factor=tile_n)
    s[res].reorder(i, j_o, j_i, b, c)
    attach = j_o
    if vthreads > 1:
        v, j_i2 = s[res].split(j_i, nparts=vthreads)
        s[res].bind(v, te.thread_axis("cthread"))
        attach = v
    for t in (acc, out):
        s[t].set_scope(env.acc_scope)
        s[t].compute_at(s[res], attach)
    s[out].pragma(s[out].op.axis[0], env.alu)
    ai, aj, ab, ac = s[acc].op.axis
    ko, ki = s[acc].op.reduce_axis
    ko_o, ko_i = s[acc].split(ko, factor=tile_k)
    s[acc].reorder(ko_o, ai, aj, ko_i, ab, ac, ki)
    cdata = s.cache_read(data, env.inp_scope, [acc])
    cweight = s.cache_read(weight, env.wgt_scope, [acc])
    for t in (cdata, cweight):
        s[t].compute_at(s[acc], ko_o)
        s[t].pragma(s[t].op.axis[0], env.dma_copy)
    s[acc].tensorize(ab, env.gemm)
    if bias is not None:
        cbias = s.cache_read(bias, env.acc_scope, [out])
        s[cbias].compute_at(s[res], attach)
        s[cbias].pragma(s[cbias].op.axis[0], env.dma_copy)
        return s, [data, weight, bias, res]
    return s, [data, weight, res]


# -- packing and numpy references --------------------------------------------------------------
def pack_nchw(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n // batch, batch, c // block, block, h, w).transpose(0, 2, 4, 5, 1, 3).copy()


def unpack_nchw(x: np.ndarray) -> np.ndarray:
    nb, cb, h, w, b, c = x.shape
    return x.transpose(0, 4, 1, 5, 2, 3).reshape(nb * b, cb * c, h, w)


def pack_nk(x: np.ndarray, rows: int, block: int) -> np.ndarray:
    """(M, K) -> (M/rows, K/block, rows, block): dense data (rows = BATCH) and weights (rows = BLOCK_OUT)."""
    m, k = x.shape
    return x.reshape(m // rows, rows, k // block, block).transpose(0, 2, 1, 3).copy()


def unpack_nk(x: np.ndarray) -> np.ndarray:
    mb, nb, b, c = x.shape
    return x.transpose(0, 2, 1, 3).reshape(mb * b, nb * c)


def pack_oihw(w: np.ndarray, bo: int, bi: int) -> np.ndarray:
    o, i, kh, kw = w.shape
    return w.reshape(o // bo, bo, i // bi, bi, kh, kw).transpose(0, 2, 4, 5, 1, 3).copy()


def conv2d_reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int, shift: int, clip=(-128, 127),
                     bias: np.ndarray | None = None, round_half_up: bool = False):
    """int8 NCHW x OIHW -> int8, computed in int64 by numpy: clip((conv + bias [+ half]) >> shift)."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for dy in range(kh):
        for dx in range(kw):
            patch = x[:, :, dy:dy + stride * oh:stride, dx:dx + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, dy, dx].astype(np.int64))
    if bias is not None:
        out += bias.astype(np.int64).reshape(1, -1, 1, 1)
    if round_half_up and shift > 0:
        out += 1 << (shift - 1)
    out = out.astype(np.int32)  # the accelerator accumulates in int32 (no overflow at these sizes)
    return np.clip(out >> shift, *clip).astype(np.int8)
