"""``relay.quantize``: post-training int8 quantization of a float model.

>>> with relay.quantize.qconfig(calibrate_mode="kl_divergence", weight_scale="max"):
...     qmod = relay.quantize.quantize(mod, params, dataset=calibration_batches)
>>> lib = relay.build(qmod, target="llvm")

``quantize`` finds the conv2d and dense ops (minus the skipped ones), runs the float model on
the calibration ``dataset`` (an iterable of ``{input name: array}``; progress on the logger
``kiln.relay.quantize``) to choose each op's input scale (calibrate.py), quantizes the weights,
and returns the model in QDQ form: ``dequantize(quantize(x)) -> op <- dequantize(int8 weight)``.
``relay.build``'s FakeQuantizationToInteger then computes those ops on int8 with int32
accumulation (docs/quantization.md).
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass, field, fields, replace

import numpy as np

from kiln.errors import KilnError

from .calibrate import activation_scale, weight_scale

logger = logging.getLogger("kiln.relay.quantize")


@dataclass(frozen=True)
class QConfig:
    """Settings of ``quantize`` (TVM 0.13's qconfig names; int8 only)."""

    nbit_input: int = 8
    nbit_weight: int = 8
    dtype_input: str = "int8"
    dtype_weight: str = "int8"
    calibrate_mode: str = "global_scale"
    global_scale: float = 8.0
    calibrate_percentile: float = 99.99
    weight_scale: str = "power2"
    skip_conv_layers: tuple = (0,)
    skip_dense_layer: bool = True
    per_channel: bool = False
    calibrate_samples: int = 0  # 0: the whole dataset
    extra: dict = field(default_factory=dict)

    def __enter__(self):
        self.extra.setdefault("tokens", []).append(_CURRENT.set(self))
        return self

    def __exit__(self, *exc):
        _CURRENT.reset(self.extra["tokens"].pop())


_CURRENT: contextvars.ContextVar = contextvars.ContextVar("kiln_qconfig", default=QConfig())
_MODES = ("kl_divergence", "percentile", "global_scale")


def qconfig(**kwargs) -> QConfig:
    """A QConfig to use as ``with relay.quantize.qconfig(...):``; unknown or unsupported settings fail."""
    names = {f.name for f in fields(QConfig)} - {"extra"}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise KilnError(f"relay.quantize.qconfig: unknown setting(s) {unknown}; kiln supports {sorted(names)}")
    if "skip_conv_layers" in kwargs:
        kwargs["skip_conv_layers"] = tuple(int(i) for i in (kwargs["skip_conv_layers"] or ()))
    cfg = replace(QConfig(), **kwargs)
    if cfg.calibrate_mode not in _MODES:
        raise KilnError(f"relay.quantize.qconfig: calibrate_mode={cfg.calibrate_mode!r}; use one of {list(_MODES)}")
    if cfg.weight_scale not in ("max", "power2"):
        raise KilnError(f"relay.quantize.qconfig: weight_scale={cfg.weight_scale!r}; use 'max' or 'power2'")
    if (cfg.nbit_input, cfg.nbit_weight, cfg.dtype_input, cfg.dtype_weight) != (8, 8, "int8", "int8"):
        raise KilnError("relay.quantize.qconfig: kiln quantizes to int8 inputs and weights (nbit 8, dtype int8)")
    return cfg


def current_qconfig() -> QConfig:
    return _CURRENT.get()


def quantize(mod, params=None, dataset=None):
    """``mod`` (an IRModule or Function) in QDQ form with calibrated int8 scales; see the module doc."""
    from .realize import targets, to_qdq
    from ..transform import BindParams, InferType
    from ...ir.module import IRModule
    from ..expr import Function

    cfg = current_qconfig()
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    if params:
        mod = BindParams(params)(mod)
    mod = InferType()(mod)
    func = mod["main"]
    chosen = targets(func, cfg)
    if not chosen:
        logger.info("relay.quantize: no conv2d/dense to quantize (skip_conv_layers=%s, skip_dense_layer=%s)",
                    list(cfg.skip_conv_layers), cfg.skip_dense_layer)
        return mod
    if cfg.calibrate_mode == "global_scale":
        samples = None
    else:
        if dataset is None:
            raise KilnError(f"relay.quantize: calibrate_mode={cfg.calibrate_mode!r} needs a calibration dataset "
                            "(an iterable of {input name: array}); pass dataset=, or use calibrate_mode='global_scale'")
        from .realize import collect
        samples = collect(func, chosen, dataset, cfg.calibrate_samples)
    scales = [activation_scale(samples[i] if samples is not None else [], cfg.calibrate_mode, cfg.global_scale,
                               cfg.calibrate_percentile) for i in range(len(chosen))]
    return IRModule({"main": to_qdq(func, chosen, scales, cfg)})


__all__ = ["qconfig", "current_qconfig", "quantize", "QConfig", "activation_scale", "weight_scale"]
