"""Walk a TFLite flatbuffer's first subgraph and build the relay function.

Float graphs stay NHWC, as TFLite computes them (conv2d ``NHWC`` with weights transposed from
TFLite's OHWI to HWIO at import; pooling ``NHWC``). Constant buffers become Constants, so
``params`` is empty.

Quantized (int8, uint8, int16x8) graphs stay integer: each quantized tensor is its stored
integers, and the ops that read or write one are converted by QCONVERTERS (qnn_nn.py,
qnn_elementwise.py) into qnn ops with TFLite's arithmetic. Their convolutions run channels-first
(qnn.conv2d is NCHW/OIHW): a 4-D value may be held as NCHW, and each consumer asks for the layout
it needs (``Ctx.input``), so a chain of convolutions, adds and pools is transposed once at each
end. A quantized op without an integer converter takes the float route (dequantize, float op,
quantize), named in one log line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct

import numpy as np

from kiln import limits
from kiln.errors import FileFormatError, KilnError

from ...expr import Function, Tuple, const, var
from ...op import transform as tf
from ...transform.infer_type import infer
from . import quantize as Q


class ImportError_(FileFormatError):
    """The TFLite model cannot be imported as written."""


@contextlib.contextmanager
def _offsets(what: str):
    """Reading a flatbuffer field through the generated accessors: Python's flatbuffers has no
    verifier, so an offset that points outside the buffer surfaces as one of these exceptions
    from the accessor itself (struct.unpack_from past the end, a number out of its type's range,
    a name that is not UTF-8). Only accessor calls run inside this block."""
    try:
        yield
    except (struct.error, IndexError, UnicodeDecodeError) as err:
        raise ImportError_(f"from_tflite: {what}: the flatbuffer points outside the file ({err}); the file "
                           "is truncated or damaged: convert the model again") from None
    except (TypeError, ValueError) as err:  # flatbuffers: "bad number ... for type ...", "buffer is smaller..."
        raise ImportError_(f"from_tflite: {what}: a field holds an impossible value ({err}); the file is "
                           "damaged: convert the model again") from None


_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8",
           10: "float64"}


_LOG = logging.getLogger("kiln.relay.frontend.tflite")


def _op_names() -> dict:
    import tflite
    return {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


class TensorInfo:
    """One tensor of the subgraph: name, shape, dtype, quantization and constant data."""

    def __init__(self, model, t, index: int = 0):
        where = f"tensor {index}"
        with _offsets(where):
            self.name = (t.Name() or b"").decode()
            where = f"tensor {index} ({self.name!r})"
            self.shape = limits.shape(t.ShapeAsNumpy() if t.ShapeLength() else (), file="from_tflite",
                                      field=f"{where} shape")
            code = t.Type()
            self.qp = Q.read_qparams(t)
            n_buffers = model.BuffersLength()
            b = t.Buffer()
            if not 0 <= b < max(n_buffers, 1):
                raise ImportError_(f"from_tflite: {where} names buffer {b}, but the model has {n_buffers}; the "
                                   "file is damaged")
            buf = model.Buffers(b) if n_buffers else None
            raw = buf.DataAsNumpy() if buf is not None and buf.DataLength() else None
        if code not in _DTYPES:
            raise ImportError_(f"from_tflite: {where} has TFLite type {code}, which kiln does not import; "
                               f"supported: {sorted(_DTYPES.values())}")
        self.dtype = _DTYPES[code]
        if self.qp is not None and self.dtype in ("int8", "uint8", "int16", "int32", "int64"):
            problem = Q.qparams_problem(self.qp, self.dtype, self.shape)
            if problem:
                raise ImportError_(f"from_tflite: {where}: {problem}")
        self.data = None
        if raw is not None:
            want = limits.nbytes(self.shape, np.dtype(self.dtype).itemsize, file="from_tflite", field=f"{where} shape")
            if raw.size != want:
                raise ImportError_(f"from_tflite: {where}: its buffer holds {raw.size} bytes but shape "
                                   f"{list(self.shape)} of {self.dtype} needs {want}; the file is damaged")
            self.data = np.frombuffer(raw.tobytes(), dtype=np.dtype(self.dtype)).reshape(self.shape)

    @property
    def quantized(self) -> bool:
        return self.qp is not None and self.dtype in Q.RANGES

    def real_constant(self) -> np.ndarray:
        """The constant's real values (dequantized when it is quantized)."""
        if self.qp is not None and self.dtype in ("int8", "uint8", "int16", "int32", "int64"):
            return Q.dequantize_array(self.data, self.qp)
        return self.data.astype("float32") if self.dtype == "float16" else self.data


class _Options:
    """An options table whose accessors run inside ``_offsets``; window sizes (strides,
    dilations, filter sizes) read from the file must be at least 1."""

    def __init__(self, table, ctx):
        self._table, self._ctx = table, ctx

    def __getattr__(self, name):
        accessor = getattr(self._table, name)
        if not callable(accessor):
            return accessor

        def call(*args):
            with _offsets(f"operator {self._ctx.op_name} option {name}"):
                value = accessor(*args)
            if name.startswith(("Stride", "Dilation", "Filter")) and isinstance(value, int) and value < 1:
                self._ctx.fail(f"option {name} is {value}; it must be at least 1 (the file is damaged)")
            return value
        return call


class Ctx:
    """What a converter sees: the op, its tensors, options and helpers."""

    def __init__(self, importer: "_Importer", op, name: str):
        self.importer = importer
        self.op = op
        self.op_name = name
        with _offsets(f"operator {name}"):
            self.in_idx = [int(i) for i in op.InputsAsNumpy()] if op.InputsLength() else []
            self.out_idx = [int(i) for i in op.OutputsAsNumpy()] if op.OutputsLength() else []
        n = len(importer.tensors)
        bad = [i for i in self.in_idx if i >= n] + [i for i in self.out_idx if not 0 <= i < n]
        if bad or not self.out_idx:
            raise ImportError_(f"from_tflite: operator {name} names tensor {bad[0] if bad else '(none)'} as "
                               f"{'an input or output' if bad else 'its output'}, but the subgraph has {n} tensors; "
                               "the file is damaged")

    @property
    def where(self) -> str:
        outs = [self.importer.tensors[i].name for i in self.out_idx]
        return f"{self.op_name} (output {', '.join(outs)})"

    def fail(self, msg: str):
        raise ImportError_(f"from_tflite: {self.where}: {msg}")

    def has_options(self) -> bool:
        with _offsets(f"operator {self.op_name}"):
            return self.op.BuiltinOptions() is not None

    def options(self, cls):
        with _offsets(f"operator {self.op_name}"):
            table = self.op.BuiltinOptions()
        opts = cls()
        if table is None:
            self.fail(f"has no {cls.__name__}")
        opts.Init(table.Bytes, table.Pos)
        return _Options(opts, self)

    def rank(self, x, n: int, what: str = "input") -> tuple:
        """The shape of ``x`` (a relay value or a numpy constant), which must have ``n`` dims."""
        shape = tuple(x.shape) if isinstance(x, np.ndarray) else self.shape_of(x)
        if len(shape) != n:
            self.fail(f"the {what} has shape {list(shape)}; {self.op_name} needs {n} dimensions")
        return shape

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

    # -- quantized converters read their inputs through these --------------------------------

    def input(self, k: int, layout: str | None = None):
        """The k-th input's relay value (a quantized tensor's stored integers); ``layout`` "NCHW"
        or "NHWC" asks for a 4-D value in that layout (None: as it is held)."""
        if k >= len(self.in_idx) or self.in_idx[k] < 0:
            self.fail(f"has {len(self.in_idx)} inputs; input {k} is missing")
        return self.importer.get(self.in_idx[k], layout)

    def layout(self, k: int) -> str:
        """How the k-th input is held now: "NCHW" or "NHWC" (the file's order)."""
        return self.importer.layouts.get(self.in_idx[k], "NHWC")

    def q(self, k: int):
        """The k-th input's quantization parameters (it must have them)."""
        info = self.info(k)
        if info is None or info.qp is None:
            self.fail(f"input {k} has no quantization parameters; a quantized {self.op_name} needs them")
        return info.qp

    def out_q(self, k: int = 0):
        info = self.out_info(k)
        if info.qp is None:
            self.fail(f"output {info.name!r} has no quantization parameters; a quantized {self.op_name} needs them")
        if info.dtype not in Q.RANGES:
            self.fail(f"output {info.name!r} is {info.dtype} with quantization parameters; a quantized "
                      f"{self.op_name} writes int8, uint8 or int16 (the file is damaged)")
        return info.qp


class Held:
    """A converter's result held in ``layout`` (NCHW) rather than the file's NHWC."""

    def __init__(self, expr, layout: str):
        self.expr, self.layout = expr, layout


class _Importer:
    def __init__(self, model, shape: dict, dtype: dict, converters: dict, qconverters: dict):
        self.model = model
        with _offsets("the model's subgraphs"):
            if model.SubgraphsLength() < 1:
                raise ImportError_("from_tflite: the model has no subgraph; convert it again")
            self.graph = model.Subgraphs(0)
            n = self.graph.TensorsLength()
            # Each tensor table takes more than 4 bytes of the file: a larger count is damage.
            limits.count(n, file="from_tflite", field="subgraph 0 tensor count", most=len(model._tab.Bytes) // 4)
            tables = [self.graph.Tensors(i) for i in range(n)]
            self.graph_inputs = [int(i) for i in self.graph.InputsAsNumpy()] if self.graph.InputsLength() else []
            self.graph_outputs = [int(i) for i in self.graph.OutputsAsNumpy()] if self.graph.OutputsLength() else []
        self.tensors = [TensorInfo(model, t, i) for i, t in enumerate(tables)]
        for what, idx in (("input", self.graph_inputs), ("output", self.graph_outputs)):
            bad = [i for i in idx if not 0 <= i < n]
            if bad or (what == "output" and not idx):
                raise ImportError_(f"from_tflite: the subgraph's {what}s {idx[:8]} name tensors it does not have "
                                   f"({n} tensors); the file is damaged")
        fixed = [i for i in self.graph_inputs if self.tensors[i].data is not None]
        if fixed or len(set(self.graph_inputs)) != len(self.graph_inputs):
            what = (f"input tensor {self.tensors[fixed[0]].name!r} also holds constant data (a buffer)" if fixed
                    else f"inputs {self.graph_inputs[:8]} name a tensor twice")
            raise ImportError_(f"from_tflite: the subgraph's {what}; the file is damaged")
        self.shape = dict(shape or {})
        self.dtype = dict(dtype or {})
        self.converters = converters
        self.qconverters = qconverters
        self.names = _op_names()
        self.values: dict = {}
        self.layouts: dict = {}   # tensor index -> "NCHW" for values held channels-first
        self.views: dict = {}     # (tensor index, layout) -> the value transformed, shared by its readers
        self.float_ops: dict = {}  # quantized ops that took the float route -> count
        self.exact_rounding = True  # False: one rounding in conv/FC rescales (from_tflite's docstring)
        self.inputs: list = []

    def op_name(self, op) -> str:
        with _offsets("an operator's code"):
            index, n = op.OpcodeIndex(), self.model.OperatorCodesLength()
            if not 0 <= index < n:
                raise ImportError_(f"from_tflite: an operator names operator code {index}, but the model has {n}; "
                                   "the file is damaged")
            code = self.model.OperatorCodes(index)
            builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
            if builtin == 32:  # CUSTOM
                return f"CUSTOM:{(code.CustomCode() or b'').decode()}"
        return self.names.get(builtin, f"builtin {builtin}")

    def ops(self):
        with _offsets("the subgraph's operators"):
            return [self.graph.Operators(i) for i in range(self.graph.OperatorsLength())]

    def check_supported(self):
        missing: dict = {}
        for op in self.ops():
            name = self.op_name(op)
            if name not in self.converters and name not in self.qconverters:
                missing[name] = missing.get(name, 0) + 1
        if missing:
            listed = ", ".join(f"{k} (x{n})" for k, n in sorted(missing.items()))
            raise ImportError_(f"from_tflite: the model uses {len(missing)} unsupported operator(s): {listed}. "
                               "Supported operators are listed in docs/frontends.md "
                               "(kiln.relay.frontend.tflite.CONVERTERS).")

    def value(self, idx: int):
        """The relay value of tensor ``idx`` as held (a quantized tensor's stored integers)."""
        if idx in self.values:
            return self.values[idx]
        info = self.tensors[idx]
        if info.data is None:
            raise ImportError_(f"from_tflite: tensor {info.name!r} is read before any operator writes it")
        data = info.data if info.quantized or info.dtype in ("int32", "int64") else info.real_constant()
        v = const(np.ascontiguousarray(data))
        self.values[idx] = v
        return v

    def get(self, idx: int, layout: str | None = None):
        """Tensor ``idx``'s value in ``layout`` ("NCHW"/"NHWC"; None: as held)."""
        expr = self.value(idx)
        have = self.layouts.get(idx, "NHWC")
        # a value held NCHW is 4-D whatever the file declares (TFLite ignores a declared output shape)
        if layout is None or layout == have or (have == "NHWC" and len(self.tensors[idx].shape) != 4):
            return expr
        key = (idx, layout)
        if key not in self.views:
            self.views[key] = tf.layout_transform(expr, have, layout)
        return self.views[key]

    def real(self, idx: int):
        """Tensor ``idx`` as real numbers in NHWC (a quantized one dequantized), for the float route."""
        info = self.tensors[idx]
        if idx not in self.values and info.data is not None:
            return const(np.ascontiguousarray(info.real_constant()))
        v = self.get(idx, "NHWC")
        return Q.dequantize(v, info.qp) if info.quantized else v

    def input_var(self, idx: int):
        info = self.tensors[idx]
        shape = tuple(self.shape.get(info.name, info.shape))
        v = var(info.name, shape=shape, dtype=self.dtype.get(info.name, info.dtype))
        self.inputs.append(v)
        return v

    def run(self) -> Function:
        self.check_supported()
        for i in self.graph_inputs:
            self.values[i] = self.input_var(i)
        for op in self.ops():
            self.convert(op)
        if self.float_ops:
            listed = ", ".join(f"{k} x{n}" for k, n in sorted(self.float_ops.items()))
            _LOG.info("from_tflite: quantized ops computed in float (dequantize, op, quantize): %s", listed)
        outs = [self.get(i, "NHWC") for i in self.graph_outputs]
        return Function(self.inputs, outs[0] if len(outs) == 1 else Tuple(outs))

    def convert(self, op) -> None:
        name = self.op_name(op)
        ctx = Ctx(self, op, name)
        if not ctx.in_idx or ctx.in_idx[0] < 0:  # every supported operator reads its first input
            ctx.fail("has no first input; the file is damaged")
        # quantized activations make an integer op; int8 weights alone (dynamic-range models) do not
        touched = [self.tensors[i] for i in ctx.in_idx if i >= 0 and self.tensors[i].data is None]
        quantized = any(t.quantized for t in touched + [self.tensors[i] for i in ctx.out_idx])
        try:
            if quantized and name in self.qconverters:
                out = self.qconverters[name](ctx)
            elif quantized:
                out = self.float_route(ctx, name)
            else:
                out = self.converters[name](ctx, [None if i < 0 else self.real(i) for i in ctx.in_idx])
        except FileFormatError:  # ImportError_ and size limits: already name the file
            raise
        except (KilnError, ValueError, TypeError) as e:
            raise ImportError_(f"from_tflite: {ctx.where}: {e}") from e
        outs = out if isinstance(out, (list, tuple)) else [out]
        for idx, expr in zip(ctx.out_idx, outs):
            if isinstance(expr, Held):
                self.values[idx], self.layouts[idx] = expr.expr, expr.layout
            else:
                self.values[idx] = expr

    def float_route(self, ctx, name: str):
        """A quantized op without an integer converter: dequantize, the float op, quantize."""
        if name not in self.converters:
            ctx.fail("has no converter for quantized tensors")
        self.float_ops[name] = self.float_ops.get(name, 0) + 1
        out = self.converters[name](ctx, [None if i < 0 else self.real(i) for i in ctx.in_idx])
        outs = out if isinstance(out, (list, tuple)) else [out]
        done = []
        for idx, expr in zip(ctx.out_idx, outs):
            info = self.tensors[idx]
            done.append(Q.quantize(expr, info.qp, info.dtype) if info.quantized else expr)
        return done


def _load(model):
    try:
        import tflite
    except ImportError:
        raise ImportError_("from_tflite needs the tflite package (the flatbuffer schema): pip install tflite") from None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        limits.file_size(path)  # a folder or a missing file: one clear error
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


def from_tflite(model, shape_dict=None, dtype_dict=None, exact_rounding=True):
    """Import a TFLite model (``tflite.Model``, bytes or a path) as ``(IRModule, params)``.

    ``shape_dict`` / ``dtype_dict`` override an input's shape or dtype by tensor name.
    ``exact_rounding``: quantized convolutions and fully connected layers rescale as TFLite's
    kernels do (two roundings), so the integers equal TFLite's. ``False`` rescales them with one
    rounding (half up), the form the CPU int8 kernels compute in their epilogue: several times
    faster, each such op within one step of TFLite (docs/quantization.md).

    >>> mod, params = relay.frontend.from_tflite(tflite.Model.GetRootAsModel(buf, 0), {"input": (1, 224, 224, 3)})
    """
    from kiln.ir.module import IRModule

    from . import CONVERTERS, QCONVERTERS
    importer = _Importer(_load(model), shape_dict, dtype_dict, CONVERTERS, QCONVERTERS)
    importer.exact_rounding = bool(exact_rounding)
    for name in importer.shape:
        known = [importer.tensors[i].name for i in importer.graph_inputs]
        if name not in known:
            raise ImportError_(f"from_tflite: shape_dict names {name!r}, but the model's inputs are {known}")
    func = importer.run()
    infer(func)
    return IRModule({"main": func}), {}
