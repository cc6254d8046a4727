"""Tunable CPU int8 kernels (kiln/relay/qnn/cpu_int8.py, kiln/topi/x86/conv2d_int8.py):
``conv2d_int8``, ``depthwise_conv2d_int8`` and ``dense_int8``, each ``.x86`` and ``.arm_cpu``.

The workload is the op's five inputs (data, packed weight, bias, multiplier, shift) and its
attributes as (name, value) pairs (``cpu_int8.workload_attrs``), so a task computes exactly the
kernel relay.build deploys. The knobs are the register tile: ``tile_ow`` (pixels of a row, every
divisor of the row up to 16) and ``oc_chunks`` (output blocks, 1 or 2) for the convs, ``tile_m`` (rows, divisors up to 8) for dense and batch_matmul. The
untuned tile (``default_tile_ow``, ``tile_width(m, 4)``) is one of the candidates and the declared
default, so tuning measures it first and never ends slower. AMX convs have no knob (one value).

``conv2d_int8_mixed.x86`` (x86 without VNNI, units on vpmaddubsw and vpmaddwd) has the same two
knobs, its untuned tile (``register_tile`` of the 16-bit tier) the default. Its fourth input is
an offset table, which random data would send outside the data: the runners get the task's
``tuning_mixed_table`` instead (``register_input_values``; x86/conv2d_int8.py).
"""

from __future__ import annotations

from ..task import register_input_values, register_topi_compute, register_topi_schedule

FAMILIES = ("x86", "arm_cpu")


def _ints(shape) -> tuple:
    return tuple(int(getattr(d, "value", d)) for d in shape)


def _out_width(data, weight, attrs: dict) -> int:
    kw = _ints(weight.shape)[2 if "tier" not in attrs else 3]
    pad = attrs["padding"]
    w = _ints(data.shape)[3] + pad[1] + pad[3]
    return (w - (kw - 1) * attrs["dilation"][1] - 1) // attrs["strides"][1] + 1


def _space(cfg, name: str, candidates: list, default: int) -> None:
    if getattr(cfg, "is_fallback", False):
        return
    cfg.define_knob(name, candidates)
    cfg.define_default({name: default})


def _register(family: str) -> dict:
    from kiln.relay.qnn import cpu_int8
    from kiln.topi.x86 import conv2d_int8 as k
    from kiln.topi.x86 import conv2d_int8_winograd as wino
    from kiln.topi.x86.amx_int8 import schedule_conv2d_int8_amx

    @register_topi_compute(f"conv2d_int8.{family}")
    def conv2d_int8(cfg, data, weight, bias, mult, shift, *attr_pairs):
        attrs = dict(attr_pairs)
        ow = _out_width(data, weight, attrs)
        lanes = _ints(weight.shape)[-2]
        if attrs["tier"] in ("amx", "wino16"):
            _space(cfg, "tile_ow", [0], 0)
        else:
            blocks = _ints(weight.shape)[0]
            _space(cfg, "tile_ow", k.tile_candidates(ow), k.default_tile_ow(ow, lanes, attrs["tier"], blocks))
            _space(cfg, "oc_chunks", [1, 2] if blocks % 2 == 0 else [1],
                   k.default_chunks(blocks, attrs["tier"], ow, lanes))
        out = cpu_int8.compute_from_workload("nn.contrib_conv2d_int8", (data, weight, bias, mult, shift),
                                             attr_pairs, _untuned(cfg))
        _flop(cfg, out, _ints(weight.shape))
        return out

    @register_topi_schedule(f"conv2d_int8.{family}")
    def schedule_conv2d_int8(cfg, outs):
        tags = {getattr(t.op, "tag", "") for t in _stages(outs[0])}
        if "conv2d_int8_amx" in tags:
            return schedule_conv2d_int8_amx(outs)
        if wino.PRODUCT_TAG in tags:  # tier wino16 (3x3 stride 1 without VNNI): no knob
            return wino.schedule_conv2d_int8_winograd(outs)
        return k.schedule_conv2d_int8(outs)

    @register_topi_compute(f"depthwise_conv2d_int8.{family}")
    def depthwise_conv2d_int8(cfg, data, weight, bias, mult, shift, *attr_pairs):
        attrs = dict(attr_pairs)
        ow = _out_width(data, weight, attrs)
        _space(cfg, "tile_ow", k.tile_candidates(ow), k.tile_width(ow, 8))
        out = cpu_int8.compute_from_workload("nn.contrib_depthwise_conv2d_int8", (data, weight, bias, mult, shift),
                                             attr_pairs, _untuned(cfg))
        return out

    @register_topi_schedule(f"depthwise_conv2d_int8.{family}")
    def schedule_depthwise_conv2d_int8(cfg, outs):
        return k.schedule_depthwise_int8(outs)

    @register_topi_compute(f"dense_int8.{family}")
    def dense_int8(cfg, data, weight, bias, mult, shift, *attr_pairs):
        m = _ints(data.shape)[0]
        _space(cfg, "tile_m", k.tile_candidates(m, 8), k.tile_width(m, 4))
        return cpu_int8.compute_from_workload("nn.contrib_dense_int8", (data, weight, bias, mult, shift),
                                              attr_pairs, _untuned(cfg))

    @register_topi_schedule(f"dense_int8.{family}")
    def schedule_dense_int8(cfg, outs):
        return k.schedule_dense_int8(outs)

    @register_topi_compute(f"batch_matmul_int8.{family}")
    def batch_matmul_int8(cfg, x, y, *attr_pairs):
        m = _ints(x.shape)[1]
        _space(cfg, "tile_m", k.tile_candidates(m, 8), k.tile_width(m, 4))
        return cpu_int8.compute_from_workload("nn.contrib_batch_matmul_int8", (x, y), attr_pairs, _untuned(cfg))

    @register_topi_schedule(f"batch_matmul_int8.{family}")
    def schedule_batch_matmul_int8(cfg, outs):
        from kiln.topi.x86.batch_matmul_int8 import schedule_batch_matmul_int8 as schedule
        return schedule(outs)

    return {"conv2d_int8": conv2d_int8, "depthwise_conv2d_int8": depthwise_conv2d_int8, "dense_int8": dense_int8,
            "batch_matmul_int8": batch_matmul_int8}


def _register_mixed() -> dict:
    from kiln.relay.qnn import cpu_int8
    from kiln.topi.x86 import conv2d_int8 as k

    op = "nn.contrib_conv2d_int8_mixed"

    def geometry(data, weight, attrs: dict):
        """(output width, output blocks, lanes) of a mixed conv's workload."""
        kw, (_, pl, _, pr) = attrs["kernel_size"][1], attrs["padding"]
        ow = (_ints(data.shape)[3] + pl + pr - (kw - 1) * attrs["dilation"][1] - 1) // attrs["strides"][1] + 1
        blocks, _, lanes, _ = _ints(weight.shape)
        return ow, blocks, lanes

    @register_topi_compute("conv2d_int8_mixed.x86")
    def conv2d_int8_mixed(cfg, data, weight, weight16, table, bias, mult, shift, *attr_pairs):
        ow, blocks, lanes = geometry(data, weight, dict(attr_pairs))
        tile, chunks = k.register_tile(ow, blocks, "pmaddwd", lanes)  # the untuned tile
        _space(cfg, "tile_ow", k.tile_candidates(ow), tile)
        _space(cfg, "oc_chunks", [1, 2] if blocks % 2 == 0 else [1], chunks)
        out = cpu_int8.compute_from_workload(op, (data, weight, weight16, table, bias, mult, shift), attr_pairs,
                                             _untuned(cfg))
        _add_flop(cfg, out, 4 * _ints(table.shape)[1])  # units x 4 channels per output
        return out

    @register_topi_schedule("conv2d_int8_mixed.x86")
    def schedule_conv2d_int8_mixed(cfg, outs):
        return k.schedule_conv2d_int8_mixed(outs)

    @register_input_values("conv2d_int8_mixed.x86")
    def mixed_inputs(data, weight, weight16, table, bias, mult, shift, *attr_pairs) -> dict:
        a = dict(attr_pairs)
        blocks = weight[1][0]
        return {3: k.tuning_mixed_table(blocks, data[1], a["kernel_size"], a["strides"], a["padding"],
                                        a["dilation"])}

    return {"conv2d_int8_mixed": conv2d_int8_mixed}


def _stages(out):
    stack, seen = [out], []
    while stack:
        t = stack.pop()
        if any(t.op is s.op for s in seen):
            continue
        seen.append(t)
        stack.extend(t.op.input_tensors)
    return seen


def _untuned(cfg):
    return None if getattr(cfg, "is_fallback", False) else cfg


def _flop(cfg, out, wshape) -> None:
    """2 x the multiply-adds of the conv (the packed weight holds every weight once)."""
    per_output = 1
    for d in wshape[1:-2]:
        per_output *= d
    _add_flop(cfg, out, per_output * wshape[-1])


def _add_flop(cfg, out, per_output: int) -> None:
    """2 x ``per_output`` multiply-adds for each element of ``out``."""
    if hasattr(cfg, "add_flop"):
        n_out = 1
        for d in _ints(out.shape):
            n_out *= d
        cfg.add_flop(2.0 * n_out * per_output)


X86 = _register("x86")
X86.update(_register_mixed())
ARM_CPU = _register("arm_cpu")
