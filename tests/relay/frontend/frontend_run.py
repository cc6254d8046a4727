"""Run an imported model two ways: the numpy reference executor and relay.build for llvm."""

import numpy as np

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay import reference


def run_reference(mod, params, inputs):
    out = reference.run(mod, inputs, params)
    return [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else [np.asarray(out)]


def run_built(mod, params, inputs):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]
