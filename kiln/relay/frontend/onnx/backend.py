"""kiln as an ONNX backend (``onnx.backend.base.Backend``): import with ``from_onnx``, compile
with ``relay.build`` for llvm, run with the graph executor.

>>> from kiln.relay.frontend.onnx.backend import KilnBackend
>>> rep = KilnBackend.prepare(onnx.load("model.onnx"), "CPU")
>>> (y,) = rep.run([x])

kiln compiles static graphs, but ONNX often passes shapes, axes, pads and scales as ordinary
graph inputs (the ONNX node tests do so throughout). Those inputs, listed per op in
``SHAPE_ARGUMENTS``, are baked into the model as initializers before import. Their values are
only known at ``run``, so a model that has any is compiled there, once per distinct set of
values (a run with new values compiles again; the old build stays cached).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from kiln.errors import KilnError

# op type -> positions of the inputs that kiln's converters need as import-time constants.
SHAPE_ARGUMENTS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,),
    "Slice": (1, 2, 3, 4), "Pad": (1, 2, 3), "Resize": (1, 2, 3), "ConstantOfShape": (0,),
    "Range": (0, 1, 2), "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
    "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceSumSquare": (1,),
    "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "CumSum": (1,), "Trilu": (1,),
    "CumProd": (1,), "CenterCropPad": (1,), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
    "OneHot": (1,), "TopK": (1,), "Compress": (1,), "AffineGrid": (1,), "DFT": (1, 2), "Upsample": (1,),
    "Col2Im": (1, 2), "MaxUnpool": (2,), "STFT": (1, 3), "NonMaxSuppression": (2,),
    "MelWeightMatrix": (0, 1, 2, 3, 4),
    # quantized ops: scales and zero points (kiln quantizes with static ones)
    "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2), "QLinearConv": (1, 2, 4, 5, 6, 7),
    "QLinearMatMul": (1, 2, 4, 5, 6, 7), "ConvInteger": (2, 3), "MatMulInteger": (2, 3),
}


class BackendError(KilnError):
    """The ONNX backend was used in a way kiln does not support (device, inputs)."""


def shape_argument_inputs(model) -> list[str]:
    """Names of the graph inputs (not initializers) whose values some node reads as a shape
    argument, directly or through the nodes that compute it (a window length cast before a
    Range). Shape and Size read only their input's shape, so the search stops there."""
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = [i.name for i in model.graph.input if i.name not in inits]
    producer = {out: node for node in model.graph.node for out in node.output}
    wanted, todo = set(), []
    for node in model.graph.node:
        for pos in SHAPE_ARGUMENTS.get(node.op_type, ()):
            if pos < len(node.input) and node.input[pos]:
                todo.append(node.input[pos])
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is None:
            wanted.add(name)
        elif node.op_type not in ("Shape", "Size"):
            todo.extend(i for i in node.input if i)
    return [n for n in graph_inputs if n in wanted]


def bake_inputs(model, values: dict):
    """A copy of ``model`` in which the graph inputs named in ``values`` are initializers."""
    baked = onnx.ModelProto()
    baked.CopyFrom(model)
    kept = [vi for vi in baked.graph.input if vi.name not in values]
    del baked.graph.input[:]
    baked.graph.input.extend(kept)
    for name, value in values.items():
        baked.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return baked


def compile_model(model, shape=None, target: str = "llvm", opt_level: int = 3):
    """from_onnx + relay.build; returns the factory module (``lib["default"](dev)``)."""
    import kiln
    from kiln import relay

    mod, params = relay.frontend.from_onnx(model, shape=shape)
    with kiln.transform.PassContext(opt_level=opt_level):
        return relay.build(mod, target=target, params=params)


def _has_dynamic_dims(vi) -> bool:
    tt = vi.type.tensor_type
    return not tt.HasField("shape") or any(not d.HasField("dim_value") or d.dim_value <= 0 for d in tt.shape.dim)


class KilnBackendRep(BackendRep):
    """A prepared model: ``run(inputs)`` with a list (graph input order) or a dict by name.

    Compiles in the constructor when it can; otherwise (shape arguments given as inputs, inputs
    with symbolic dims) at the first ``run``, keyed by the shape-argument values and the input
    shapes, so a rep run on many inputs of one shape compiles once.
    """

    def __init__(self, model, device: str, target: str = "llvm", opt_level: int = 3, build=compile_model):
        self.model = model
        self.device = device
        self.target, self.opt_level, self._build = target, opt_level, build
        inits = {t.name for t in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in inits]
        self.input_names = [i.name for i in inputs]
        self.output_names = [o.name for o in model.graph.output]
        self.static_names = shape_argument_inputs(model)
        # Inputs without a static shape in the model get the shape of the value passed to run().
        self.dynamic_names = [i.name for i in inputs if _has_dynamic_dims(i) and i.name not in self.static_names]
        self._executors: dict = {}
        if not self.static_names and not self.dynamic_names:
            self._executor({})

    def _executor(self, named: dict):
        static = {n: named[n] for n in self.static_names}
        shapes = {n: named[n].shape for n in self.dynamic_names}
        key = (tuple((v.dtype.str, v.shape, v.tobytes()) for v in static.values()), tuple(shapes.values()))
        if key not in self._executors:
            import kiln
            from kiln.contrib import graph_executor

            model = bake_inputs(self.model, static) if static else self.model
            lib = self._build(model, shape=shapes or None, target=self.target, opt_level=self.opt_level)
            self._executors[key] = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
        return self._executors[key]

    def _named(self, inputs) -> dict:
        if isinstance(inputs, dict):
            named = dict(inputs)
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(inputs) != len(self.input_names):
                raise BackendError(f"KilnBackendRep.run: the model takes {len(self.input_names)} inputs "
                                   f"{self.input_names}, got {len(inputs)}")
            named = dict(zip(self.input_names, inputs))
        missing = [n for n in self.input_names if n not in named]
        if missing:
            raise BackendError(f"KilnBackendRep.run: no value for the model inputs {missing}")
        return {k: np.asarray(v) for k, v in named.items()}

    def run(self, inputs, **kwargs):
        named = self._named(inputs)
        gm = self._executor(named)
        for name in self.input_names:
            if name not in self.static_names:
                value = named[name]
                # the runtime keeps bfloat16 tensors as their uint16 bits (it has no bfloat16 numpy type)
                gm.set_input(name, value.view(np.uint16) if value.dtype.name == "bfloat16" else value)
        gm.run()
        outs = [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]
        bf16 = [o.type.tensor_type.elem_type == 16 for o in self.model.graph.output]
        outs = [o.view("bfloat16") if b and o.dtype == np.uint16 else o for o, b in zip(outs, bf16)]
        if len(outs) != len(self.output_names):
            raise BackendError(f"KilnBackendRep.run: the model declares {len(self.output_names)} outputs "
                               f"{self.output_names}, the compiled graph gave {len(outs)}")
        return namedtupledict("Outputs", self.output_names)(*outs)


class KilnBackend(Backend):
    """``prepare(model, device="CPU")`` -> a rep whose ``run(inputs)`` runs the compiled model."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().split(":")[0] == "CPU"

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> KilnBackendRep:
        if not cls.supports_device(device):
            raise BackendError(f"KilnBackend: device {device!r} is not supported; kiln compiles "
                               "ONNX models for the CPU (device='CPU')")
        return KilnBackendRep(model, device, **kwargs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        """Run one node: wrap it in a one-node model typed from ``inputs`` and ``outputs_info``."""
        inputs = [np.asarray(x) for x in inputs]
        in_vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                 for n, x in zip(node.input, inputs)]
        infos = outputs_info or [(None, None)] * len(node.output)
        out_vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)) if dt else 0, shape)
                  for n, (dt, shape) in zip(node.output, infos)]
        graph = helper.make_graph([node], "run_node", in_vi, out_vi)
        opset = kwargs.pop("opset_version", None)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] if opset else None)
        return cls.prepare(model, device, **kwargs).run(inputs)


prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
run_node = KilnBackend.run_node
supports_device = KilnBackend.supports_device


# -- the ONNX node tests (onnx/backend/test/data/node) -------------------------------------------

# The op types named in issue 5, item 3 ("Reduce*" stands for every ReduceXxx op). The coverage
# goal is measured over the float node tests of these ops.
COVERAGE_OPS = frozenset("""
    Conv ConvTranspose Gemm MatMul BatchNormalization Relu LeakyRelu Clip Sigmoid Tanh Erf Gelu
    MaxPool AveragePool GlobalAveragePool Softmax LogSoftmax LayerNormalization Add Sub Mul Div Pow Sqrt
    Reshape Flatten Transpose Concat Split Slice Gather Squeeze Unsqueeze Expand Pad Resize
    ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum
    ReduceSumSquare Cast Shape ConstantOfShape Where
    GatherND ScatterND ScatterElements Scatter CumSum Trilu InstanceNormalization GroupNormalization Einsum
    LSTM GRU RNN""".split())


@dataclass(frozen=True)
class NodeTest:
    """One case of onnx's node tests: ``model.onnx`` plus ``test_data_set_*/{input,output}_N.pb``."""
    name: str
    path: str
    op_type: str     # the op under test; for a ``*_expanded`` case, the op its function body expands
    rtol: float
    atol: float

    def model(self):
        return onnx.load(os.path.join(self.path, "model.onnx"))

    def data_sets(self):
        """[(inputs, expected outputs)] as lists of numpy arrays."""
        def load(folder, kind):
            files = sorted(glob.glob(os.path.join(folder, f"{kind}_*.pb")),
                           key=lambda f: int(f.rsplit("_", 1)[1].split(".")[0]))
            return [numpy_helper.to_array(onnx.load_tensor(f)) for f in files]
        return [(load(d, "input"), load(d, "output"))
                for d in sorted(glob.glob(os.path.join(self.path, "test_data_set_*")))]


def node_test_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


def _is_float(model) -> bool:
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in _FLOAT_TYPES:
            return True
    return False


_FLOAT_TYPES = (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)


def node_tests(ops=COVERAGE_OPS, float_only: bool = True) -> list[NodeTest]:
    """The node tests of ``ops``, sorted by name.

    A case tests op X when its graph is one X node, or when it is ``<case>_expanded`` (X written
    out as its function body) of such a case. It is a float test when some graph input or output
    is float16/float32/float64 (so ``test_add_int8`` is out, ``test_cast_FLOAT_to_INT8`` and
    ``test_where_example`` are in). Tolerances come from the onnx loader (data.json or its defaults).
    """
    from onnx.backend.test.loader import load_model_tests

    tolerances = {c.name: (c.rtol, c.atol) for c in load_model_tests(os.path.dirname(node_test_dir()), "node")}
    root = node_test_dir()
    graphs = {}
    for name in sorted(os.listdir(root)):
        if os.path.exists(os.path.join(root, name, "model.onnx")):
            graphs[name] = onnx.load(os.path.join(root, name, "model.onnx"), load_external_data=False)
    tests = []
    for name, model in graphs.items():
        base = re.sub(r"_expanded(_ver\d+)?$", "", name)
        nodes = graphs.get(base, model).graph.node
        if len(nodes) != 1 or nodes[0].op_type not in ops or (float_only and not _is_float(model)):
            continue
        rtol, atol = tolerances.get(name, (1e-3, 1e-7))
        tests.append(NodeTest(name, os.path.join(root, name), nodes[0].op_type, rtol, atol))
    return tests


def run_node_test(test: NodeTest) -> None:
    """Run ``test`` through KilnBackend; raises AssertionError on a wrong output, the compiler's
    error when the model does not compile."""
    from onnx.backend.test.runner import Runner

    rep = KilnBackend.prepare(test.model())
    for inputs, expected in test.data_sets():
        Runner.assert_similar_outputs(expected, list(rep.run(inputs)), test.rtol, test.atol, test.path)


# -- the whole node-test suite (issue 32: bench/onnx_coverage.py --all) --------------------------

# The fixed exclusion list: element types kiln does not compute in, string and
# sequence/optional values, control flow, training-only ops and ImageDecoder.
EXCLUDED_ELEM_TYPES = frozenset(getattr(onnx.TensorProto, n) for n in (
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0", "FLOAT4E2M1",
    "INT4", "UINT4", "INT2", "UINT2") if hasattr(onnx.TensorProto, n))
EXCLUDED_OPS = {
    **dict.fromkeys(("Loop", "If", "Scan"), "control flow (Loop/If/Scan)"),
    **dict.fromkeys(("SequenceConstruct", "SequenceAt", "SequenceEmpty", "SequenceErase", "SequenceInsert",
                     "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional",
                     "OptionalHasElement", "OptionalGetElement"), "sequence/optional types"),
    **dict.fromkeys(("StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch"), "string op"),
    **dict.fromkeys(("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Gradient", "Adagrad", "Adam",
                     "Momentum"), "training-only op"),
    "ImageDecoder": "ImageDecoder",
}


def _graph_nodes(graph):
    """Every node of ``graph`` and of the subgraphs in its attributes."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _graph_nodes(g)


def _elem_types(model):
    """Element types of the values a model declares, of its tensor attributes and of Cast targets."""
    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        t = vi.type
        if t.HasField("tensor_type"):
            yield t.tensor_type.elem_type
        elif t.HasField("sequence_type") or t.HasField("optional_type"):
            yield "sequence"
    for t in g.initializer:
        yield t.data_type
    for node in _graph_nodes(g):
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t.data_type
            if node.op_type in ("Cast", "EyeLike", "RandomNormal", "RandomUniform", "RandomNormalLike",
                                "RandomUniformLike", "Multinomial", "Bernoulli", "QuantizeLinear",
                                "DequantizeLinear") and a.name in ("to", "dtype", "output_dtype") and a.i:
                yield a.i


def exclusion(model) -> str | None:
    """Why the issue's exclusion list leaves this case out, or None when it counts."""
    for node in _graph_nodes(model.graph):
        if node.op_type in EXCLUDED_OPS:
            return EXCLUDED_OPS[node.op_type]
        if node.domain == "ai.onnx.preview.training":
            return "training-only op"
    for t in _elem_types(model):
        if t == "sequence":
            return "sequence/optional types"
        if t == onnx.TensorProto.STRING:
            return "string op"
        if t in EXCLUDED_ELEM_TYPES:
            return f"{onnx.TensorProto.DataType.Name(t)} element type"
    return None


def all_node_tests() -> list[tuple[NodeTest, str | None]]:
    """Every case of onnx's node tests with its exclusion reason (None: the case counts), sorted by
    name. ``op_type`` is the op of the case's one node (of the base case for ``*_expanded``),
    else the graph's op types joined by '+'."""
    from onnx.backend.test.loader import load_model_tests

    tolerances = {c.name: (c.rtol, c.atol) for c in load_model_tests(os.path.dirname(node_test_dir()), "node")}
    root = node_test_dir()
    graphs = {name: onnx.load(os.path.join(root, name, "model.onnx"), load_external_data=False)
              for name in sorted(os.listdir(root)) if os.path.exists(os.path.join(root, name, "model.onnx"))}
    cases = []
    for name, model in graphs.items():
        base = graphs.get(re.sub(r"_expanded(_ver\d+)?$", "", name), model)
        ops = list(dict.fromkeys(n.op_type for n in base.graph.node))
        rtol, atol = tolerances.get(name, (1e-3, 1e-7))
        test = NodeTest(name, os.path.join(root, name), "+".join(ops) or "(empty)", rtol, atol)
        cases.append((test, exclusion(base) or exclusion(model)))
    return cases
