"""Walk the inlined TorchScript graph of a traced module and build the relay function.

Values in the graph are either tensors (relay expressions) or Python values known at import
time (ints, floats, lists, submodules, ``None``). Parameters and buffers reached through
``prim::GetAttr`` become Constants, so ``params`` is empty (as ``from_onnx`` with
``freeze_params=True``). Sizes read with ``aten::size`` are the traced static shapes, so shape
arithmetic (``x.view(x.size(0), -1)``) folds to Python ints at import.
"""

from __future__ import annotations

import os

import numpy as np

from kiln.errors import KilnError

from ...expr import Function, RelayExpr, Tuple, const, var
from ...transform.infer_type import infer


class ImportError_(KilnError):
    """The TorchScript module cannot be imported as written."""


class Ctx:
    """What a converter sees: the node and helpers to read shapes and Python values."""

    def __init__(self, node):
        self.node = node

    @property
    def where(self) -> str:
        outs = ", ".join(f"%{o.debugName()}" for o in self.node.outputs())
        return f"{self.node.kind()} (output {outs or '-'})"

    def fail(self, msg: str):
        raise ImportError_(f"from_pytorch: {self.where}: {msg}")

    def shape_of(self, expr) -> tuple:
        return tuple(infer(expr).checked_type.shape)

    def dtype_of(self, expr) -> str:
        return infer(expr).checked_type.dtype

    def tensor(self, value, like=None) -> RelayExpr:
        """``value`` as a relay expression; Python scalars take ``like``'s dtype."""
        if isinstance(value, RelayExpr):
            return value
        dtype = self.dtype_of(like) if like is not None else None
        return const(np.asarray(value), dtype) if dtype else const(value)


def _torch_dtype_name(dtype) -> str:
    import torch
    names = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.int64: "int64",
             torch.int32: "int32", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool"}
    return names.get(dtype, str(dtype))


def _python_value(value):
    """A value from a GetAttr or a constant, as the importer keeps it."""
    import torch
    if isinstance(value, torch.Tensor):
        return const(value.detach().cpu().contiguous().numpy())
    return value


def _constant(node):
    import torch
    if not node.attributeNames():
        return None
    value = node.output().toIValue()
    if isinstance(value, torch.Tensor):
        return const(value.detach().cpu().numpy()) if value.dim() else value.item()
    if isinstance(value, torch.device):
        return str(value)
    return value


class _Importer:
    def __init__(self, module, input_infos: list, converters: dict, default_dtype: str = "float32"):
        self.module = module
        self.converters = converters
        self.values: dict = {}
        self.inputs: list = []
        self.graph = module.inlined_graph
        graph_inputs = list(self.graph.inputs())
        if len(graph_inputs) - 1 != len(input_infos):
            raise ImportError_(f"from_pytorch: the module takes {len(graph_inputs) - 1} input(s) but input_infos "
                               f"names {len(input_infos)}; pass one (name, shape) pair per forward() argument")
        self.values[graph_inputs[0].unique()] = module
        for value, (name, info) in zip(graph_inputs[1:], input_infos):
            shape, dtype = _shape_dtype(name, info, default_dtype)
            v = var(name, shape=shape, dtype=dtype)
            self.values[value.unique()] = v
            self.inputs.append(v)

    def check_supported(self):
        from .quantized import QCONVERTERS
        missing: dict = {}
        for node in self.graph.nodes():
            kind = node.kind()
            if kind.startswith("prim::") or _key(kind) in self.converters or _key(kind) in QCONVERTERS:
                continue
            missing.setdefault(kind, 0)
            missing[kind] += 1
        if missing:
            listed = ", ".join(f"{k} (x{n})" for k, n in sorted(missing.items()))
            raise ImportError_(f"from_pytorch: the module uses {len(missing)} unsupported op(s): {listed}. "
                               "Supported ops are listed in docs/frontends.md "
                               "(kiln.relay.frontend.pytorch.CONVERTERS).")

    def run(self) -> Function:
        self.check_supported()
        for node in self.graph.nodes():
            self.convert(node)
        outs = [self._as_expr(self.values[o.unique()]) for o in self.graph.outputs()]
        return Function(self.inputs, outs[0] if len(outs) == 1 else Tuple(outs))

    def _as_expr(self, value):
        from .quantized import QTensor
        if isinstance(value, QTensor):  # a quantized result: its integers
            return value.expr
        if isinstance(value, RelayExpr):
            return value
        if isinstance(value, (list, tuple)):
            return Tuple([self._as_expr(v) for v in value])
        raise ImportError_(f"from_pytorch: the module returns a Python value {value!r}, not a tensor")

    def convert(self, node) -> None:
        kind = node.kind()
        ins = [self.values[i.unique()] for i in node.inputs()]
        outs = list(node.outputs())
        if kind == "prim::Constant":
            result = [_constant(node)]
        elif kind == "prim::GetAttr":
            result = [_python_value(getattr(ins[0], node.s("name")))]
        elif kind in ("prim::ListConstruct", "prim::TupleConstruct"):
            result = [list(ins)]
        elif kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            result = list(ins[0])
        elif kind == "prim::NumToTensor":
            result = [ins[0]]
        else:
            result = self.call(node, kind, ins, len(outs))
        for out, value in zip(outs, result):
            self.values[out.unique()] = value

    def call(self, node, kind, ins, n_out):
        from . import quantized as Q
        ctx = Ctx(node)
        if Q.is_quantized_call(_key(kind), ins):
            try:
                out = Q.convert(ctx, _key(kind), ins, self.converters)
            except ImportError_:
                raise
            except (KilnError, ValueError, TypeError, IndexError) as e:
                raise ImportError_(f"from_pytorch: {ctx.where}: {e}") from e
            return list(out) if n_out > 1 else [out]
        fn = self.converters.get(_key(kind))
        if fn is None:
            ctx.fail("has no converter; supported ops are listed in docs/frontends.md")
        try:
            out = fn(ctx, ins)
        except ImportError_:
            raise
        except (KilnError, ValueError, TypeError, IndexError) as e:
            raise ImportError_(f"from_pytorch: {ctx.where}: {e}") from e
        return list(out) if n_out > 1 else [out]


def _key(kind: str) -> str:
    """aten::relu_ -> aten::relu (in-place variants convert like the functional op)."""
    return kind[:-1] if kind.endswith("_") and not kind.endswith("__") else kind


def _shape_dtype(name, info, default_dtype):
    if isinstance(info, tuple) and len(info) == 2 and isinstance(info[1], str) and \
            isinstance(info[0], (list, tuple)):
        shape, dtype = info
    else:
        shape, dtype = info, default_dtype
    try:
        return tuple(int(d) for d in shape), dtype
    except (TypeError, ValueError):
        raise ImportError_(f"from_pytorch: input {name!r}: shape {info!r} is not a list of ints; pass "
                           "(name, [1, 3, 224, 224]) or (name, ([1, 3, 224, 224], 'float32'))") from None


def _load(model):
    try:
        import torch
    except ImportError:
        raise ImportError_("from_pytorch needs torch: pip install torch (kiln tests use torch>=2.0)") from None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        try:
            return torch.jit.load(path, map_location="cpu")
        except Exception as err:  # torch raises RuntimeError and others for a bad archive
            raise ImportError_(f"from_pytorch: {path!r} is not a TorchScript archive ({type(err).__name__}); save "
                               "the model with torch.jit.trace(model, x).save(path)") from None
    if not isinstance(model, torch.jit.ScriptModule):
        raise ImportError_(f"from_pytorch takes a TorchScript module, got {type(model).__name__}; pass "
                           "torch.jit.trace(model.eval(), example_input)")
    return model


def from_pytorch(script_module, input_infos, custom_convert_map=None, default_dtype="float32"):
    """Import a traced TorchScript module (or the path of a saved one) as ``(IRModule, params)``.

    ``input_infos``: ``[(name, shape)]`` or ``[(name, (shape, dtype))]`` in forward()'s order
    (a ``{name: shape}`` dict is accepted too, as tvmc passes it).

    >>> mod, params = relay.frontend.from_pytorch(torch.jit.trace(model.eval(), x), [("input", (1, 3, 224, 224))])
    """
    from kiln.ir.module import IRModule

    from . import CONVERTERS
    module = _load(script_module)
    if isinstance(input_infos, dict):
        input_infos = list(input_infos.items())
    if not input_infos:
        raise ImportError_("from_pytorch: TorchScript files carry no input shapes; pass input_infos=[(name, shape)] "
                           "(tvmc: --input-shapes \"input:[1,3,224,224]\")")
    converters = {**CONVERTERS, **(custom_convert_map or {})}
    func = _Importer(module, list(input_infos), converters, default_dtype).run()
    infer(func)
    return IRModule({"main": func}), {}
