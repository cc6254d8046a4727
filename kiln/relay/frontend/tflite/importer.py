"""Walk a TFLite flatbuffer's first subgraph and build the relay function.

The graph stays NHWC, as TFLite computes it (conv2d ``NHWC`` with weights transposed from
TFLite's OHWI to HWIO at import; pooling ``NHWC``). Constant buffers become Constants, so
``params`` is empty. Quantized (int8/uint8) models are dequantized to float with every
quantized tensor rounded to its grid after the op that makes it: see quantize.py.
"""

from __future__ import annotations

import os

import numpy as np

from kiln.errors import KilnError

from ...expr import Function, Tuple, const, var
from ...transform.infer_type import infer
from . import quantize as Q


class ImportError_(KilnError):
    """The TFLite model cannot be imported as written."""


_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8",
           10: "float64"}


# Integer kernels that round the stored integers' average (zero point included).
_ROUND_WITH_ZERO_POINT = {"AVERAGE_POOL_2D"}


def _op_names() -> dict:
    import tflite
    return {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


class TensorInfo:
    """One tensor of the subgraph: name, shape, dtype, quantization and constant data."""

    def __init__(self, model, t):
        self.name = t.Name().decode()
        self.shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        self.dtype = _DTYPES.get(t.Type(), f"tflite type {t.Type()}")
        self.qp = Q.read_qparams(t)
        buf = model.Buffers(t.Buffer())
        raw = buf.DataAsNumpy() if buf is not None and buf.DataLength() else None
        self.data = None
        if raw is not None:
            self.data = np.frombuffer(raw.tobytes(), dtype=np.dtype(self.dtype)).reshape(self.shape)

    @property
    def quantized(self) -> bool:
        return self.qp is not None and self.dtype in Q.RANGES

    def real_constant(self) -> np.ndarray:
        """The constant's real values (dequantized when it is quantized)."""
        if self.qp is not None and self.dtype in ("int8", "uint8", "int16", "int32"):
            return Q.dequantize_array(self.data, self.qp)
        return self.data.astype("float32") if self.dtype == "float16" else self.data


class Ctx:
    """What a converter sees: the op, its tensors, options and helpers."""

    def __init__(self, importer: "_Importer", op, name: str):
        self.importer = importer
        self.op = op
        self.op_name = name
        self.in_idx = [int(i) for i in op.InputsAsNumpy()] if op.InputsLength() else []
        self.out_idx = [int(i) for i in op.OutputsAsNumpy()] if op.OutputsLength() else []

    @property
    def where(self) -> str:
        outs = [self.importer.tensors[i].name for i in self.out_idx]
        return f"{self.op_name} (output {', '.join(outs)})"

    def fail(self, msg: str):
        raise ImportError_(f"from_tflite: {self.where}: {msg}")

    def options(self, cls):
        table = self.op.BuiltinOptions()
        opts = cls()
        if table is None:
            self.fail(f"has no {cls.__name__}")
        opts.Init(table.Bytes, table.Pos)
        return opts

    def info(self, k: int) -> TensorInfo | None:
        """The k-th input's TensorInfo (None for an absent optional input)."""
        if k >= len(self.in_idx) or self.in_idx[k] < 0:
            return None
        return self.importer.tensors[self.in_idx[k]]

    def out_info(self, k: int = 0) -> TensorInfo:
        return self.importer.tensors[self.out_idx[k]]

    def constant(self, k: int, what: str) -> np.ndarray:
        info = self.info(k)
        if info is None or info.data is None:
            self.fail(f"{what} must be a constant tensor")
        return info.data

    def shape_of(self, expr) -> tuple:
        return tuple(infer(expr).checked_type.shape)


class _Importer:
    def __init__(self, model, shape: dict, dtype: dict, converters: dict):
        self.model = model
        if model.SubgraphsLength() < 1:
            raise ImportError_("from_tflite: the model has no subgraph")
        self.graph = model.Subgraphs(0)
        self.tensors = [TensorInfo(model, self.graph.Tensors(i)) for i in range(self.graph.TensorsLength())]
        self.shape = dict(shape or {})
        self.dtype = dict(dtype or {})
        self.converters = converters
        self.names = _op_names()
        self.values: dict = {}
        self.inputs: list = []

    def op_name(self, op) -> str:
        code = self.model.OperatorCodes(op.OpcodeIndex())
        builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
        if builtin == 32:  # CUSTOM
            return f"CUSTOM:{code.CustomCode().decode()}"
        return self.names.get(builtin, f"builtin {builtin}")

    def ops(self):
        return [self.graph.Operators(i) for i in range(self.graph.OperatorsLength())]

    def check_supported(self):
        missing: dict = {}
        for op in self.ops():
            name = self.op_name(op)
            if name not in self.converters:
                missing[name] = missing.get(name, 0) + 1
        if missing:
            listed = ", ".join(f"{k} (x{n})" for k, n in sorted(missing.items()))
            raise ImportError_(f"from_tflite: the model uses {len(missing)} unsupported operator(s): {listed}. "
                               "Supported operators are listed in docs/frontends.md "
                               "(kiln.relay.frontend.tflite.CONVERTERS).")

    def value(self, idx: int):
        """The relay value (real numbers for quantized tensors) of tensor ``idx``."""
        if idx in self.values:
            return self.values[idx]
        info = self.tensors[idx]
        if info.data is None:
            raise ImportError_(f"from_tflite: tensor {info.name!r} is read before any operator writes it")
        v = const(np.ascontiguousarray(info.real_constant()))
        self.values[idx] = v
        return v

    def input_var(self, idx: int):
        info = self.tensors[idx]
        shape = tuple(self.shape.get(info.name, info.shape))
        v = var(info.name, shape=shape, dtype=self.dtype.get(info.name, info.dtype))
        self.inputs.append(v)
        return Q.dequantize(v, info.qp) if info.quantized else v

    def run(self) -> Function:
        self.check_supported()
        for i in self.graph.InputsAsNumpy():
            self.values[int(i)] = self.input_var(int(i))
        for op in self.ops():
            self.convert(op)
        outs = []
        for i in self.graph.OutputsAsNumpy():
            info = self.tensors[int(i)]
            v = self.value(int(i))
            outs.append(Q.quantize(v, info.qp, info.dtype) if info.quantized else v)
        return Function(self.inputs, outs[0] if len(outs) == 1 else Tuple(outs))

    def convert(self, op) -> None:
        name = self.op_name(op)
        ctx = Ctx(self, op, name)
        ins = [None if i < 0 else self.value(i) for i in ctx.in_idx]
        try:
            out = self.converters[name](ctx, ins)
        except ImportError_:
            raise
        except (KilnError, ValueError, TypeError) as e:
            raise ImportError_(f"from_tflite: {ctx.where}: {e}") from e
        outs = out if isinstance(out, (list, tuple)) else [out]
        for idx, expr in zip(ctx.out_idx, outs):
            info = self.tensors[idx]
            self.values[idx] = Q.fake_quant(expr, info.qp, info.dtype, name in _ROUND_WITH_ZERO_POINT) \
                if info.quantized else expr


def _load(model):
    try:
        import tflite
    except ImportError:
        raise ImportError_("from_tflite needs the tflite package (the flatbuffer schema): pip install tflite") from None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        with open(path, "rb") as f:
            model = f.read()
        what = repr(path)
    else:
        what = "the buffer"
    if isinstance(model, (bytes, bytearray)):
        if len(model) < 8 or bytes(model[4:8]) != b"TFL3":
            raise ImportError_(f"from_tflite: {what} is not a TFLite flatbuffer (no TFL3 identifier); convert "
                               "the model with tf.lite.TFLiteConverter")
        return tflite.Model.GetRootAsModel(bytearray(model), 0)
    if isinstance(model, tflite.Model):
        return model
    raise ImportError_(f"from_tflite takes a tflite.Model, the bytes of a .tflite file or its path, "
                       f"got {type(model).__name__}")


def from_tflite(model, shape_dict=None, dtype_dict=None):
    """Import a TFLite model (``tflite.Model``, bytes or a path) as ``(IRModule, params)``.

    ``shape_dict`` / ``dtype_dict`` override an input's shape or dtype by tensor name.

    >>> mod, params = relay.frontend.from_tflite(tflite.Model.GetRootAsModel(buf, 0), {"input": (1, 224, 224, 3)})
    """
    from kiln.ir.module import IRModule

    from . import CONVERTERS
    importer = _Importer(_load(model), shape_dict, dtype_dict, CONVERTERS)
    for name in importer.shape:
        known = [importer.tensors[int(i)].name for i in importer.graph.InputsAsNumpy()]
        if name not in known:
            raise ImportError_(f"from_tflite: shape_dict names {name!r}, but the model's inputs are {known}")
    func = importer.run()
    infer(func)
    return IRModule({"main": func}), {}
