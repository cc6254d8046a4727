"""The ONNX test models compiled once per test process (compiling ResNet-18 takes ~15 s), shared by
tests/relay/test_build_models.py and tests/integration/test_graph_rpc.py.

``built(name)`` -> ``Built(model, inputs, lib, expected)``: ``lib`` from relay.build at opt_level 3
for the host, ``expected`` onnxruntime's outputs.
"""

from __future__ import annotations

import functools
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
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    return Built(model, inputs, lib, run_ort(model, inputs))
