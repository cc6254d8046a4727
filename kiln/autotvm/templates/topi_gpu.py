"""Tunable GPU operators from kiln.topi: conv2d NCHW, depthwise conv2d NCHW, dense and
batch_matmul, each registered as ``<op>.gpu`` (every OpenCL device; later CUDA) and
``<op>.mali`` (``opencl -device=mali``) and ``<op>.adreno`` (``opencl -device=adreno``), the names ``extract_from_program`` gives their tasks
for GPU targets.

The knobs are TVM's: ``tile_f``, ``tile_y``, ``tile_x`` (four levels: block, virtual thread,
thread, inner), ``tile_rc``, ``tile_ry``, ``tile_rx`` (two levels), ``tile_k`` for dense,
``auto_unroll_max_step`` and ``unroll_explicit``. Each template declares topi's untuned tiles as
its default (a point of the space), so tuning measures it first. Candidates whose work-groups
are too large or whose shared memory does not fit the device fail to build or launch; the
measurer records them as errors.
"""

from __future__ import annotations

from ..task import register_topi_compute, register_topi_schedule

FAMILIES = ("gpu", "mali", "adreno")
_UNROLL = [0, 512, 1500]


def _ints(shape) -> tuple:
    return tuple(int(getattr(d, "value", d)) for d in shape)


def _fallback(cfg) -> bool:
    return getattr(cfg, "is_fallback", False)


def _default(conf: dict) -> dict:
    """topi's untuned config written as the space writes its points (split sizes start with -1)."""
    out = {}
    for k, v in conf.items():
        if isinstance(v, list):
            out[k] = [-1] + [int(x) for x in v[1:]]
        elif isinstance(v, bool):
            out[k] = int(v)
        else:
            out[k] = v
    return out


def _unroll_knobs(cfg) -> None:
    cfg.define_knob("auto_unroll_max_step", list(_UNROLL))
    cfg.define_knob("unroll_explicit", [0, 1])


def _conv_shape(data, kernel, strides, padding, dilation, groups):
    from kiln.topi.nn.conv2d import conv2d_shape
    return conv2d_shape("conv2d", _ints(data.shape), _ints(kernel.shape), strides, padding, dilation, groups)


def _conv_flop(p) -> float:
    return 2.0 * p.batch * p.out_channel * p.out_height * p.out_width * \
        (p.in_channel // p.groups) * p.kernel_h * p.kernel_w


def _pkg(family: str):
    import importlib
    return importlib.import_module(f"kiln.topi.{family}")


def _conv_defaults(family: str, p) -> dict:
    if family in ("mali", "adreno"):  # adreno's texture convs run Mali's register-tiled kernel
        from kiln.topi.mali.conv2d import default_config
    else:
        from kiln.topi.gpu.conv2d import default_config
    return default_config(p)


def _register(family: str) -> dict:
    @register_topi_compute(f"conv2d_nchw.{family}")
    def conv2d_nchw(cfg, data, kernel, strides, padding, dilation, groups, out_dtype):
        p = _conv_shape(data, kernel, strides, padding, dilation, groups)
        if not _fallback(cfg):
            cfg.define_split("tile_f", p.out_channel, num_outputs=4)
            cfg.define_split("tile_y", p.out_height, num_outputs=4)
            cfg.define_split("tile_x", p.out_width, num_outputs=4)
            cfg.define_split("tile_rc", p.in_channel // p.groups, num_outputs=2)
            cfg.define_split("tile_ry", p.kernel_h, num_outputs=2)
            cfg.define_split("tile_rx", p.kernel_w, num_outputs=2)
            _unroll_knobs(cfg)
            cfg.define_default(_default(_conv_defaults(family, p)))
        cfg.add_flop(_conv_flop(p))
        return _pkg(family).conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, groups,
                                        cfg=None if _fallback(cfg) else cfg)

    @register_topi_schedule(f"conv2d_nchw.{family}")
    def schedule_conv2d_nchw(cfg, outs):
        return _pkg(family).schedule_conv2d_nchw(outs)

    @register_topi_compute(f"depthwise_conv2d_nchw.{family}")
    def depthwise_conv2d_nchw(cfg, data, kernel, strides, padding, dilation, groups, out_dtype):
        from kiln.topi.gpu.depthwise_conv2d import default_config
        p = _conv_shape(data, kernel, strides, padding, dilation, groups)
        if not _fallback(cfg):
            cfg.define_split("tile_f", p.out_channel, num_outputs=4)
            cfg.define_split("tile_y", p.out_height, num_outputs=4)
            cfg.define_split("tile_x", p.out_width, num_outputs=4)
            _unroll_knobs(cfg)
            cfg.define_default(_default(default_config(p.out_channel, p.out_height, p.out_width)))
        cfg.add_flop(_conv_flop(p))
        return _pkg(family).conv2d_nchw(data, kernel, strides, padding, dilation, out_dtype, groups,
                                        cfg=None if _fallback(cfg) else cfg)

    @register_topi_schedule(f"depthwise_conv2d_nchw.{family}")
    def schedule_depthwise_conv2d_nchw(cfg, outs):
        return _pkg(family).schedule_conv2d_nchw(outs)

    def _dense_knobs(cfg, m, n, k, tensorcore=False):
        if tensorcore:  # float16 on CUDA: topi.gpu takes the tensor-core schedule (topi_cuda.py)
            from .topi_cuda import define_tensorcore_knobs
            return define_tensorcore_knobs(cfg, m, n, k)
        if family == "mali":
            from kiln.topi.mali.dense import default_config
        else:
            from kiln.topi.gpu.dense import default_config
        cfg.define_split("tile_y", m, num_outputs=4)
        cfg.define_split("tile_x", n, num_outputs=4)
        cfg.define_split("tile_k", k, num_outputs=2)
        cfg.define_knob("vec", [1] if family == "mali" else [1, 4])
        _unroll_knobs(cfg)
        cfg.define_default(_default(default_config(m, n, k)))

    @register_topi_compute(f"dense_nopack.{family}")
    def dense(cfg, data, weight, out_dtype):
        m, k = _ints(data.shape)
        n = _ints(weight.shape)[0]
        if not _fallback(cfg):
            from kiln.topi.cuda.tensorcore import use_tensorcore
            _dense_knobs(cfg, m, n, k, family == "gpu" and use_tensorcore(data, weight))
        cfg.add_flop(2.0 * m * n * k)
        return _pkg(family).dense(data, weight, None, out_dtype, cfg=None if _fallback(cfg) else cfg)

    @register_topi_schedule(f"dense_nopack.{family}")
    def schedule_dense(cfg, outs):
        return _pkg(family).schedule_dense(outs)

    @register_topi_compute(f"batch_matmul.{family}")
    def batch_matmul(cfg, a, b, out_dtype, transpose_b):
        batch, m, k = _ints(a.shape)
        n = _ints(b.shape)[1 if transpose_b else 2]
        if not _fallback(cfg):
            _dense_knobs(cfg, m, n, k)
        cfg.add_flop(2.0 * max(batch, _ints(b.shape)[0]) * m * n * k)
        return _pkg(family).batch_matmul(a, b, None, out_dtype, False, transpose_b,
                                         cfg=None if _fallback(cfg) else cfg)

    @register_topi_schedule(f"batch_matmul.{family}")
    def schedule_batch_matmul(cfg, outs):
        return _pkg(family).schedule_batch_matmul(outs)

    return {"conv2d_nchw": conv2d_nchw, "depthwise_conv2d_nchw": depthwise_conv2d_nchw, "dense": dense,
            "batch_matmul": batch_matmul}


GPU = _register("gpu")
MALI = _register("mali")
ADRENO = _register("adreno")  # conv2d / depthwise read textures (topi.adreno); dense is topi.gpu's
