"""Tunable CPU operators from kiln.topi, for x86 and arm_cpu: conv2d (NCHW, NHWC), depthwise
conv2d, dense and batch_matmul, each registered as ``<op>.x86`` and ``<op>.arm_cpu`` with
``register_topi_compute/schedule``.

These are the templates ``extract_from_program`` returns and relay.build asks for (the
workloads come from ``kiln.relay.backend.dispatch.workload_of``; the computes below take their
arguments in that order). The knobs and their candidates are topi's own (``config_space`` of
each topi module); topi's compute reads them from the config (``cfg["oc_bn"].val``). An untuned
(fallback) build passes no config, so topi keeps its heuristic defaults, which beat the first
candidate of every knob.

The arm_cpu templates run the same topi code as x86 (``kiln.topi.arm_cpu`` re-exports it): what
differs is the target the task is created for, from which topi derives the vector width, so the
candidate tiles are NEON-sized.
"""

from __future__ import annotations

import importlib  # kiln.topi.x86 re-exports functions named like its modules

from ..task import register_topi_compute, register_topi_schedule

FAMILIES = ("x86", "arm_cpu")


def _define(cfg, topi_module, *shape) -> None:
    """The knobs of ``topi_module.config_space(*shape)``, and its ``default_config(*shape)`` as
    the declared default (tuning measures it first)."""
    if getattr(cfg, "is_fallback", False):
        return  # an untuned build: topi picks its own defaults (see _untuned)
    for name, values in topi_module.config_space(*shape).items():
        cfg.define_knob(name, list(values))
    cfg.define_default(topi_module.default_config(*shape))


def _ints(shape) -> tuple:
    return tuple(int(getattr(d, "value", d)) for d in shape)


def _untuned(cfg):
    return None if getattr(cfg, "is_fallback", False) else cfg


def _topi(family: str, module: str):
    # Both families use topi.x86's modules; arm_cpu's differences come from the target.
    del family
    return importlib.import_module(f"kiln.topi.x86.{module}")


def _conv_shape(data, kernel, strides, padding, dilation, groups, layout="NCHW"):
    from kiln.topi.nn.conv2d import conv2d_shape
    return conv2d_shape("conv2d", _ints(data.shape), _ints(kernel.shape), strides, padding,
                        dilation, groups, layout)


def _conv_flop(p) -> float:
    return 2.0 * p.batch * p.out_channel * p.out_height * p.out_width * \
        (p.in_channel // p.groups) * p.kernel_h * p.kernel_w


def _register(family: str) -> dict:
    """Register the five templates of one family; returns {name: compute wrapper}."""
    out = {}

    @register_topi_compute(f"conv2d_nchw.{family}")
    def conv2d_nchw(cfg, data, kernel, strides, padding, dilation, groups, out_dtype):
        if family == "arm_cpu":  # int8 on a Cortex-M core (-mcpu): kiln/topi/cortex_m's kernels and knobs
            from kiln.topi.cortex_m.tuning import tunable_conv2d
            out = tunable_conv2d(cfg, data, kernel, strides, padding, dilation, groups, out_dtype)
            if out is not None:
                return out
        conv = _topi(family, "conv2d")
        p = _conv_shape(data, kernel, strides, padding, dilation, groups)
        if family == "x86" and _runs_blocked(p, data.dtype):
            return _conv2d_nchwc(cfg, p, data, kernel, strides, padding, dilation, out_dtype)
        _define(cfg, conv, p)
        cfg.add_flop(_conv_flop(p))
        return conv.conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, groups,
                                cfg=_untuned(cfg))

    @register_topi_schedule(f"conv2d_nchw.{family}")
    def schedule_conv2d_nchw(cfg, outs):
        if family == "arm_cpu":
            from kiln.topi.cortex_m.tuning import schedule as cortex_m_schedule
            s = cortex_m_schedule(outs)
            if s is not None:
                return s
        if "template_inputs" in outs[0].op.attrs:  # the blocked kernel (x86)
            if "winograd" in outs[0].op.tag:
                return _topi(family, "conv2d_winograd").schedule_conv2d_winograd_NCHWc(outs)
            return _topi(family, "conv2d_nchwc").schedule_conv2d_NCHWc(outs)
        return _topi(family, "conv2d").schedule_conv2d_nchw(outs)

    # Depthwise: relay's nn.conv2d with groups == channels. topi's conv2d_nchw hands it to the
    # depthwise compute, whose knobs (row tile) differ from the dense conv's (channel blocks).
    @register_topi_compute(f"depthwise_conv2d_nchw.{family}")
    def depthwise_conv2d_nchw(cfg, data, kernel, strides, padding, dilation, groups, out_dtype):
        if family == "arm_cpu":
            from kiln.topi.cortex_m.tuning import tunable_conv2d
            out = tunable_conv2d(cfg, data, kernel, strides, padding, dilation, groups, out_dtype)
            if out is not None:
                return out
        p = _conv_shape(data, kernel, strides, padding, dilation, groups)
        if family == "x86" and _depthwise_runs_blocked(p, data.dtype):
            return _depthwise_nchwc(cfg, p, data, kernel, strides, padding, dilation, out_dtype)
        _define(cfg, _topi(family, "depthwise_conv2d"), p.out_width, p.out_height)
        cfg.add_flop(_conv_flop(p))
        return _topi(family, "conv2d").conv2d_nchw(data, kernel, strides, padding, dilation,
                                                    out_dtype, groups, cfg=_untuned(cfg))

    @register_topi_schedule(f"depthwise_conv2d_nchw.{family}")
    def schedule_depthwise_conv2d_nchw(cfg, outs):
        if family == "arm_cpu":
            from kiln.topi.cortex_m.tuning import schedule as cortex_m_schedule
            s = cortex_m_schedule(outs)
            if s is not None:
                return s
        if "template_inputs" in outs[0].op.attrs:  # the blocked kernel (x86)
            return _topi(family, "depthwise_conv2d_nchwc").schedule_depthwise_conv2d_NCHWc(outs)
        return _topi(family, "conv2d").schedule_conv2d_nchw(outs)

    @register_topi_compute(f"conv2d_nhwc.{family}")
    def conv2d_nhwc(cfg, data, kernel, strides, padding, dilation, groups, out_dtype):
        nhwc = _topi(family, "conv2d_nhwc")
        p = _conv_shape(data, kernel, strides, padding, dilation, groups, "NHWC")
        _define(cfg, nhwc, p)
        cfg.add_flop(_conv_flop(p))
        return nhwc.conv2d_nhwc(data, kernel, strides, padding, dilation, out_dtype, groups,
                                cfg=_untuned(cfg))

    @register_topi_schedule(f"conv2d_nhwc.{family}")
    def schedule_conv2d_nhwc(cfg, outs):
        return _topi(family, "conv2d_nhwc").schedule_conv2d_nhwc(outs)

    @register_topi_compute(f"dense_nopack.{family}")
    def dense(cfg, data, weight, out_dtype):
        m, k = _ints(data.shape)
        n = _ints(weight.shape)[0]
        _define_dot(cfg, m, n, k)
        cfg.add_flop(2.0 * m * n * k)
        return _topi(family, "dense").dense(data, weight, None, out_dtype, cfg=_untuned(cfg))

    @register_topi_schedule(f"dense_nopack.{family}")
    def schedule_dense(cfg, outs):
        return _topi(family, "dense").schedule_dense(outs)

    @register_topi_compute(f"batch_matmul.{family}")
    def batch_matmul(cfg, a, b, out_dtype, transpose_b):
        batch, m, k = _ints(a.shape)
        n = _ints(b.shape)[1 if transpose_b else 2]
        if transpose_b:
            _define_dot(cfg, m, n, k)
        else:
            _define(cfg, importlib.import_module("kiln.topi.x86.matmul_nn"), m, n, k)
        cfg.add_flop(2.0 * max(batch, _ints(b.shape)[0]) * m * n * k)
        return _topi(family, "batch_matmul").batch_matmul(a, b, None, out_dtype, False,
                                                          transpose_b, cfg=_untuned(cfg))

    @register_topi_schedule(f"batch_matmul.{family}")
    def schedule_batch_matmul(cfg, outs):
        return _topi(family, "batch_matmul").schedule_batch_matmul(outs)

    out.update(conv2d_nchw=conv2d_nchw, depthwise_conv2d_nchw=depthwise_conv2d_nchw,
               conv2d_nhwc=conv2d_nhwc, dense=dense, batch_matmul=batch_matmul,
               schedule_conv2d_nchw=schedule_conv2d_nchw,
               schedule_depthwise_conv2d_nchw=schedule_depthwise_conv2d_nchw,
               schedule_conv2d_nhwc=schedule_conv2d_nhwc, schedule_dense=schedule_dense,
               schedule_batch_matmul=schedule_batch_matmul)
    return out


def _runs_blocked(p, dtype) -> bool:
    """Whether relay.build runs this conv2d as conv2d_NCHWc (AlterOpLayout, x86, opt_level 3)."""
    from kiln.topi.x86.conv2d_nchwc import out_block
    return p.groups == 1 and str(dtype).startswith("float") and out_block(p.out_channel, 16) > 0


def _conv2d_nchwc(cfg, p, data, kernel, strides, padding, dilation, out_dtype):
    """The kernel relay.build deploys for this workload: blocked data in (the block AlterOpLayout
    gives a producer of this many channels; an RGB image stays NCHW), the pre-packed kernel, the
    output in blocks of ``oc_bn``. Its arguments are these, not the workload's NCHW tensors; the
    output block is a layout knob (check_correctness compares like with like)."""
    from kiln import te
    nchwc = importlib.import_module("kiln.topi.x86.conv2d_nchwc")
    wino = importlib.import_module("kiln.topi.x86.conv2d_winograd")
    if wino.applies(p) and nchwc.input_block(p.in_channel):
        return _conv2d_winograd(cfg, p, data, kernel, padding, out_dtype)
    _define(cfg, nchwc, p)
    cfg.define_layout("oc_bn")
    cfg.add_flop(_conv_flop(p))
    conf = _untuned(cfg)
    bn = nchwc.config_for_shape(p, conf)["oc_bn"]
    ib = nchwc.input_block(p.in_channel)
    if ib:
        data = _blocked_data(p, ib, data.dtype)
    kernel = te.placeholder((p.out_channel // bn, p.in_channel // max(ib, 1), p.kernel_h, p.kernel_w, max(ib, 1), bn),
                            str(kernel.dtype), "kernel")
    out = nchwc.conv2d_NCHWc(data, kernel, strides, padding, dilation, out_dtype, cfg=conf,
                             out_channels=p.out_channel)
    out.op.attrs["template_inputs"] = (data, kernel)
    return out


def _blocked_data(p, block: int, dtype):
    """The data placeholder in the NCHW{block}c layout AlterOpLayout gives it."""
    from kiln import te
    return te.placeholder((p.batch, p.in_channel // block, p.in_height, p.in_width, block), str(dtype), "data")


def _depthwise_runs_blocked(p, dtype) -> bool:
    """Whether relay.build runs this depthwise conv2d on NCHW{b}c data (AlterOpLayout, x86)."""
    from kiln.topi.x86.conv2d_nchwc import input_block
    return p.out_channel == p.in_channel and str(dtype).startswith("float") and input_block(p.in_channel) > 0


def _depthwise_nchwc(cfg, p, data, kernel, strides, padding, dilation, out_dtype):
    """The blocked depthwise kernel relay.build deploys, on blocked data and a pre-packed kernel."""
    from kiln import te
    from kiln.topi.x86.conv2d_nchwc import input_block
    dw = importlib.import_module("kiln.topi.x86.depthwise_conv2d_nchwc")
    b = input_block(p.in_channel)
    _define(cfg, dw, p.out_width, b, p.kernel_h, p.stride_w)
    cfg.add_flop(_conv_flop(p))
    data = _blocked_data(p, b, data.dtype)
    kernel = te.placeholder((p.in_channel // b, p.kernel_h, p.kernel_w, b), str(kernel.dtype), "kernel")
    out = dw.depthwise_conv2d_NCHWc(data, kernel, strides, padding, dilation, out_dtype, cfg=_untuned(cfg))
    out.op.attrs["template_inputs"] = (data, kernel)
    return out


def _conv2d_winograd(cfg, p, data, kernel, padding, out_dtype):
    """3x3 stride-1 convs on blocked data: relay.build deploys Winograd F(2x2, 3x3) for them."""
    from kiln import te
    from kiln.topi.x86.conv2d_nchwc import input_block
    wino = importlib.import_module("kiln.topi.x86.conv2d_winograd")
    _define(cfg, wino, p)
    cfg.define_layout("oc_bn")
    cfg.add_flop(_conv_flop(p))  # the direct convolution's count, so GFLOPS compare across kernels
    conf = _untuned(cfg)
    bn = wino.config_for_shape(p, conf)["oc_bn"]
    ib = input_block(p.in_channel)
    data = _blocked_data(p, ib, data.dtype)
    kernel = te.placeholder((p.out_channel // bn, 16, p.in_channel // ib, ib, bn), str(kernel.dtype), "kernel")
    out = wino.conv2d_winograd_NCHWc(data, kernel, padding, out_dtype, cfg=conf, out_channels=p.out_channel)
    out.op.attrs["template_inputs"] = (data, kernel)
    return out


def _define_dot(cfg, m: int, n: int, k: int) -> None:
    """Knobs of topi's A·Bᵀ kernel. Which kernel runs (vector dot tile, or the panel GEMM) is
    topi's size rule, kept fixed here: the two kernels' tile knobs share names but not
    candidates, so one flat space over both would hold invalid pairs."""
    from kiln.topi.x86 import matmul_nn
    dense = importlib.import_module("kiln.topi.x86.dense")
    kernel = "gemm" if m >= 16 else "dot"
    cfg.define_knob("kernel", [kernel])
    if kernel == "gemm":
        _define(cfg, matmul_nn, m, n, k)
    else:
        _define(cfg, dense, m, n, k)


X86 = _register("x86")
ARM_CPU = _register("arm_cpu")
