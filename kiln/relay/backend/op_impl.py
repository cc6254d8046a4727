"""How each relay op is computed and scheduled: the table from op names to topi.

``OP_IMPLS[name]`` is an ``OpImpl``:

- ``compute(attrs, inputs, out_type, ctx)`` builds the op's TE tensor(s) from its input tensors.
  ``out_type`` is the relay type the type checker inferred (a TensorType, or a TupleType for
  split), so shape-changing ops need not re-derive their output shape. ``ctx.topi`` is the
  target's CPU operator package (``topi.x86`` or ``topi.arm_cpu``) and ``ctx.cfg`` the tuning
  config of the op (None: topi's defaults).
- ``schedule``: the key of ``SCHEDULES`` used when this op is the anchor of a fused group
  (a string, or a function of the attrs for ops whose schedule depends on the layout).
- ``prepack``: for a weight that is a constant, how to transform it once at build time
  (conv2d's blocked kernel layout), see ``WeightTransform``.

A literal table (no registration by import side effects): adding an op means adding a line.
Ops topi lacks (variance, edge padding, strided slices in relay's clamping rules) are written
here with plain ``te.compute``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import numpy as np

from kiln import te, tir, topi
from kiln.topi import bitwise as topi_bitwise
from kiln.topi import data_dependent as topi_data_dependent
from kiln.topi import fast_math as topi_fast_math
from kiln.topi import grid_sample as topi_grid_sample
from kiln.topi import linear_attention as topi_linear_attention
from kiln.topi import rnn as topi_rnn
from kiln.topi import scatter as topi_scatter
from kiln.topi import sort as topi_sort
from kiln.topi import vision as topi_vision
from kiln.errors import CompileError
from kiln.ir.expr import const
from kiln.topi.utils import knob

from ..expr import Call
from ..op import layout
from ..op.registry import OpPattern
from ..op.transform import slice_ranges


@dataclass(frozen=True)
class OpImpl:
    compute: Callable
    schedule: str | Callable = "injective"
    prepack: Callable | None = None


@dataclass(frozen=True)
class WeightTransform:
    """Replace constant input ``index`` by ``fn(array)``, of shape ``shape``, before the call."""

    index: int
    shape: tuple
    fn: Callable
    key: tuple  # identifies the transform in the kernel cache
    dtype: str | None = None  # the transformed constant's dtype, when not the original's


@dataclass
class ComputeCtx:
    topi: object          # topi.x86 or topi.arm_cpu
    cfg: object = None    # tuning config of this op (autotvm ConfigEntity or dict), or None
    prepacked: bool = False  # the weight input is already transformed by the op's prepack


# -- helpers --------------------------------------------------------------------------------------

def _shape(out_type) -> tuple:
    return tuple(int(d) for d in out_type.shape)


def _out_dtype(attrs, x) -> str:
    return attrs.get("out_dtype") or str(x.dtype)


def _unary(fn):
    return OpImpl(lambda a, x, t, ctx: fn(x[0]))


def _binary(fn):
    return OpImpl(lambda a, x, t, ctx: fn(x[0], x[1]))


def _reshape(a, x, t, ctx):
    """Ops that only regroup elements (reshape, squeeze, expand_dims, batch_flatten)."""
    return topi.reshape(x[0], _shape(t))


def _clip(a, x, t, ctx):
    data = x[0]
    lo, hi = float(a.a_min), float(a.a_max)
    if not str(data.dtype).startswith(("float", "bfloat")):
        info = np.iinfo(str(data.dtype))
        lo, hi = max(lo, info.min), min(hi, info.max)
        lo, hi = int(lo), int(hi)
    else:
        top = 3.3895313892515355e38 if str(data.dtype) == "bfloat16" else float(np.finfo(str(data.dtype)).max)
        lo, hi = max(lo, -top), min(hi, top)  # no inf constants in TIR
    return topi.nn.clip(data, lo, hi)


def _bias_add(a, x, t, ctx):
    data, bias = x
    axis = a.axis % len(data.shape)
    return te.compute(data.shape, lambda *i: data(*i) + bias(i[axis]), name="T_bias_add", tag="broadcast")


def _reduce(fn):
    def compute(a, x, t, ctx):
        return fn(x[0], a.axis, a.keepdims, a.exclude)
    return OpImpl(compute, "reduce")


def _reduce_axes(a, ndim: int) -> list:
    return topi.reduction.normalize_axes(ndim, a.axis, a.exclude)


def _arg(fn):
    def compute(a, x, t, ctx):
        axes = _reduce_axes(a, len(x[0].shape))
        if len(axes) != 1:
            raise CompileError(f"argmax/argmin reduce one axis at a time; got axes {axes}")
        return fn(x[0], axes[0], a.keepdims, a.select_last_index)
    return OpImpl(compute, "reduce")


def _variance(a, x, t, ctx):
    """Population variance: E[(x - E[x])^2] over the axes (topi has no variance)."""
    data = x[0]
    axes = _reduce_axes(a, len(data.shape))
    count = 1
    for ax in axes:
        count *= int(data.shape[ax])
    mean = topi.mean(data, axes, keepdims=True)
    dev = te.compute(data.shape, lambda *i: data(*i) - mean(*[0 if k in axes else v for k, v in enumerate(i)]),
                     name="T_deviation", tag="elemwise")
    sq = topi.sum(topi.multiply(dev, dev), axes, keepdims=a.keepdims)
    return topi.divide(sq, const(float(count), str(data.dtype)))


def _strided_slice(a, x, t, ctx):
    data = x[0]
    shape = [int(d) for d in data.shape]
    starts, steps = [], []
    for n, sl in zip(shape, slice_ranges(shape, a.begin, a.end, a.strides, a.axes, a.slice_mode)):
        start, _, step = sl.indices(n)
        starts.append(start)
        steps.append(step)
    return te.compute(_shape(t), lambda *i: data(*[b + k * s for k, b, s in zip(i, starts, steps)]),
                      name="T_strided_slice", tag="injective")


def _take(a, x, t, ctx):
    return topi.take(x[0], x[1], a.axis, a.mode)


def _pad(a, x, t, ctx):
    data = x[0]
    before = [int(p[0]) for p in a.pad_width]
    after = [int(p[1]) for p in a.pad_width]
    if a.pad_mode == "constant":
        return topi.nn.pad(data, before, after, float(a.pad_value))
    if a.pad_mode == "reflect":
        return topi.nn.mirror_pad(data, before, after, mode="REFLECT")
    if a.pad_mode == "edge":
        shape = [int(d) for d in data.shape]
        return te.compute(_shape(t), lambda *i: data(*[tir.min(tir.max(k - b, 0), n - 1)
                                                      for k, b, n in zip(i, before, shape)]),
                          name="T_pad_edge", tag="injective")
    raise CompileError(f"nn.pad: pad_mode {a.pad_mode!r} has no compute; use constant, reflect or edge")


def _split(a, x, t, ctx):
    return topi.split(x[0], a.indices_or_sections, a.axis)


def _resize2d(a, x, t, ctx):
    return topi.image.resize2d(x[0], tuple(a.size), a.layout, a.method, a.coordinate_transformation_mode,
                               a.rounding_method or "round_prefer_floor", a.out_dtype or None,
                               separable=ctx.topi not in GPU_PACKAGES.values())


def _softmax(name):
    def compute(a, x, t, ctx):
        return getattr(ctx.topi, name)(x[0], a.axis)
    return compute


def _layer_norm(a, x, t, ctx):
    data, gamma, beta = x
    return ctx.topi.layer_norm(data, gamma if a.scale else None, beta if a.center else None, a.axis, a.epsilon)


# -- convolutions, dense, pooling -----------------------------------------------------------------

def _to_layout(kernel, src: str, dst: str, op: str):
    if src == dst:
        return kernel
    if sorted(src) != sorted(dst):
        raise CompileError(f"{op}: cannot convert kernel layout {src} to {dst}")
    return topi.transpose(kernel, [src.index(c) for c in dst])


def _blocks(a) -> tuple[int, int]:
    """(input, output) channel blocks of a conv2d: 0 for plain layouts (AlterOpLayout's NCHW16c)."""
    return layout.channel_block(a.data_layout), layout.channel_block(a.out_layout or a.data_layout)


def _winograd(a, kernel_hw, dtype=None, out_hw=None) -> bool:
    """Blocked in and out, 3x3, stride 1, no dilation, groups 1: Winograd F(2x2, 3x3) (x86); not
    for bfloat16 data on AMX CPUs (``dtype``: the direct kernel's tile products are faster there;
    the schedule named for Winograd hands such a compute to the direct one), nor for small
    images (``out_hw``) where the CPU facts say the direct kernel wins (``direct_is_faster``)."""
    from kiln.topi.x86.conv2d_winograd import applies_to, direct_is_faster

    ib, ob = _blocks(a)
    return bool(ib and ob) and applies_to(kernel_hw, a.strides, a.dilation, a.groups) and \
        not (dtype is not None and direct_is_faster(dtype, out_hw=out_hw))


def _conv2d_schedule(a) -> str:
    if any(_blocks(a)):
        if a.groups > 1:
            return "depthwise_conv2d_NCHWc"
        return "conv2d_winograd_NCHWc" if _winograd(a, a.kernel_size or ()) else "conv2d_NCHWc"
    return {"NCHW": "conv2d_nchw", "NHWC": "conv2d_nhwc"}.get(a.data_layout, "generic")


def _nchwc_config(a, dshape, wshape, cfg) -> dict:
    """conv2d_NCHWc's knobs for a blocked conv (shapes as NCHW data / OIHW kernel): the tuned (or
    default) ones, with oc_bn fixed to the output block AlterOpLayout chose, so that compute,
    pre-packed weight and layout agree."""
    from kiln.topi.x86.conv2d_nchwc import config_for_nchwc

    conf = config_for_nchwc(dshape, wshape, a.strides, tuple(a.padding), a.dilation, cfg)
    conf["oc_bn"] = _blocks(a)[1] or conf["oc_bn"]  # a plain output keeps the knob's block
    return conf


def _conv2d_blocked(a, x, t, ctx):
    data, kernel = x
    args = (a.strides, tuple(a.padding), a.dilation, _out_dtype(a, data))
    ib, ob = _blocks(a)
    out_channels = _shape(t)[1] * max(ob, 1)
    if not ctx.prepacked:
        kernel = _to_layout(kernel, a.kernel_layout, "OIHW", "nn.conv2d")
    if ctx.topi is topi.adreno:  # NCHW4c data, OIHW4o weights, read and written as images
        return topi.adreno.conv2d_NCHW4c(data, kernel, a.strides, tuple(a.padding), a.dilation, a.groups,
                                         args[3], ib, ob, prepacked=ctx.prepacked, cfg=ctx.cfg)
    if _winograd(a, a.kernel_size or (), data.dtype, _shape(t)[2:4]):
        conf = {"oc_bn": ob}
        tile_p = knob(ctx.cfg, "tile_p", None)
        if tile_p:
            conf["tile_p"] = tile_p
        return ctx.topi.conv2d_winograd_NCHWc(data, kernel, tuple(a.padding), args[3], cfg=conf,
                                              out_channels=out_channels)
    if a.groups == 1:
        dshape = layout.blocked_shape(tuple(int(d) for d in data.shape), a.data_layout, "NCHW")
        conf = _nchwc_config(a, dshape, (out_channels, dshape[1]) + tuple(int(d) for d in kernel.shape[2:4]), ctx.cfg)
        return ctx.topi.conv2d_NCHWc(data, kernel, *args, cfg=conf, out_channels=out_channels, plain_output=not ob)
    if ib and ib == ob and a.groups == out_channels:
        return ctx.topi.depthwise_conv2d_NCHWc(data, kernel, *args, cfg=ctx.cfg)
    raise CompileError(f"nn.conv2d: no compute for data_layout {a.data_layout!r} -> out_layout {a.out_layout!r} "
                       f"with groups={a.groups}; blocked layouts take groups 1 or depthwise convolutions")


def _cortex_m_tier(a, data_dtype, kernel_dtype, kshape):
    """The Cortex-M int8 tier of an NCHW/OIHW 1x1 conv on the current target (kiln/topi/cortex_m), or None."""
    from kiln.target import Target
    from kiln.topi.cortex_m.conv2d_int8 import applies

    if a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or any(_blocks(a)) or len(kshape) != 4:
        return None
    return applies(Target.current(allow_none=True), data_dtype, kernel_dtype, kshape, a.strides, a.padding,
                   a.dilation, a.groups)


def _cortex_m_other(a, data_dtype, kernel_dtype, kshape, in_channels):
    """The Cortex-M int8 depthwise / direct conv of an NCHW/OIHW conv (kiln/topi/cortex_m), or None."""
    from kiln.target import Target
    from kiln.topi.cortex_m.conv2d_int8 import conv_kind

    if a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or any(_blocks(a)) or len(kshape) != 4:
        return None
    return conv_kind(Target.current(allow_none=True), data_dtype, kernel_dtype, kshape, in_channels, a.strides,
                     a.padding, a.dilation, a.groups)


def _conv2d(a, x, t, ctx):
    data, kernel = x
    if ctx.prepacked:  # the OIHW shape the prepack started from (the Cortex-M choices below decide on it)
        khw = tuple(int(d) for d in (a.kernel_size or (1, 1)))
        kshape = (_shape(t)[1], int(data.shape[1]) // max(int(a.groups), 1)) + khw
    else:
        kshape = tuple(int(d) for d in kernel.shape)
    # only the Cortex-M prepacks widen a kernel (int8 -> int16 for the DSP): the choices below see int8
    kdtype = "int8" if ctx.prepacked and str(kernel.dtype) == "int16" else kernel.dtype
    tier = _cortex_m_tier(a, data.dtype, kdtype, kshape)
    if tier is not None:  # int8 on a Cortex-M core: the DSP/MVE dot product (kernel pre-shaped (O, C))
        from kiln.topi.cortex_m.conv2d_int8 import conv2d_1x1_int8
        kernel2d = kernel if ctx.prepacked else topi.reshape(kernel, kshape[:2])
        return conv2d_1x1_int8(data, kernel2d, tier, rows=knob(ctx.cfg, "rows", 2), cols=knob(ctx.cfg, "cols", 2),
                               unroll=knob(ctx.cfg, "unroll", True))
    kind = _cortex_m_other(a, data.dtype, kdtype, kshape, int(data.shape[1]))
    if kind is not None:  # int8 depthwise / im2col conv on a Cortex-M core (kiln/topi/cortex_m)
        from kiln.topi.cortex_m.conv2d_int8 import compute_other, prepack_im2col
        if kind[0] == "im2col" and not ctx.prepacked:
            kernel = topi.reshape(kernel, (kshape[0], -1))  # no padding needed when C*KH*KW fills the width
            if int(kernel.shape[1]) != prepack_im2col(np.zeros(kshape, "int8"), kind[1]).shape[1]:
                raise CompileError("nn.conv2d: the Cortex-M im2col conv needs its kernel constant (relay.build "
                                   "params=...) when C*KH*KW is not a multiple of the core's dot-product width")
        return compute_other(kind, data, kernel, a.strides, tuple(a.padding), kshape[2:],
                             rows=knob(ctx.cfg, "rows", 2), cols=knob(ctx.cfg, "cols", 2),
                             unroll=knob(ctx.cfg, "unroll", True))
    if any(_blocks(a)):
        return _conv2d_blocked(a, x, t, ctx)
    out_dtype = _out_dtype(a, data)
    args = (a.strides, tuple(a.padding), a.dilation)
    if a.data_layout == "NCHW":
        if ctx.prepacked:
            return ctx.topi.conv2d_nchw(data, kernel, *args, out_dtype, a.groups, cfg=ctx.cfg,
                                        out_channels=_shape(t)[1])
        kernel = _to_layout(kernel, a.kernel_layout, "OIHW", "nn.conv2d")
        if ctx.topi is topi.gpu and _gpu_winograd(a, kernel):
            return topi.gpu.conv2d_nchw_winograd(data, kernel, *args, out_dtype)
        return ctx.topi.conv2d_nchw(data, kernel, *args, out_dtype, a.groups, cfg=ctx.cfg)
    if a.data_layout == "NHWC":
        kernel = _to_layout(kernel, a.kernel_layout, "HWIO", "nn.conv2d")
        return ctx.topi.conv2d_nhwc(data, kernel, *args, out_dtype, a.groups, cfg=ctx.cfg)
    raise CompileError(f"nn.conv2d: data_layout {a.data_layout!r} has no compute; use NCHW or NHWC "
                       "(relay.transform.ConvertLayout converts a model)")


def _gpu_winograd(a, kernel) -> bool:
    """GPU 3x3 stride-1 convs by Winograd, when asked: ``PassContext(config={"relay.backend.
    gpu_winograd": True})`` (the direct kernel is the default; docs/topi.md)."""
    from kiln.topi.x86.conv2d_winograd import applies_to
    from kiln.transform import PassContext

    if not PassContext.current().config.get("relay.backend.gpu_winograd", False):
        return False
    return applies_to(tuple(int(d) for d in kernel.shape[2:]), a.strides, a.dilation, a.groups)


def _conv2d_prepack(a, types, cfg):
    """NCHW/OIHW conv2d (not depthwise): regroup the constant kernel into x86's blocked layout
    once at build time instead of in every call (docs/topi.md, "Pre-packed weights")."""
    from kiln.topi.x86.conv2d import config_for, prepack_kernel

    dshape, wshape = _shape(types[0]), _shape(types[1])
    tier = _cortex_m_tier(a, types[0].dtype, types[1].dtype, wshape)
    if tier is not None:  # (O, C) for the 1x1 dot (int16 for the DSP: widened once here)
        from kiln.topi.cortex_m.conv2d_int8 import operand_dtype, prepack_1x1
        return WeightTransform(1, wshape[:2], lambda w: prepack_1x1(w, tier), ("cortex_m_oc", tier),
                               operand_dtype(tier))
    kind = _cortex_m_other(a, types[0].dtype, types[1].dtype, wshape, dshape[1])
    if kind is not None:  # Cortex-M int8: the depthwise (DSP: int16 tap pairs), the im2col conv (O, K) rows
        if kind == ("depthwise", "dsp"):
            from kiln.topi.cortex_m.conv2d_direct import prepack_depthwise
            o, _, kh, kw = wshape
            return WeightTransform(1, (o, kh * kw + (kh * kw) % 2), prepack_depthwise, ("cortex_m_dw16",), "int16")
        if kind[0] != "im2col":
            return None
        from kiln.topi.cortex_m.conv2d_int8 import im2col_k, operand_dtype, prepack_im2col
        o, i, kh, kw = wshape
        tier = kind[1]
        return WeightTransform(1, (o, im2col_k(i, kh, kw, tier)), lambda w: prepack_im2col(w, tier),
                               ("cortex_m_im2col", tier), operand_dtype(tier))
    if any(_blocks(a)) and a.kernel_layout == "OIHW":
        return _conv2d_blocked_prepack(a, types, cfg)
    if a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or (a.groups > 1 and a.groups == dshape[1]):
        return None
    conf = config_for(dshape, wshape, a.strides, tuple(a.padding), a.dilation, a.groups, cfg)
    bn = int(conf["oc_bn"])
    o, i, kh, kw = wshape
    shape = (-(-o // bn), i, kh, kw, bn)
    return WeightTransform(1, shape, lambda w: prepack_kernel(w, bn), ("oc_bn", bn))


def _conv2d_blocked_prepack(a, types, cfg):
    """The constant OIHW kernel of a blocked conv in the layout its compute reads."""
    from kiln.topi.x86.conv2d_nchwc import prepack_kernel_nchwc
    from kiln.topi.x86.depthwise_conv2d_nchwc import prepack_depthwise_kernel

    ib, ob = _blocks(a)
    o, i, kh, kw = _shape(types[1])
    h, w = _shape(types[0])[2:4]
    pads = tuple(int(x) for x in a.padding) * (4 // max(1, len(a.padding)))
    out_hw = (h + pads[0] + pads[2] - kh + 1, w + pads[1] + pads[3] - kw + 1)  # stride 1 where it applies
    if _winograd(a, (kh, kw), types[0].dtype, out_hw):
        from kiln.topi.x86.conv2d_winograd import prepack_kernel_winograd
        return WeightTransform(1, (o // ob, 16, i // ib, ib, ob), lambda w: prepack_kernel_winograd(w, ib, ob),
                               ("winograd-kb", ib, ob))
    if a.groups == 1:
        dshape = layout.blocked_shape(_shape(types[0]), a.data_layout, "NCHW")
        bn = _nchwc_config(a, dshape, (o, i, kh, kw), cfg)["oc_bn"]
        ib = max(ib, 1)
        from kiln.topi.x86 import conv2d_bf16
        from kiln.topi.x86.conv2d_nchwc import accumulation_dtype
        if (str(types[1].dtype) == "bfloat16" and conv2d_bf16.bf16_tier() is None) or \
                (str(types[1].dtype) == "float16" and accumulation_dtype("float16", "float16") == "float32"):
            # No bfloat16 instructions (AVX2, AVX-512 before Cooper Lake), no native half
            # arithmetic (F16C only): the tile multiplies in float32, so the weight is widened once
            # here (exact) instead of at each load in the tile (docs/mixed-precision.md;
            # MobileNetV2 bf16 in znver3 code: 3.11x -> 1.36x float32)
            return WeightTransform(1, (o // bn, i // ib, kh, kw, ib, bn),
                                   lambda w: prepack_kernel_nchwc(np.asarray(w, np.float32), ib, bn),
                                   ("nchwc-widened", ib, bn), "float32")
        if conv2d_bf16.pairs_apply(types[0].dtype, types[1].dtype, ib):  # channel pairs (docs/topi.md)
            return WeightTransform(1, (o // bn, i // ib, kh, kw, ib // 2, bn, 2),
                                   lambda w: conv2d_bf16.prepack_kernel_nchwc_bf16(w, ib, bn), ("nchwc-bf16", ib, bn))
        return WeightTransform(1, (o // bn, i // ib, kh, kw, ib, bn),
                               lambda w: prepack_kernel_nchwc(w, ib, bn), ("nchwc", ib, bn))
    return WeightTransform(1, (o // ob, kh, kw, ob), lambda w: prepack_depthwise_kernel(w, ob), ("dw_nchwc", ob))


def _expand_depthwise(a, x, t, ctx):
    if not hasattr(ctx.topi, "expand_depthwise_NCHWc"):
        raise CompileError("nn.contrib_expand_depthwise_NCHWc has a compute for x86 CPUs only; build for an "
                           "x86 llvm target, or leave the expand and depthwise convs unfused")
    return ctx.topi.expand_depthwise_NCHWc(*x, a.strides, tuple(a.padding), a.act_min, a.act_max, cfg=ctx.cfg)


def _conv2d_bias(a, x, t, ctx):
    from kiln.topi.x86 import amx_bf16

    if ctx.topi is not topi.x86 or not amx_bf16.applies("bfloat16", "bfloat16", 32, 32):
        raise CompileError("nn.contrib_conv2d_bias_NCHWc: only x86 CPUs with AMX-BF16 compute it (FuseConvEpilogue makes it for them); build for "
                           "such a target, or leave the conv and its epilogue unfused")
    return amx_bf16.conv2d_amx_fused(x[0], x[1], x[2], x[3] if len(x) > 3 else None, a.strides, tuple(a.padding),
                                     a.dilation, a.relu)


def _conv2d_transpose(a, x, t, ctx):
    data, kernel = x
    if a.data_layout != "NCHW":
        raise CompileError(f"nn.conv2d_transpose: data_layout {a.data_layout!r} has no compute; use NCHW")
    kernel = _to_layout(kernel, a.kernel_layout, "IOHW", "nn.conv2d_transpose")
    return ctx.topi.conv2d_transpose_nchw(data, kernel, a.strides, tuple(a.padding), _out_dtype(a, data),
                                          a.output_padding, a.groups, a.dilation, cfg=ctx.cfg)


def _dense(a, x, t, ctx):
    if ctx.prepacked:  # CPU panels; units: the last panel may be zero-padded
        return ctx.topi.dense(x[0], x[1], None, _out_dtype(a, x[0]), cfg=ctx.cfg, units=_shape(t)[-1])
    return ctx.topi.dense(x[0], x[1], None, _out_dtype(a, x[0]), cfg=ctx.cfg)


def _dense_prepack(a, types, cfg):
    """A constant (N, K) weight in the column panels (N/tile_n, K, tile_n) the CPU GEMM reads,
    made once at build time instead of in every call (docs/topi.md, "dense and batch_matmul")."""
    from kiln.topi.x86.dense import config_for, prepack_weight

    (m, k), (n, _) = _shape(types[0]), _shape(types[1])
    conf = config_for(m, n, k, cfg)
    if conf["kernel"] != "gemm":
        return None
    nr = int(conf["tile_n"])
    return WeightTransform(1, (-(-n // nr), k, nr), lambda w: prepack_weight(w, nr), ("dense_panels", nr))


def _attention(a, x, t, ctx):
    if not hasattr(ctx.topi, "attention"):
        raise CompileError("nn.attention has a compute for x86 CPUs and GPUs only; FuseAttention forms it for x86 and CUDA targets "
                           "(build for an x86 llvm target, or leave the batch_matmul/softmax chain unfused)")
    if a.heads:  # the heads side by side in rows: x86 only (FuseAttention forms it for x86 targets)
        if "heads" not in inspect.signature(ctx.topi.attention).parameters:
            raise CompileError("nn.attention with heads > 0 (rows) has a compute for x86 CPUs only; "
                               "give this target query, key and value as (heads, rows, width)")
        return ctx.topi.attention(*x, a.scale, a.key_transposed, a.value_transposed, heads=a.heads, cfg=ctx.cfg)
    return ctx.topi.attention(*x, a.scale, a.key_transposed, a.value_transposed, cfg=ctx.cfg)


def _batch_matmul(a, x, t, ctx):
    return ctx.topi.batch_matmul(x[0], x[1], None, _out_dtype(a, x[0]), a.transpose_a, a.transpose_b, cfg=ctx.cfg)


def _pool(kind):
    def compute(a, x, t, ctx):
        extra = {"count_include_pad": a.count_include_pad} if kind == "avg" else {}
        return ctx.topi.pool2d(x[0], a.pool_size, a.strides, a.dilation, tuple(a.padding), kind, a.ceil_mode,
                               a.layout, **extra)
    return OpImpl(compute, "pool")


def _global_pool(kind):
    # A package may read the input its own way (topi.adreno: through a texture).
    return OpImpl(lambda a, x, t, ctx: getattr(ctx.topi, "global_pool", topi.nn.global_pool)(x[0], kind, a.layout),
                  "pool")


_UNARY = {
    "abs": topi.abs, "ceil": topi.ceil, "cos": topi.cos, "erf": topi.erf, "exp": topi.exp, "floor": topi.floor,
    "isnan": topi.isnan, "log": topi.log, "negative": topi.negative, "round": topi.round, "rsqrt": topi.rsqrt,
    "sigmoid": topi.sigmoid, "sign": topi.sign, "sin": topi.sin, "sqrt": topi.sqrt, "tanh": topi.tanh,
    "logical_not": topi.logical_not, "reciprocal": topi.reciprocal, "copy": topi.identity, "nn.relu": topi.nn.relu,
    "tan": topi.tan, "asin": topi.asin, "acos": topi.acos, "atan": topi.atan, "sinh": topi.sinh, "cosh": topi.cosh,
    "isinf": topi.isinf, "bitwise_not": topi.bitwise_not,
}
_BINARY = {
    "add": topi.add, "subtract": topi.subtract, "multiply": topi.multiply, "divide": topi.divide,
    "floor_divide": topi.floor_divide, "floor_mod": topi.floor_mod, "mod": topi.mod, "power": topi.power,
    "maximum": topi.maximum, "minimum": topi.minimum, "equal": topi.equal, "not_equal": topi.not_equal,
    "less": topi.less, "less_equal": topi.less_equal, "greater": topi.greater, "greater_equal": topi.greater_equal,
    "logical_and": topi.logical_and, "logical_or": topi.logical_or, "logical_xor": topi.logical_xor,
    "bitwise_and": topi.bitwise_and, "bitwise_or": topi.bitwise_or, "bitwise_xor": topi.bitwise_xor,
    "left_shift": topi_bitwise.left_shift, "right_shift": topi_bitwise.right_shift,
}

OP_IMPLS: dict[str, OpImpl] = {
    **{name: _unary(fn) for name, fn in _UNARY.items()},
    **{name: _binary(fn) for name, fn in _BINARY.items()},
    "cast": OpImpl(lambda a, x, t, ctx: topi.cast(x[0], a.dtype)),
    "clip": OpImpl(_clip),
    "nn.leaky_relu": OpImpl(lambda a, x, t, ctx: topi.nn.leaky_relu(x[0], a.alpha)),
    "nn.prelu": OpImpl(lambda a, x, t, ctx: topi.nn.prelu(x[0], x[1], a.axis)),
    "nn.bias_add": OpImpl(_bias_add),
    "where": OpImpl(lambda a, x, t, ctx: topi.where(x[0], x[1], x[2])),
    # reductions
    "sum": _reduce(topi.sum), "max": _reduce(topi.max), "min": _reduce(topi.min), "prod": _reduce(topi.prod),
    "mean": _reduce(topi.mean), "all": _reduce(topi.all), "any": _reduce(topi.any),
    "argmax": _arg(topi.argmax), "argmin": _arg(topi.argmin),
    "variance": OpImpl(_variance, "reduce"),
    # data movement
    "reshape": OpImpl(_reshape), "squeeze": OpImpl(_reshape), "expand_dims": OpImpl(_reshape),
    "nn.batch_flatten": OpImpl(_reshape),
    "broadcast_to": OpImpl(lambda a, x, t, ctx: topi.broadcast_to(x[0], _shape(t))),
    "concatenate": OpImpl(lambda a, x, t, ctx: topi.concatenate(list(x[0]), a.axis)),
    "split": OpImpl(_split),
    "strided_slice": OpImpl(_strided_slice),
    "take": OpImpl(_take),
    "gather": OpImpl(lambda a, x, t, ctx: topi.gather(x[0], a.axis, x[1])),
    "transpose": OpImpl(lambda a, x, t, ctx: topi.transpose(x[0], a.axes)),
    "reverse": OpImpl(lambda a, x, t, ctx: topi.flip(x[0], a.axis)),
    "tile": OpImpl(lambda a, x, t, ctx: topi.tile(x[0], a.reps)),
    "layout_transform": OpImpl(lambda a, x, t, ctx: topi.layout_transform(x[0], a.src_layout, a.dst_layout)),
    "nn.pad": OpImpl(_pad),
    "gather_nd": OpImpl(lambda a, x, t, ctx: topi_scatter.gather_nd(x[0], x[1], a.batch_dims)),
    "scatter_nd": OpImpl(lambda a, x, t, ctx: topi_scatter.scatter_nd(*x, a.reduction), "generic"),
    "scatter_elements": OpImpl(lambda a, x, t, ctx: topi_scatter.scatter_elements(*x, a.axis, a.reduction), "generic"),
    "cumsum": OpImpl(lambda a, x, t, ctx: topi_scatter.cumsum(x[0], a.axis, a.exclusive, a.reverse), "generic"),
    "cumprod": OpImpl(lambda a, x, t, ctx: topi_scatter.cumprod(x[0], a.axis, a.exclusive, a.reverse), "generic"),
    "topk_indices": OpImpl(lambda a, x, t, ctx: topi_sort.select_by_rank(topi_sort.rank(x[0], a.axis, a.largest),
                                                                          a.k, a.axis), "generic"),
    # data-dependent output sizes (relay/op/dynamic.py): bound-sized buffers plus a count
    "vision.non_max_suppression": OpImpl(lambda a, x, t, ctx: topi_vision.non_max_suppression(
        *x, a.max_output_boxes_per_class, int(t.fields[0].shape[0]), a.center_point_box, a.has_score_threshold,
        gpu=ctx.topi in GPU_PACKAGES.values()), "generic"),
    "nonzero": OpImpl(lambda a, x, t, ctx: topi_data_dependent.nonzero(x[0], gpu=ctx.topi in GPU_PACKAGES.values()),
                      "generic"),
    "unique": OpImpl(lambda a, x, t, ctx: topi_data_dependent.unique(x[0], a.axis, a.sorted,
                                                                     gpu=ctx.topi in GPU_PACKAGES.values()), "generic"),
    "dyn.with_length": OpImpl(lambda a, x, t, ctx: topi.identity(x[0])),
    "vision.roi_align": OpImpl(lambda a, x, t, ctx: topi_vision.roi_align(
        *x, a.output_size, a.spatial_scale, a.sampling_ratio, a.mode, a.half_pixel), "generic"),
    "nn.linear_attention": OpImpl(lambda a, x, t, ctx: topi_linear_attention.linear_attention(
        *x, a.q_heads, a.kv_heads, a.scale, a.gating, a.delta, a.decay_per_row, a.beta_per_head), "generic"),
    "vision.deform_conv2d": OpImpl(lambda a, x, t, ctx: topi_vision.deform_conv2d(
        *x, a.strides, a.pads, a.dilations, a.groups, a.offset_groups), "generic"),
    "nn.gelu": OpImpl(lambda a, x, t, ctx: topi_fast_math.gelu(x[0], a.approximate)),
    "nn.hardswish": OpImpl(lambda a, x, t, ctx: topi_fast_math.hardswish(x[0])),
    "reinterpret": OpImpl(lambda a, x, t, ctx: topi_bitwise.reinterpret(x[0], a.dtype)),
    "image.grid_sample": OpImpl(lambda a, x, t, ctx: topi_grid_sample.grid_sample(
        x[0], x[1], a.mode, a.padding_mode, a.align_corners), "generic"),
    "nn.rnn_recurrence": OpImpl(lambda a, x, t, ctx: topi_rnn.recurrence(
        *x, a.mode, len(a.reverse), a.reverse, a.activations, a.clip, a.linear_before_reset, a.input_forget,
        a.use_peepholes, gpu=ctx.topi in GPU_PACKAGES.values()), "generic"),
    "image.resize2d": OpImpl(_resize2d),
    # anchors
    "nn.conv2d": OpImpl(_conv2d, _conv2d_schedule, prepack=_conv2d_prepack),
    "nn.conv2d_transpose": OpImpl(_conv2d_transpose, "conv2d_transpose_nchw"),
    "nn.contrib_expand_depthwise_NCHWc": OpImpl(_expand_depthwise, "expand_depthwise_NCHWc"),
    "nn.contrib_conv2d_bias_NCHWc": OpImpl(_conv2d_bias, "conv2d_amx_fused"),
    "nn.contrib_conv2d_bias_residual_NCHWc": OpImpl(_conv2d_bias, "conv2d_amx_fused"),
    "nn.dense": OpImpl(_dense, "dense", prepack=_dense_prepack),
    "nn.batch_matmul": OpImpl(_batch_matmul, "batch_matmul"),
    "nn.attention": OpImpl(_attention, "attention"),
    "nn.max_pool2d": _pool("max"),
    "nn.avg_pool2d": _pool("avg"),
    "nn.global_avg_pool2d": _global_pool("avg"),
    "nn.global_max_pool2d": _global_pool("max"),
    "nn.adaptive_avg_pool2d": OpImpl(lambda a, x, t, ctx: topi.nn.adaptive_pool(x[0], tuple(a.output_size), "avg",
                                                                                 a.layout), "adaptive_pool"),
    "nn.softmax": OpImpl(_softmax("softmax"), "softmax"),
    "nn.log_softmax": OpImpl(_softmax("log_softmax"), "softmax"),
    "nn.layer_norm": OpImpl(_layer_norm, "layer_norm"),
}

_ANCHOR_RANK = {OpPattern.OPAQUE: 5, OpPattern.OUT_ELEMWISE_FUSABLE: 4, OpPattern.COMM_REDUCE: 3,
                OpPattern.INJECTIVE: 2, OpPattern.BROADCAST: 1, OpPattern.ELEMWISE: 0}


def anchor_of(calls: list) -> Call:
    """The call whose schedule drives the group: the first of the highest pattern rank."""
    return max(calls, key=lambda c: (_ANCHOR_RANK.get(c.op.pattern, 0), -calls.index(c)))


# int8 kernels of qnn conv/dense + requantize chains on CPUs (relay/qnn/cpu_int8.py)
from ..qnn import cpu_int8 as _cpu_int8  # noqa: E402
from ..qnn import avg_pool_int as _avg_pool_int  # noqa: E402

OP_IMPLS.update({name: OpImpl(fn, key) for name, (fn, key) in _cpu_int8.COMPUTES.items()})
OP_IMPLS.update({name: OpImpl(fn, key) for name, (fn, key) in _avg_pool_int.COMPUTES.items()})  # Cortex-M

# Schedule families by target family. arm_cpu uses the same algorithms as x86 with tiles derived
# from the target (topi/arm_cpu), so the two columns differ only in which package they name.
SCHEDULES: dict[str, dict[str, Callable]] = {
    "injective": {"x86": topi.x86.schedule_injective, "arm_cpu": topi.arm_cpu.schedule_injective},
    "reduce": {"x86": topi.x86.schedule_reduce, "arm_cpu": topi.arm_cpu.schedule_reduce},
    "pool": {"x86": topi.x86.schedule_pool, "arm_cpu": topi.arm_cpu.schedule_pool},
    "adaptive_pool": {"x86": topi.x86.schedule_adaptive_pool, "arm_cpu": topi.arm_cpu.schedule_adaptive_pool},
    "softmax": {"x86": topi.x86.schedule_softmax, "arm_cpu": topi.arm_cpu.schedule_softmax},
    "layer_norm": {"x86": topi.x86.schedule_layer_norm, "arm_cpu": topi.arm_cpu.schedule_layer_norm},
    "conv2d_nchw": {"x86": topi.x86.schedule_conv2d_nchw, "arm_cpu": topi.arm_cpu.schedule_conv2d_nchw},
    "conv2d_nhwc": {"x86": topi.x86.schedule_conv2d_nhwc, "arm_cpu": topi.arm_cpu.schedule_conv2d_nhwc},
    "conv2d_transpose_nchw": {"x86": topi.x86.schedule_conv2d_transpose_nchw,
                              "arm_cpu": topi.arm_cpu.schedule_conv2d_transpose_nchw},
    "dense": {"x86": topi.x86.schedule_dense, "arm_cpu": topi.arm_cpu.schedule_dense},
    "batch_matmul": {"x86": topi.x86.schedule_batch_matmul, "arm_cpu": topi.arm_cpu.schedule_batch_matmul},
    "generic": {"x86": topi.generic.default_schedule, "arm_cpu": topi.generic.default_schedule},
    "conv2d_NCHWc": {"x86": topi.x86.schedule_conv2d_NCHWc, "arm_cpu": topi.arm_cpu.schedule_conv2d_NCHWc},
    "conv2d_winograd_NCHWc": {"x86": topi.x86.schedule_conv2d_winograd_NCHWc,
                              "arm_cpu": topi.arm_cpu.schedule_conv2d_winograd_NCHWc},
    "depthwise_conv2d_NCHWc": {"x86": topi.x86.schedule_depthwise_conv2d_NCHWc,
                               "arm_cpu": topi.arm_cpu.schedule_depthwise_conv2d_NCHWc},
    "expand_depthwise_NCHWc": {"x86": topi.x86.schedule_expand_depthwise_NCHWc},  # made on x86 only
    "conv2d_amx_fused": {"x86": lambda outs, cfg=None: topi.x86.amx_bf16.schedule_conv2d_amx_fused(outs)},  # AMX only
    "attention": {"x86": topi.x86.schedule_attention,  # FuseAttention forms it on x86 and CUDA
                  "gpu": topi.gpu.schedule_attention},
}

SCHEDULES.update(_cpu_int8.SCHEDULES())


def _arm_cpu_conv2d_nchw_schedule(outs, cfg=None):
    """topi.arm_cpu's conv2d_nchw schedule, or the Cortex-M int8 one for its compute (kiln/topi/cortex_m)."""
    from kiln.topi.cortex_m.conv2d_int8 import schedule_any

    s = schedule_any(outs)
    return s if s is not None else topi.arm_cpu.schedule_conv2d_nchw(outs)


SCHEDULES["conv2d_nchw"]["arm_cpu"] = _arm_cpu_conv2d_nchw_schedule


def _arm_cpu_injective_schedule(outs, cfg=None):
    """topi.arm_cpu's injective schedule, or on a Cortex-M core (``-mcpu`` with an int8 tier) the
    one of kiln/topi/cortex_m (short inner loops unrolled)."""
    from kiln.target import Target
    from kiln.topi.cortex_m import isa_tier

    if isa_tier(Target.current(allow_none=True)) is not None:
        from kiln.topi.cortex_m.conv2d_direct import schedule_injective
        return schedule_injective(outs)
    return topi.arm_cpu.schedule_injective(outs)


SCHEDULES["injective"]["arm_cpu"] = _arm_cpu_injective_schedule

CPU_PACKAGES = {"x86": topi.x86, "arm_cpu": topi.arm_cpu}

# GPU targets (key "gpu"; "mali" with -device=mali): topi.gpu's schedules, topi.mali's where
# Mali differs. The blocked-layout keys never occur for them (AlterOpLayout is x86-only).
GPU_PACKAGES = {"gpu": topi.gpu, "mali": topi.mali, "adreno": topi.adreno}  # adreno: textures (docs/adreno.md)
_GPU_SCHEDULE_NAMES = {
    "injective": "schedule_injective", "reduce": "schedule_reduce", "pool": "schedule_pool",
    "adaptive_pool": "schedule_adaptive_pool", "softmax": "schedule_softmax", "layer_norm": "schedule_layer_norm",
    "conv2d_nchw": "schedule_conv2d_nchw", "conv2d_nhwc": "schedule_conv2d_nhwc",
    "conv2d_transpose_nchw": "schedule_conv2d_transpose_nchw", "dense": "schedule_dense",
    "batch_matmul": "schedule_batch_matmul", "generic": "default_schedule",
}
for _key, _name in _GPU_SCHEDULE_NAMES.items():
    for _family, _pkg in GPU_PACKAGES.items():
        SCHEDULES[_key][_family] = getattr(_pkg, _name)
# adreno's AlterOpLayout (backend/adreno_textures.py) gives blocked convs: all one NCHW4c schedule.
for _key in ("conv2d_NCHWc", "conv2d_winograd_NCHWc", "depthwise_conv2d_NCHWc"):
    SCHEDULES[_key]["adreno"] = topi.adreno.schedule_conv2d_NCHW4c
PACKAGES = {**CPU_PACKAGES, **GPU_PACKAGES}


def get_impl(op_name: str) -> OpImpl:
    impl = OP_IMPLS.get(op_name)
    if impl is None:
        raise CompileError(f"relay op {op_name!r} has no compute in kiln's backend "
                           "(kiln/relay/backend/op_impl.py); ops with one: " + ", ".join(sorted(OP_IMPLS)))
    return impl


def schedule_key(op_name: str, attrs) -> str:
    sched = get_impl(op_name).schedule
    return sched(attrs) if callable(sched) else sched
