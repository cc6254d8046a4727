"""The Cortex-M int8 convolutions as AutoTVM tasks extracted from relay (issue 36 item 2):
``autotvm.task.extract_from_program(mod, target="c -keys=arm_cpu -mcpu=cortex-m4")`` returns the
conv2d_nchw.arm_cpu / depthwise_conv2d_nchw.arm_cpu workloads of an int8 model, and their
templates (kiln/autotvm/templates/topi_cpu.py) call ``tunable_conv2d`` here when the target's
``-mcpu`` has an int8 tier, so the knobs measured on the board are the ones relay's build reads
(kiln/relay/backend/op_impl.py: ``knob(ctx.cfg, ...)``). Knobs:

- 1x1 conv (``conv2d_1x1_int8``): ``isa`` (``plain``: plain loops, the naive schedule, or the
  tier), ``rows`` (channels per data word: 1, 2, 4, 8 dividing O), ``cols`` (pixels per weight
  word: 1, 2, 3, 4), ``unroll`` (the reduction's loop over data words unrolled; with pixel
  tiles only);
- KxK conv (``im2col_int8``: windows copied to rows, then the 1x1's tiles): the 1x1's knobs;
- depthwise (``depthwise_int8``): ``isa`` (``plain``: the sum in memory, loops as written;
  ``unrolled``: the window unrolled with the sum in a register; ``dsp``: each output
  row by ``dw_row_intrin``, the taps as int16 pairs, one SMLABB/SMLABT each; ``mve`` on the
  M55/M85 with stride 1: each row by ``dw_row_mve_intrin``, 4 output pixels a vector, one
  VLDRB.S32 + VMLA.S32 per tap; the default there), ``unroll`` (a row of outputs unrolled, when
  at most 8 wide).

The untuned default (what relay builds without a log) is a point of each space
(``cortex_m_default``). The templates take the kernel as relay holds it (OIHW) and reshape it in
a stage of their own (a copy per call: the build pre-shapes it once), so a candidate is one
self-contained C function for MicroBuilder / MicroRunner (kiln/micro/autotvm.py).
"""

from __future__ import annotations

from kiln import te
from kiln.autotvm.space import OtherOptionEntity

from .conv2d_int8 import _find, applies, conv2d_1x1_int8, conv_kind, im2col_int8, im2col_k, operand_dtype, schedule_any

DEFAULTS = {"1x1": {"rows": 2, "cols": 2, "unroll": True}, "im2col": {"rows": 2, "cols": 2, "unroll": True}, "depthwise": {"unroll": True}}


def kind_of(target, data, kernel, strides, padding, dilation, groups):
    """("1x1", tier) / ("im2col", tier) / ("depthwise", None) for an int8 conv on a Cortex-M core, else None."""
    kshape = tuple(int(d) for d in kernel.shape)
    tier = applies(target, data.dtype, kernel.dtype, kshape, strides, padding, dilation, groups)
    if tier is not None:
        return ("1x1", tier)
    return conv_kind(target, data.dtype, kernel.dtype, kshape, int(data.shape[1]), strides, padding, dilation, groups)


def _knob(cfg, name, values, default):
    cfg.define_knob(name, values)
    if cfg.is_fallback:
        cfg[name] = OtherOptionEntity(default)
    return cfg[name].val


def tunable_conv2d(cfg, data, kernel, strides, padding, dilation, groups, out_dtype):
    """The template's compute for an int8 NCHW conv on a Cortex-M core (None when the Cortex-M
    kernels do not apply: topi's own template then)."""
    from kiln.target import Target

    target = Target.current(allow_none=True)
    kind = kind_of(target, data, kernel, strides, padding, dilation, groups) if str(out_dtype) == "int32" else None
    if kind is None:
        return None
    o, c, kh, kw = (int(d) for d in kernel.shape)
    n, _, h, w = (int(d) for d in data.shape)
    if kind[0] == "1x1":
        isa = _knob(cfg, "isa", ["plain", kind[1]], kind[1])
        rows = _knob(cfg, "rows", [r for r in (1, 2, 4, 8) if o % r == 0], DEFAULTS["1x1"]["rows"])
        cols = _knob(cfg, "cols", [1, 2, 3, 4], DEFAULTS["1x1"]["cols"])
        unroll = _knob(cfg, "unroll", [False, True], DEFAULTS["1x1"]["unroll"])
        cfg.add_flop(2.0 * n * o * h * w * c)
        od = operand_dtype(kind[1])
        kernel2d = te.compute((o, c), lambda j, k: kernel[j, k, 0, 0].astype(od), name="kernel_oc")
        out = conv2d_1x1_int8(data, kernel2d, kind[1], rows=rows, cols=cols, unroll=unroll)
        _acc(out).op.attrs["isa"] = isa
        return out
    from .conv2d_direct import depthwise_int8
    if kind[0] == "im2col":
        isa = _knob(cfg, "isa", ["plain", kind[1]], kind[1])
        rows = _knob(cfg, "rows", [r for r in (1, 2, 4, 8) if o % r == 0], DEFAULTS["im2col"]["rows"])
        cols = _knob(cfg, "cols", [1, 2, 3, 4], DEFAULTS["im2col"]["cols"])
        unroll = _knob(cfg, "unroll", [False, True], DEFAULTS["im2col"]["unroll"])
        k_real, k_all = c * kh * kw, im2col_k(c, kh, kw, kind[1])
        od = operand_dtype(kind[1])
        kernel2d = te.compute((o, k_all), lambda j, k: te.if_then_else(
            k < k_real, kernel[j, k // (kh * kw) % c, k // kw % kh, k % kw].astype(od), te.const(0, od)),
            name="kernel_oc")
        out = im2col_int8(data, kernel2d, strides, padding, (kh, kw), kind[1], rows=rows, cols=cols, unroll=unroll)
        oh, ow = (int(d) for d in out.shape[2:])
        cfg.add_flop(2.0 * n * o * oh * ow * c * kh * kw)
        _acc(out).op.attrs["isa"] = isa
        return out
    from .conv2d_direct import mve_default
    isas = ["plain", "unrolled"] + ([kind[1]] if kind[1] else []) + (["mve"] if mve_default(strides) else [])
    isa = _knob(cfg, "isa", isas, isas[-1])
    unroll = _knob(cfg, "unroll", [False, True], DEFAULTS["depthwise"]["unroll"])
    out = depthwise_int8(data, kernel, strides, padding, unroll=unroll,
                         tier=kind[1] if isa in (kind[1], "mve") else None, mve=isa == "mve")
    oh, ow = (int(d) for d in out.shape[2:])
    cfg.add_flop(2.0 * n * o * oh * ow * kh * kw)
    _acc(out).op.attrs["isa"] = isa
    return out


def _acc(out):
    from .conv2d_direct import DW_TAG
    from .conv2d_int8 import TAG
    for tag in (TAG, DW_TAG):
        acc = _find(out, tag)
        if acc is not None:
            return acc
    raise AssertionError("no Cortex-M conv stage")


def schedule(outs):
    """schedule_any, honouring the template's ``isa`` knob (``plain``: the naive schedule)."""
    first = outs[0] if isinstance(outs, (list, tuple)) else outs
    try:
        acc = _acc(first)
    except AssertionError:
        return None
    if acc.op.attrs.get("isa") == "plain":
        return naive_schedule(outs, acc)
    return schedule_any(outs)


def naive_schedule(outs, acc):
    """Plain loops: every elementwise stage inlined, the sums computed in a root buffer by the
    loops as the compute writes them (no tensorize, no unrolling): the baseline tuning beats."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([t.op for t in outs])
    keep = {acc.op} | {t.op for t in acc.op.input_tensors if isinstance(t.op, te.ComputeOp)}
    for stage in list(s.stages):
        op = stage.op
        if op in [t.op for t in outs] or op in keep or not isinstance(op, te.ComputeOp) or op.reduce_axis:
            continue
        stage.compute_inline()
    return s


__all__ = ["tunable_conv2d", "schedule", "naive_schedule", "kind_of", "DEFAULTS"]
