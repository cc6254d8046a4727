"""AOT test helpers with TVM 0.13's names (``tvm.micro.testing.aot_test_utils``, ``tvm.testing.aot``):

    from kiln.micro.testing.aot_test_utils import (AOT_DEFAULT_RUNNER, AOT_CORSTONE300_RUNNER,
                                                   AOTTestModel, compile_and_run, generate_ref_data)
    outputs = generate_ref_data(mod, inputs, params)                   # llvm graph executor here
    compile_and_run(AOTTestModel(module=mod, inputs=inputs, outputs=outputs, params=params),
                    runner=AOT_CORSTONE300_RUNNER, interface_api="c", use_unpacked_api=True)

A runner is a project template: ``AOT_DEFAULT_RUNNER`` builds the model's AOT C with this
machine's cc and runs it as a program; ``AOT_CORSTONE300_RUNNER`` builds Cortex-M55 firmware and
runs it on qemu's ``mps3-an547`` (the AN547 FPGA image is the Corstone-300 reference system's).
The program prints its outputs, which are compared with ``model.outputs`` (exactly for integers,
within ``output_tolerance`` otherwise).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np

from kiln.errors import KilnError


@dataclass
class AOTTestModel:
    """A relay module, its inputs and expected outputs ({name: array})."""
    module: object
    inputs: dict
    outputs: dict
    name: str = "default"
    params: dict | None = None
    pass_config: dict | None = None
    output_tolerance: float | None = None
    extra_memory_in_bytes: int = 0


@dataclass(frozen=True)
class AOTTestRunner:
    """Where the AOT program runs: ``template`` (a micro project template) and its -mcpu.
    TVM's ``makefile``/``prologue``/``epilogue``/``includes``/``parameters`` are kept for reading."""
    makefile: str = "default"
    prologue: str = ""
    epilogue: str = ""
    includes: tuple = ()
    parameters: dict = field(default_factory=dict)
    pass_config: dict = field(default_factory=dict)
    template: str = "crt"
    mcpu: str | None = None


AOT_DEFAULT_RUNNER = AOTTestRunner()
AOT_CORSTONE300_RUNNER = AOTTestRunner(makefile="corstone300", template="qemu-mps3-an547", mcpu="cortex-m55")
AOT_USMP_CORSTONE300_RUNNER = AOT_CORSTONE300_RUNNER  # kiln plans the arena one way (no USMP switch)


def generate_ref_data(mod, input_data: dict, params: dict | None = None, target: str = "llvm") -> dict:
    """Reference outputs of ``mod`` from kiln's graph executor on ``target`` (this machine), named
    as the AOT interface names them (``output`` or ``output0``, ``output1``, ...)."""
    import kiln as tvm
    from kiln import relay
    from kiln.contrib import graph_executor

    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**input_data)
    m.run()
    n = m.get_num_outputs()
    return {("output" if n == 1 else f"output{i}"): m.get_output(i).numpy() for i in range(n)}


def compile_models(models, interface_api: str = "c", use_unpacked_api: bool = True, workspace_byte_alignment: int = 8,
                   constant_byte_alignment: int = 8, enable_op_fusion: bool = True, pass_config: dict | None = None,
                   target="c", target_opts: dict | None = None) -> list:
    """relay.build of every model with the AOT executor; returns the built modules."""
    import kiln as tvm
    from kiln import relay
    from kiln.relay.backend import Executor, Runtime

    models = models if isinstance(models, (list, tuple)) else [models]
    if isinstance(target, str) and target_opts:
        target = " ".join([target, *(f"{k}={v}" for k, v in target_opts.items())])
    executor = Executor("aot", {"interface-api": interface_api, "unpacked-api": use_unpacked_api,
                                "workspace-byte-alignment": workspace_byte_alignment,
                                "constant-byte-alignment": constant_byte_alignment})
    built = []
    for model in models:
        config = {**(pass_config or {}), **(model.pass_config or {})}
        disabled = [] if enable_op_fusion else ["FuseOps"]
        with tvm.transform.PassContext(opt_level=3, config=config, disabled_pass=disabled):
            built.append(relay.build(model.module, target=target, params=model.params, executor=executor,
                                     runtime=Runtime("crt"), mod_name=model.name))
    return built


def run_and_check(models, built, runner: AOTTestRunner, test_dir=None) -> list:
    """Run each built model through ``runner``'s template; assert its outputs; returns the runs."""
    from kiln.micro import generate_project, get_microtvm_template_projects

    models = models if isinstance(models, (list, tuple)) else [models]
    test_dir = test_dir or tempfile.mkdtemp(prefix="kiln-aot-test-")
    runs = []
    for model, lib in zip(models, built):
        if lib.libmod_name != "default":
            raise KilnError(f"run_and_check: model {model.name!r}: the board programs call tvmgen_default_run; "
                            "name the model 'default'")
        project = generate_project(get_microtvm_template_projects(runner.template), lib,
                                   os.path.join(test_dir, model.name),
                                   {"project_type": "aot_standalone_demo", "inputs": model.inputs})
        project.build()
        result = project.run()
        _check(model, result["outputs"])
        runs.append(result)
    return runs


def _check(model: AOTTestModel, got: dict) -> None:
    for name, want in model.outputs.items():
        if name not in got:
            raise KilnError(f"{model.name}: the program printed no output {name!r}; it printed {sorted(got)}")
        want = np.asarray(want)
        if model.output_tolerance is None and want.dtype.kind in "iub":
            np.testing.assert_array_equal(got[name], want, err_msg=f"{model.name}: output {name}")
        else:
            tol = model.output_tolerance if model.output_tolerance is not None else 1e-5
            np.testing.assert_allclose(got[name], want, rtol=tol, atol=tol, err_msg=f"{model.name}: output {name}")


def compile_and_run(models, runner: AOTTestRunner, interface_api: str, use_unpacked_api: bool,
                    workspace_byte_alignment: int = 8, constant_byte_alignment: int = 8, enable_op_fusion: bool = True,
                    target="c", target_opts: dict | None = None, test_dir=None, **_) -> list:
    """compile_models then run_and_check (TVM's debugging options are accepted and ignored).
    ``target`` ``"c"`` gets the runner's -mcpu (``c -keys=arm_cpu -mcpu=cortex-m55`` on Corstone-300)."""
    if target == "c" and runner.mcpu:
        target = f"c -keys=arm_cpu -mcpu={runner.mcpu}"
    built = compile_models(models, interface_api, use_unpacked_api, workspace_byte_alignment, constant_byte_alignment,
                           enable_op_fusion, runner.pass_config, target, target_opts)
    return run_and_check(models, built, runner, test_dir)


def parametrize_aot_options(test):
    """pytest parametrization over (interface_api, use_unpacked_api, test_runner) as TVM's: the
    default runner with every valid API, the Corstone-300 with the C interface and unpacked API."""
    import pytest

    from kiln.micro.toolchain import missing_arm_gcc, missing_qemu

    combos = [(api, unpacked, runner) for api, unpacked, runner in
              itertools.product(["packed", "c"], [True, False], [AOT_DEFAULT_RUNNER, AOT_CORSTONE300_RUNNER])
              if not (api == "c" and not unpacked)
              and not (runner is AOT_CORSTONE300_RUNNER and (api == "packed" or not unpacked))]
    why = missing_arm_gcc() or missing_qemu()
    params = [pytest.param(*c, id=f"{c[0]}-{'unpacked' if c[1] else 'packed_args'}-{c[2].makefile}",
                           marks=[pytest.mark.skipif(bool(why), reason=why or "")] if c[2] is AOT_CORSTONE300_RUNNER
                           else []) for c in combos]
    return pytest.mark.parametrize(["interface_api", "use_unpacked_api", "test_runner"], params)(test)
