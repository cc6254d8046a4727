"""Read an ONNX file and check what the importer trusts in it, before anything is converted.

The importer indexes tensors by name, turns TensorProtos into numpy arrays and folds constant
subgraphs; each of those steps met a hostile file with a raw KeyError, a numpy reshape error or
a multi-GB allocation. Here: the file is read with one clear error (missing, a folder, empty,
not a protobuf), every initializer and tensor attribute holds exactly the data its dims and type
declare (kiln/limits.py rule 1), every graph input has a known element type, and every name a
node or graph output reads is defined before it is read. Sizes the model makes the importer
*compute* are checked as they come (``Ctx.allocation``, limits rule 2).
"""

from __future__ import annotations

import os

import numpy as np

from kiln import limits

# Element types a TensorProto may declare, and their numpy dtypes (ONNX TensorProto.DataType).
_ELEM = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
         10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}
# Which repeated field holds a type's values when raw_data is empty.
_FIELD = {1: "float_data", 2: "int32_data", 3: "int32_data", 4: "int32_data", 5: "int32_data", 6: "int32_data",
          7: "int64_data", 9: "int32_data", 10: "int32_data", 11: "double_data", 12: "uint64_data",
          13: "uint64_data", 16: "int32_data"}


# AttributeProto types (FLOAT .. TYPE_PROTOS); UNDEFINED (0) and others are refused.
_ATTR_TYPES = frozenset(range(1, 15))


def read(model) -> tuple:
    """``(ModelProto, name, size in bytes)`` from a path or a ModelProto."""
    import onnx
    from google.protobuf.message import DecodeError

    if not isinstance(model, (str, os.PathLike)):
        if not isinstance(model, onnx.ModelProto):
            raise limits.fail("from_onnx", "model", f"is a {type(model).__name__}",
                              "pass an onnx.ModelProto or the path of a .onnx file")
        if model.ByteSize() == 0:  # what onnx.load gives for a 0-byte file
            raise limits.fail("from_onnx", "model", "is empty (0 bytes: no graph, no opset), not an ONNX model",
                              "export the model again (torch.onnx.export, onnx.save)")
        return model, f"ONNX model {model.graph.name or '(unnamed)'!r}", model.ByteSize()
    path = os.fspath(model)
    size = limits.file_size(path)
    if size == 0:
        raise limits.fail(path, "file", "is empty (0 bytes), not an ONNX model",
                          "export the model again (torch.onnx.export, onnx.save)")
    try:
        # External data is not followed: a model file may not make kiln read other files.
        proto = onnx.load(path, load_external_data=False)
    except (DecodeError, RecursionError) as err:
        raise limits.fail(path, "file", f"is not an ONNX model (the protobuf does not parse: {err})",
                          "check that the file is a complete .onnx export") from None
    return proto, path, size


def _schema(node, opset: int):
    import onnx.defs
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        pass
    try:  # an op newer than the model's opset (the importer converts it anyway): its newest arity
        return onnx.defs.get_schema(node.op_type, onnx.defs.onnx_opset_version(), node.domain or "")
    except onnx.defs.SchemaError:
        return None  # unknown op: the importer lists it among the unsupported ones


def _check_arity(node, schema, name: str, where: str) -> None:
    """Inputs, outputs and required attributes as the op's ONNX schema declares them."""
    n_in = len(node.input)
    if n_in < schema.min_input or n_in > schema.max_input:
        raise limits.fail(name, where, f"has {n_in} inputs; {node.op_type} takes {schema.min_input} to "
                          f"{schema.max_input}", "the file is damaged or uses another opset")
    empty = [i for i in range(min(schema.min_input, n_in)) if not node.input[i]]
    if empty:
        raise limits.fail(name, where, f"leaves required input {empty[0]} empty", "the file is damaged")
    if not schema.min_output <= len(node.output) <= schema.max_output:
        raise limits.fail(name, where, f"has {len(node.output)} outputs; {node.op_type} gives {schema.min_output} "
                          f"to {schema.max_output}", "the file is damaged or uses another opset")
    given = {a.name for a in node.attribute}
    required = [k for k, a in schema.attributes.items() if a.required and k not in given]
    if required:
        raise limits.fail(name, where, f"lacks the required attribute(s) {required}", "the file is damaged")


def check(proto, name: str) -> None:
    """Refuse what the importer would otherwise meet as a raw exception."""
    graph = proto.graph
    opsets = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    opset = opsets[0] if opsets else 13
    if not 1 <= opset <= 1000:
        raise limits.fail(name, "opset_import", f"declares opset {opset}", "ONNX opsets are small positive numbers; "
                          "the file is damaged")
    seen = set()
    for i, t in enumerate(graph.initializer):
        array(t, name, f"graph.initializer[{i}] {t.name!r}")
        seen.add(t.name)
    for vi in graph.input:
        if vi.name in seen:
            continue
        elem = vi.type.tensor_type.elem_type
        if vi.type.WhichOneof("value") not in (None, "tensor_type") or (elem and elem not in _ELEM):
            raise limits.fail(name, f"graph input {vi.name!r}", f"has element type {elem}, which kiln cannot run",
                              f"inputs must be tensors of {sorted(set(_ELEM.values()))}")
        seen.add(vi.name)
    for i, node in enumerate(graph.node):
        texts = [node.op_type, node.domain, node.name, *node.input, *node.output]
        if not all(isinstance(t, str) for t in texts):  # protobuf hands over invalid UTF-8 as bytes
            raise limits.fail(name, f"node {i}", "has an op type, name or tensor name that is not UTF-8 text",
                              "the file is damaged; export it again")
        where = f"node {i} ({node.op_type} {node.name or '(unnamed)'!r})"
        schema = _schema(node, opset) if node.domain in ("", "ai.onnx") else None
        if schema is not None:
            _check_arity(node, schema, name, where)
        missing = [n for n in node.input if n and n not in seen]
        if missing:
            raise limits.fail(name, where, f"reads undefined tensors {missing}",
                              "each input must be a graph input, an initializer or an earlier node's output "
                              "(nodes in topological order)")
        for a in node.attribute:
            if a.type not in _ATTR_TYPES:
                raise limits.fail(name, f"{where} attribute {a.name!r}", f"has attribute type {a.type}, which ONNX "
                                  "does not define", "the file is damaged; export it again")
            if a.type == a.TENSOR:
                array(a.t, name, f"{where} attribute {a.name!r}")
        seen.update(n for n in node.output if n)
    missing = [o.name for o in graph.output if o.name not in seen]
    if not graph.output or missing:
        raise limits.fail(name, "graph.output", f"names undefined tensors {missing}" if missing else "is empty",
                          "the outputs must be tensors the graph computes")


def array(t, name: str, field: str) -> np.ndarray:
    """A TensorProto as numpy, once its data is checked to be exactly what dims and type declare."""
    from onnx import numpy_helper

    if t.data_location == t.EXTERNAL:
        raise limits.fail(name, field, "keeps its data in an external file",
                          "save the model with its data inside (onnx.save(model, path, save_as_external_data=False))")
    if t.data_type not in _ELEM:
        raise limits.fail(name, field, f"has element type {t.data_type}, which kiln does not import",
                          f"use one of {sorted(set(_ELEM.values()))}")
    dtype = np.dtype(_ELEM[t.data_type])
    count = limits.nbytes(t.dims, 1, file=name, field=f"{field} dims")
    if t.raw_data:
        want = count * dtype.itemsize
        if len(t.raw_data) != want:
            raise limits.fail(name, field, f"holds {len(t.raw_data)} bytes of data but dims {list(t.dims)} of "
                              f"{dtype} need {want}", "the file is damaged; export it again")
    else:
        held = len(getattr(t, _FIELD[t.data_type]))
        if held != count:
            raise limits.fail(name, field, f"holds {held} values but dims {list(t.dims)} need {count}",
                              "the file is damaged; export it again")
    return numpy_helper.to_array(t)
