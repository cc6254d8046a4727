"""Graph packing: a QNN ResNet-18 with its convs (all but the 3-channel stem) on the accelerator
and the rest on the CPU, bit-exact with kiln's int8 CPU build of the whole graph."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.vta import graph


def _cpu(mod, x):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(data=x)
    m.run()
    return m.get_output(0).numpy()


def _check(image, width):
    mod = graph.resnet18_qnn(image=image, width=width, classes=10)
    x = np.random.default_rng(1).integers(-128, 128, (1, 3, image, image)).astype(np.int8)
    want = _cpu(mod, x)
    packed = graph.graph_pack(mod)
    convs = [c.shape for c in packed.chains]
    assert len(convs) == 19 and all(s.c != 3 for s in convs)  # every conv but the stem
    got = packed.run(data=x)[0]
    assert len(np.unique(want)) > 5  # logits that differ: the comparison means something
    np.testing.assert_array_equal(got, want)
    return packed


def test_small_resnet18_packed_matches_cpu_build():
    _check(32, 16)


@pytest.mark.heavy
def test_resnet18_224_packed_matches_cpu_build():
    _check(224, 64)
