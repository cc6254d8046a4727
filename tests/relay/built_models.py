"""The ONNX test models compiled once per test process (compiling ResNet-18 takes ~15 s), shared by
tests/relay/test_build_models.py and tests/integration/test_graph_rpc.py.

``built(name)`` -> ``Built(model, inputs, lib, expected)``: ``lib`` from relay.build at opt_level 3
for the host, ``expected`` onnxruntime's outputs. ``build_onnx(model, target)`` is that build for
any ONNX model; ``kernel_names(lib)`` lists a library's kernels in graph order.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from onnx_models import bert_block, mobilenet_v2, resnet18, run_ort

import kiln as tvm
from kiln import relay

MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert_block": bert_block}


@dataclass
class Built:
    model: object
    inputs: dict
    lib: object
    expected: list


@functools.cache
def built(name: str) -> Built:
    model, inputs = MODELS[name]()
    return Built(model, inputs, build_onnx(model), run_ort(model, inputs))


def build_onnx(model, target: str = "llvm"):
    """relay.build of an ONNX model at opt_level 3 for ``target``, its weights as params."""
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target=target, params=params)


def kernel_names(lib) -> list:
    """The names of a built library's kernel nodes (fused functions), in graph order."""
    return [n["name"] for n in json.loads(lib.get_graph_json())["nodes"] if n["op"] == "tvm_op"]
