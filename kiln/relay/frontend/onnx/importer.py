"""Walk an ONNX graph and build the relay function.

Initializers become Constants (``freeze_params=True``) or, for float tensors, function
params returned in ``params`` (integer initializers stay constants). Shapes are static: every graph input needs a concrete shape (from the model or
the ``shape`` argument; a symbolic dim such as ``sequence`` takes the size a given input binds
it to, so giving ``input_ids`` fixes ``attention_mask`` too). A node whose inputs are all constants is evaluated right away with
the numpy reference executor, so shape-computing subgraphs (Shape -> Gather -> Concat ->
Reshape) arrive at their consumers as constants.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from kiln import limits
from kiln.errors import FileFormatError, KilnError

from ...expr import Constant, Function, Tuple, TupleWrapper, Var, const, var
from ...reference import evaluate
from ...transform.infer_type import infer
from ...ty import TensorType, dtype_of
from .data_dependent import Bounded, follow
from .ml import DOMAIN_OPS as ML_OPS
from .transformer import PREVIEW_OPS
from .quantized import DOMAIN_OPS  # onnxruntime's com.microsoft quantized ops

log = logging.getLogger("kiln.frontend.onnx")

# Tested on opsets 11-18 (the acceptance range). Other opsets from 7 on are accepted: converters
# read the attributes and inputs that moved between versions (Clip bounds, Slice/Pad/Split/
# Squeeze/Reduce axes) and fail naming the feature they lack.
MIN_OPSET = 7
# Ops whose definition has not changed since opset 1: models of only these import at any opset.
OPSET_STABLE = frozenset({"Not"})


class ImportError_(FileFormatError):
    """The ONNX model cannot be imported as written."""


class Ctx:
    """What a converter sees: the opset, the node, and helpers to read shapes and constants."""

    def __init__(self, importer: "_Importer", node):
        self.importer = importer
        self.node = node
        self.opset = importer.opset

    @property
    def where(self) -> str:
        return f"{self.node.op_type} node {self.node.name or '(unnamed)'!r}"

    def fail(self, msg: str):
        raise ImportError_(f"from_onnx: {self.importer.name}: {self.where}: {msg}")

    def allocation(self, shape, dtype, what: str = "output") -> tuple:
        """``shape`` (checked), if a tensor of it may be computed at import: within the model's
        expansion limit (kiln/limits.py), since a few bytes of ONNX can declare a huge constant."""
        shape = tuple(shape)
        field = f"{self.where} {what} of shape {list(shape)[:8]}{'...' if len(shape) > 8 else ''}"
        limits.tensor(shape, np.dtype(dtype).itemsize, file=f"from_onnx: {self.importer.name}", field=field,
                      limit=limits.expansion_limit(self.importer.size))
        return shape

    def type_of(self, expr) -> TensorType:
        if expr is None:  # an input the op needs left out (an empty name, too few inputs)
            self.fail("an input it needs is missing (too few inputs, or an empty input name)")
        return infer(expr).checked_type

    def shape_of(self, expr) -> tuple:
        return self.type_of(expr).shape

    def value(self, expr, what: str = "input"):
        """The numpy value of an input that must be known at import time."""
        if isinstance(expr, Constant):
            return expr.data
        if isinstance(expr, Var) and expr.name_hint in self.importer.initializers:
            return self.importer.initializers[expr.name_hint]
        self.fail(f"{what} must be a constant (kiln needs static shapes), but it is computed at run time")


def _attr_value(a):
    import onnx
    from onnx import helper
    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        from onnx import numpy_helper
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


class _Importer:
    def __init__(self, model, shape: dict, dtype, opset, freeze_params: bool, name: str = "", size: int = 0):
        from .validate import array
        self.name, self.size = name or "ONNX model", size
        self.graph = model.graph
        default = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
        self.opset = opset or (default[0] if default else 13)
        self.freeze = freeze_params
        self.shape = dict(shape or {})
        self.dtype = dtype
        self.initializers = {t.name: array(t, self.name, f"initializer {t.name!r}") for t in self.graph.initializer}
        self.tensors: dict = {}
        self.params: dict = {}
        self.inputs: list = []
        # name -> (axis, length, origin): tensors valid only up to a run-time length along axis
        # (NonMaxSuppression, NonZero, Unique: data_dependent.py)
        self.bounded: dict = {}

    def check_supported(self, converters: dict) -> None:
        missing: dict = {}
        for i, node in enumerate(self.graph.node):
            if node.op_type not in converters or (node.domain not in ("", "ai.onnx") and
                                                   (node.domain, node.op_type) not in DOMAIN_OPS | ML_OPS | PREVIEW_OPS):
                key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
                missing.setdefault(key, []).append(node.name or f"#{i}")
        if missing:
            lines = "\n".join(f"  {op}: {', '.join(names)}" for op, names in sorted(missing.items()))
            raise ImportError_(f"from_onnx: the model (opset {self.opset}) uses {len(missing)} unsupported op "
                               f"type(s):\n{lines}\nSupported ops are listed in docs/relay.md "
                               "(kiln.relay.frontend.onnx.CONVERTERS).")

    def input_var(self, vi):
        from onnx import helper
        name = vi.name
        tt = vi.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else None
        if isinstance(self.dtype, dict):
            dtype = self.dtype.get(name, dtype)
        elif dtype is None or (dtype.startswith("float") and self.dtype):
            dtype = dtype or self.dtype
        shape = self.input_shapes[name]  # a buffer the executor allocates: within the load limit
        limits.tensor(shape, 2 if dtype == "bfloat16" else np.dtype(dtype or "uint8").itemsize,
                      file=f"from_onnx: {self.name}", field=f"graph input {name!r} of shape {list(shape)}")
        return var(name, shape=shape, dtype=dtype)

    def resolve_input_shapes(self, inputs) -> dict:
        """{input name: static shape}: the model's dims, the ``shape`` argument where given, and
        symbolic dims (``batch``, ``sequence``) bound by a given input that shares their name.
        Every axis still unknown is listed in one error naming the input and the axis."""
        declared = {}
        for vi in inputs:
            tt = vi.type.tensor_type
            declared[vi.name] = ([d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
                                  for d in tt.shape.dim] if tt.HasField("shape") else None)
        unknown_names = [n for n in self.shape if n not in declared]
        if unknown_names:
            raise ImportError_(f"from_onnx: shape names {unknown_names}, which are not inputs of the model; "
                               f"its inputs are {list(declared)}")
        bound: dict = {}
        for name, dims in declared.items():
            if name not in self.shape:
                continue
            given = tuple(int(d) for d in self.shape[name])
            if dims is not None and len(dims) != len(given):
                raise ImportError_(f"from_onnx: shape[{name!r}] = {given} has {len(given)} axes; the model's "
                                   f"input {name!r} has {len(dims)} ({self._spell(dims)})")
            for axis, (d, g) in enumerate(zip(dims or (), given)):
                if isinstance(d, int) and d != g:
                    # The user's shape wins, as in TVM (a batch-1 export run on batches); a graph
                    # that hard-codes the size then fails type inference at the op that does.
                    log.warning("from_onnx: shape[%r] = %s sets axis %d to %d where the model says %d (%s); "
                                "using %d", name, given, axis, g, d, self._spell(dims), g)
                if isinstance(d, str):
                    bound.setdefault(d, g)
        shapes, missing = {}, []
        for name, dims in declared.items():
            if name in self.shape:
                shapes[name] = tuple(int(d) for d in self.shape[name])
                continue
            if dims is None:
                missing.append(f"{name!r} (no shape at all)")
                continue
            out, open_axes = [], []
            for axis, d in enumerate(dims):
                value = d if isinstance(d, int) else bound.get(d)
                if value is None:
                    open_axes.append(f"axis {axis} ({d or 'unnamed'})")
                out.append(value)
            if open_axes:
                missing.append(f"{name!r} {', '.join(open_axes)}")
            shapes[name] = tuple(out)
        if missing:
            example = ", ".join(f"{n!r}: ({', '.join(str(d) if isinstance(d, int) else '...' for d in declared[n] or ['...'])})"
                                for n in declared if n not in self.shape and
                                (declared[n] is None or any(not isinstance(d, int) for d in declared[n])))
            raise ImportError_(f"from_onnx: the model's inputs have dynamic axes kiln must know: {'; '.join(missing)}. "
                               f"Pass shape={{{example}}} with the sizes to compile for (one build per size; "
                               "docs/frontends.md, 'Dynamic axes')")
        return shapes

    @staticmethod
    def _spell(dims) -> str:
        return "[" + ", ".join(str(d) if d is not None else "?" for d in dims) + "]"

    def run(self, converters: dict):
        if self.opset < MIN_OPSET and not all(n.op_type in OPSET_STABLE for n in self.graph.node):
            raise ImportError_(f"from_onnx: opset {self.opset} is not supported; kiln imports opset 7 and newer "
                               "(convert the model with onnx.version_converter)")
        self.check_supported(converters)
        for name, value in self.initializers.items():
            # Integer initializers are shapes, axes and indices: they stay constants even when
            # weights are kept as params, so shape computations still fold at import.
            if self.freeze or value.dtype.kind not in "fc":
                self.tensors[name] = const(value)
            else:
                v = var(name, shape=value.shape, dtype=dtype_of(value))
                self.tensors[name] = v
                self.params[name] = value
        self.input_shapes = self.resolve_input_shapes([vi for vi in self.graph.input
                                                       if vi.name not in self.initializers])
        for vi in self.graph.input:
            if vi.name not in self.initializers:
                v = self.input_var(vi)
                self.tensors[vi.name] = v
                self.inputs.append(v)
        for node in self.graph.node:
            self.convert(node, converters[node.op_type])
        outs = [self._output(o.name) for o in self.graph.output]
        body = outs[0] if len(outs) == 1 else Tuple(outs)
        params = self.inputs + [self.tensors[n] for n in self.params]
        return Function(params, body)

    def run_subgraph(self, graph, inputs: list) -> list:
        """The outputs of a graph attribute (FlexAttention's score_mod) applied to ``inputs``: its
        nodes converted like the model's, seeing the outer scope's tensors."""
        from . import CONVERTERS
        from .validate import array

        saved = dict(self.tensors)
        try:
            for t in graph.initializer:
                self.tensors[t.name] = const(array(t, self.name, f"subgraph {graph.name!r} initializer {t.name!r}"))
            if len(graph.input) != len(inputs):
                raise ImportError_(f"from_onnx: {self.name}: subgraph {graph.name!r} takes {len(graph.input)} inputs, "
                                   f"given {len(inputs)}")
            for vi, expr in zip(graph.input, inputs):
                self.tensors[vi.name] = expr
            for node in graph.node:
                if node.op_type not in CONVERTERS:
                    raise ImportError_(f"from_onnx: {self.name}: subgraph {graph.name!r} uses {node.op_type}, "
                                       "which kiln does not convert")
                self.convert(node, CONVERTERS[node.op_type])
            return [self.tensors[o.name] for o in graph.output]
        finally:
            self.tensors = saved

    def _output(self, name: str):
        if name not in self.bounded:
            return self.tensors[name]
        from ...op.dynamic import with_length
        axis, length, _ = self.bounded[name]
        return with_length(self.tensors[name], length, axis)

    def convert(self, node, fn) -> None:
        missing = [n for n in node.input if n and n not in self.tensors]
        if missing:
            raise ImportError_(f"from_onnx: {self.name}: node {node.name!r} reads undefined tensors {missing}")
        inputs = [self.tensors[n] if n else None for n in node.input]
        attrs = {a.name: _attr_value(a) for a in node.attribute}
        ctx = Ctx(self, node)
        try:
            out = fn(ctx, inputs, attrs)
        except FileFormatError:  # ImportError_ and size limits: already name the file
            raise
        except (KilnError, ValueError, TypeError) as e:
            raise ImportError_(f"from_onnx: {self.name}: {ctx.where}: {e}") from e
        if isinstance(out, TupleWrapper):
            out = [out[i] for i in range(len(out))]
        outs = out if isinstance(out, (list, tuple)) else [out]
        marks = [(o.axis, o.length, o.origin) if isinstance(o, Bounded) else None for o in outs]
        outs = [o.data if isinstance(o, Bounded) else o for o in outs]
        info = [self.bounded.get(n) if n else None for n in node.input]
        if any(info):
            marks = follow(ctx, inputs, info, attrs, outs)
        foldable = all(i is None or isinstance(i, Constant) for i in inputs) and not getattr(fn, "keep_unfolded", False)
        for name, expr, mark in zip(node.output, outs, marks + [None] * (len(outs) - len(marks))):
            if not name:
                continue
            if mark is not None and foldable:  # known at import: cut to the valid part now
                n = int(np.asarray(evaluate(mark[1])).reshape(-1)[0])
                self.tensors[name] = const(np.take(np.asarray(evaluate(expr)), np.arange(n), axis=mark[0]))
                continue
            if mark is not None:
                self.bounded[name] = mark
            if foldable and not isinstance(expr, (Constant, Var)):
                ty = ctx.type_of(expr)
                ctx.allocation(getattr(ty, "shape", ()), getattr(ty, "dtype", "int64"), f"folded output {name!r}")
                expr = const(np.asarray(evaluate(expr)))
            self.tensors[name] = expr


def from_onnx(model, shape=None, dtype="float32", opset=None, freeze_params=True):
    """Import an ONNX model (a ModelProto or a path) as ``(IRModule, params)``.

    >>> mod, params = relay.frontend.from_onnx(onnx.load("resnet18.onnx"), shape={"data": (1, 3, 224, 224)})
    """
    from kiln.ir.module import IRModule

    from . import CONVERTERS
    from . import validate
    model, name, size = validate.read(model)
    validate.check(model, name)
    importer = _Importer(model, shape, dtype, opset, freeze_params, name, size)
    func = importer.run(CONVERTERS)
    infer(func)
    return IRModule({"main": func}), dict(importer.params)
