"""dense / matmul / batch_matmul for Mali: register tiles per work-item read straight from
global memory, the columns of a tile as one vector (float4). See the package docstring."""

from __future__ import annotations

from kiln import te

from ..gpu.dense import SMALL_M, _find, schedule_tiled
from ..gpu.common import as_list, inline_injective, schedule_per_item
from ..gpu.tiling import divisor
from ..utils import const_int, knob

KNOBS = ("tile_y", "tile_x", "tile_k", "auto_unroll_max_step", "unroll_explicit")


def default_config(m: int, n: int, k: int) -> dict:
    xi = 4 if n % 4 == 0 else 1
    yi = divisor(m, 4)
    tx = divisor(n // xi, 16)
    ty = divisor(m // yi, max(1, 64 // tx))
    return {"tile_y": [m // (ty * yi), 1, ty, yi], "tile_x": [n // (tx * xi), 1, tx, xi],
            "tile_k": [k // divisor(k, 4), divisor(k, 4)], "vec": 1,
            "auto_unroll_max_step": 512, "unroll_explicit": True}


def config_for(m: int, n: int, k: int, cfg=None) -> dict:
    from ..gpu.tiling import resolve

    conf = default_config(m, n, k)
    conf.update({key: knob(cfg, key, v) for key, v in conf.items()})
    for key, total in (("tile_y", m), ("tile_x", n), ("tile_k", k)):
        conf[key] = resolve(conf[key], total, key)
    return conf


def dense(data, weight, bias=None, out_dtype=None, cfg=None):
    from ..nn.dense import add_bias, dense as _dense

    out = _dense(data, weight, None, out_dtype)
    m, k = (const_int(d) for d in data.shape)
    out.op.attrs["gpu_config"] = config_for(m, const_int(weight.shape[0]), k, cfg)
    return add_bias(out, bias, 1)


def schedule_dense(outs, cfg=None):
    outs = as_list(outs)
    out = outs[0]
    mm = _find(out)
    *_, m, n = (const_int(d) for d in mm.shape)
    k = const_int(mm.op.reduce_axis[0].dom.extent)
    if cfg is None and m < SMALL_M:
        return schedule_per_item(outs)
    # the compute records the tuned config it was given (relay builds call this without cfg)
    conf = config_for(m, n, k, cfg) if cfg is not None else mm.op.attrs.get("gpu_config") or config_for(m, n, k)
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)
    schedule_tiled(s, mm, out, conf, shared=False, vector=True)
    return s


schedule_matmul = schedule_dense
schedule_batch_matmul = schedule_dense
