"""What oneDNN runs for kiln: support predicates, fusion patterns, ``partition_for_dnnl``.

>>> from kiln.relay.op.contrib.dnnl import partition_for_dnnl
>>> mod = partition_for_dnnl(mod, params)       # conv2d/dense/pool/elementwise -> "dnnl" functions
>>> lib = relay.build(mod, target="llvm")        # the rest on kiln's kernels

Everything here is float32 and NCHW/OIHW, the layouts kiln's JSON runtime hands oneDNN
(kiln/runtime/json_runtime.py). An op outside these limits simply stays on kiln.
"""

from __future__ import annotations

from kiln.ir.op_attr import register_op_attr

from ...dataflow_pattern import is_constant, is_op, wildcard
from ...expr import Call, Constant
from ...ty import TensorType

COMPILER = "dnnl"

# relay op -> (JSON kind, algorithm) understood by the dnnl JSON runtime.
ELTWISE = {"nn.relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "clip": "clip", "exp": "exp",
           "sqrt": "sqrt", "abs": "abs"}
BINARY = {"add": "add", "multiply": "mul", "subtract": "sub", "maximum": "max", "minimum": "min",
          "divide": "div"}
POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")


def _f32(*exprs) -> bool:
    return all(isinstance(e.checked_type, TensorType) and e.checked_type.dtype == "float32" for e in exprs)


def _shape(e) -> tuple:
    return tuple(int(d) for d in e.checked_type.shape)


def conv2d_ok(call: Call) -> bool:
    a = call.attrs
    data, weight = call.args
    return (_f32(call, data, weight) and a.data_layout == "NCHW" and a.kernel_layout == "OIHW"
            and a.get("out_layout", "") in ("", "NCHW") and a.get("out_dtype", "") in ("", "float32")
            and len(_shape(data)) == 4)


def dense_ok(call: Call) -> bool:
    data, weight = call.args
    return (_f32(call, data, weight) and len(_shape(data)) == 2 and len(_shape(weight)) == 2
            and call.attrs.get("out_dtype", "") in ("", "float32"))


def pool_ok(call: Call) -> bool:
    a = call.attrs
    if not (_f32(call) and a.get("layout", "NCHW") == "NCHW" and len(_shape(call.args[0])) == 4):
        return False
    if call.op.name.startswith("nn.global"):
        return True
    dilation = tuple(a.get("dilation", (1, 1)) or (1, 1))
    return not a.get("ceil_mode", False) and dilation in ((1, 1), (1,)) and len(tuple(a.pool_size)) == 2


def eltwise_ok(call: Call) -> bool:
    return _f32(call, *call.args) and 1 <= len(_shape(call)) <= 6


def binary_ok(call: Call) -> bool:
    """oneDNN's binary primitive broadcasts its second input only: the first (or, for add,
    multiply, maximum and minimum, either) must already have the output's shape."""
    if not _f32(call, *call.args):
        return False
    out, (a, b) = _shape(call), call.args
    if len(out) == 0 or len(out) > 6:
        return False
    commutative = call.op.name in ("add", "multiply", "maximum", "minimum")
    return _shape(a) == out or (commutative and _shape(b) == out)


for _name in ELTWISE:
    register_op_attr(_name, f"target.{COMPILER}", eltwise_ok)
for _name in BINARY:
    register_op_attr(_name, f"target.{COMPILER}", binary_ok)
for _name in POOLS:
    register_op_attr(_name, f"target.{COMPILER}", pool_ok)
def softmax_ok(call: Call) -> bool:
    return _f32(call, *call.args) and 1 <= len(_shape(call)) <= 6


def batch_matmul_ok(call: Call) -> bool:
    a, b = call.args
    return (_f32(call, a, b) and not call.attrs.get("transpose_a", False) and len(_shape(a)) == 3
            and len(_shape(b)) == 3 and _shape(a)[0] == _shape(b)[0])


register_op_attr("nn.softmax", f"target.{COMPILER}", softmax_ok)
register_op_attr("nn.batch_matmul", f"target.{COMPILER}", batch_matmul_ok)
register_op_attr("nn.conv2d", f"target.{COMPILER}", conv2d_ok)
register_op_attr("nn.dense", f"target.{COMPILER}", dense_ok)


# -- composites: a layer and the epilogue oneDNN fuses into it ---------------------------------
def _bias(x):
    return is_op("nn.bias_add")(x, is_constant()) | is_op("add")(x, is_constant())


def _layer(op: str, bias: bool, residual: bool, relu: bool):
    x = is_op(op)(wildcard(), is_constant())
    if bias:
        x = _bias(x)
    if residual:
        x = is_op("add")(x, wildcard()) | is_op("add")(wildcard(), x)
    if relu:
        x = is_op("nn.relu")(x)
    return x


def _layer_parts(root: Call):
    """(layer call, bias constant or None, addend expr or None, relu?) of a matched composite."""
    relu = getattr(root.op, "name", "") == "nn.relu"
    x = root.args[0] if relu else root
    addend = None
    if x.op.name == "add" and not isinstance(x.args[1], Constant):
        inner = [a for a in x.args if isinstance(a, Call) and getattr(a.op, "name", "") in
                 ("nn.conv2d", "nn.dense", "nn.bias_add", "add")]
        layer_side = 0 if x.args[0] in inner and _is_layer_chain(x.args[0]) else 1
        addend = x.args[1 - layer_side]
        x = x.args[layer_side]
    bias = None
    if x.op.name in ("nn.bias_add", "add"):
        bias = x
        x = x.args[0]
    return x, bias, addend, relu


def _is_layer_chain(e) -> bool:
    while isinstance(e, Call) and getattr(e.op, "name", "") in ("nn.bias_add", "add"):
        if not isinstance(e.args[1], Constant):
            return False
        e = e.args[0]
    return isinstance(e, Call) and getattr(e.op, "name", "") in ("nn.conv2d", "nn.dense")


def bias_vector(layer: Call, bias: Call):
    """The bias as an (O,) array when ``bias`` adds one value per output channel, else None."""
    import numpy as np

    c = bias.args[1].data
    out = _shape(layer)
    channels = out[1]
    if bias.op.name == "nn.bias_add":
        return c.reshape(-1).astype("float32") if bias.attrs.axis in (1, -len(out) + 1) and c.size == channels \
            else None
    shape = (1,) * (len(out) - c.ndim) + tuple(c.shape)
    if c.size == channels and len(shape) == len(out) and shape[1] == channels:
        return np.ascontiguousarray(c.reshape(-1).astype("float32"))
    return None


def _layer_check(root: Call, want_bias: bool, want_sum: bool) -> bool:
    layer, bias, addend, _ = _layer_parts(root)
    # add(conv, constant) matches the residual pattern too; it is a bias, which another entry takes
    if (bias is not None) != want_bias or (addend is not None) != want_sum:
        return False
    ok = conv2d_ok(layer) if layer.op.name == "nn.conv2d" else dense_ok(layer)
    if not ok:
        return False
    if bias is not None and (bias_vector(layer, bias) is None or _shape(bias) != _shape(layer)):
        return False
    return addend is None or (_shape(addend) == _shape(layer) and _f32(addend))


def pattern_table():
    """(name, pattern, check) for MergeComposite, longest first."""
    table = []
    for op, short in (("nn.conv2d", "conv2d"), ("nn.dense", "dense")):
        for bias, residual, relu in ((1, 1, 1), (1, 1, 0), (0, 1, 1), (0, 1, 0), (1, 0, 1), (1, 0, 0), (0, 0, 1)):
            name = f"{COMPILER}.{short}" + ("_bias" if bias else "") + ("_sum" if residual else "") + \
                ("_relu" if relu else "")
            check = lambda root, b=bool(bias), r=bool(residual): _layer_check(root, b, r)  # noqa: E731
            table.append((name, _layer(op, bias, residual, relu), check))
    return table


def partition_for_dnnl(mod, params=None):
    """Bind ``params``, fold batch norms into the convolutions, then offload what oneDNN runs:
    MergeComposite, AnnotateTarget(["dnnl"]), MergeCompilerRegions, PartitionGraph."""
    return partition_composites(mod, params, COMPILER, pattern_table())


def partition_composites(mod, params, compiler: str, patterns):
    """``mod`` with ``params`` bound and batch norms folded into the convolutions, ``patterns``
    merged into composites, then offloaded to ``compiler``: AnnotateTarget, MergeCompilerRegions,
    PartitionGraph (the pipeline of dnnl and cudnn)."""
    from kiln.relay import transform
    from kiln.transform import PassContext, Sequential

    from ...build_module import _as_module

    mod = _as_module(mod)
    if params:
        mod = transform.BindParams(params)(mod)
    seq = Sequential([transform.InferType(), transform.SimplifyInference(), transform.FoldConstant(),
                      transform.FoldScaleAxis(), transform.FoldConstant(),
                      transform.MergeComposite(patterns), transform.AnnotateTarget([compiler]),
                      transform.MergeCompilerRegions(), transform.PartitionGraph()])
    with PassContext(opt_level=3):
        return seq(mod)
