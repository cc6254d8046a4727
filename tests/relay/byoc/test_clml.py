"""CLML (002): partition_for_clml outlines what OpenCLML would run; building says the SDK is needed."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.errors import CompileError
from kiln.relay.op.contrib.clml import partition_for_clml


def test_partition_then_build_fails_naming_the_sdk():
    x = relay.var("x", shape=(1, 3, 8, 8))
    w = relay.const(np.ones((4, 3, 3, 3), "float32"))
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1)))
    out = relay.argmax(relay.nn.batch_flatten(y), axis=1)  # argmax: not a CLML op
    part = partition_for_clml(tvm.IRModule.from_expr(relay.Function([x], out)))
    names = [n for n in part if n.startswith("tvmgen_default_clml_main_")]
    assert names == ["tvmgen_default_clml_main_0"]  # conv, relu and flatten in one region
    assert part[names[0]].attrs["Compiler"] == "clml"
    with pytest.raises(CompileError, match="OpenCLML SDK") as err:
        relay.build(part, target="opencl")
    assert "\n" not in str(err.value)
