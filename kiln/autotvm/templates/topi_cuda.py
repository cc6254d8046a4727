"""Tunable tensor-core operators for CUDA (kiln/topi/cuda/tensorcore.py): ``dense_tensorcore.cuda``
(data M x K, weight N x K, float16) and ``batch_matmul_tensorcore.cuda`` (B x M x K, B x N x K).

Knobs: ``block_row_warps``, ``block_col_warps`` (warps per block), ``warp_row_tiles``,
``warp_col_tiles`` (16 x 16 wmma tiles per warp), ``chunk`` (16-wide k steps per shared-memory
slab), ``offset`` (row padding of the shared slabs, halves), ``vec`` (halves per fetch), ``double_buffer`` (slabs in flight) and ``mma``
(ldmatrix + mma.sync instead of wmma) and ``raster`` (block rows walked per block column). The
untuned config is the default point. relay's float16 dense on CUDA is the ``dense_nopack.gpu``
task; its template (topi_gpu.py) defines these knobs for it through ``define_tensorcore_knobs``.
"""

from __future__ import annotations

from ..task import register_topi_compute, register_topi_schedule


def _ints(shape) -> tuple:
    return tuple(int(getattr(d, "value", d)) for d in shape)


def define_tensorcore_knobs(cfg, m: int, n: int, k: int) -> None:
    from kiln.topi.cuda.tensorcore import KNOBS, default_config

    for name, values in KNOBS.items():
        cfg.define_knob(name, list(values))
    cfg.define_default(default_config(m, n, k))


def _cfg(cfg):
    return None if getattr(cfg, "is_fallback", False) else cfg


@register_topi_compute("dense_tensorcore.cuda")
def dense_tensorcore(cfg, data, weight, out_dtype):
    from kiln.topi.cuda import dense_tensorcore as compute

    m, k = _ints(data.shape)
    n = _ints(weight.shape)[0]
    if not getattr(cfg, "is_fallback", False):
        define_tensorcore_knobs(cfg, m, n, k)
    cfg.add_flop(2.0 * m * n * k)
    return compute(data, weight, None, out_dtype, cfg=_cfg(cfg))


@register_topi_schedule("dense_tensorcore.cuda")
def schedule_dense_tensorcore(cfg, outs):
    from kiln.topi.cuda import schedule_dense_tensorcore as schedule

    return schedule(outs)


@register_topi_compute("batch_matmul_tensorcore.cuda")
def batch_matmul_tensorcore(cfg, a, b, out_dtype):
    from kiln.topi.cuda import batch_matmul_tensorcore as compute

    batch, m, k = _ints(a.shape)
    n = _ints(b.shape)[1]
    if not getattr(cfg, "is_fallback", False):
        define_tensorcore_knobs(cfg, m, n, k)
    cfg.add_flop(2.0 * batch * m * n * k)
    return compute(a, b, None, out_dtype, cfg=_cfg(cfg))


@register_topi_schedule("batch_matmul_tensorcore.cuda")
def schedule_batch_matmul_tensorcore(cfg, outs):
    from kiln.topi.cuda import schedule_batch_matmul_tensorcore as schedule

    return schedule(outs)
