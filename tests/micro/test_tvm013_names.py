"""microTVM as TVM 0.13's tutorials spell it (micro_aot.py, micro_autotune.py): top-level
generate_project, the "crt" template, tvm.target.target.micro, tvm.micro.testing,
get_standalone_crt_dir, autotvm_build_func / AutoTvmModuleLoader, and the host-driven AOT flow
(Runtime("crt", {"system-lib": True}) + Executor("aot") -> project.transport() -> Session ->
create_local_aot_executor(session)) against the host (llvm) build and onnxruntime."""

import json
import os

import numpy as np
import pytest
from kws_model import kws_cnn, run_ort

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import KilnError
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu
from kiln.relay.backend import Executor, Runtime

RUNTIME = Runtime("crt", {"system-lib": True})
EXECUTOR = Executor("aot")


def _needs_board():
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def kws():
    model, inputs = kws_cnn()
    mod, params = relay.frontend.from_onnx(model)
    host = relay.build(mod, target="llvm", params=params)  # the host build the boards must match
    return model, inputs, mod, params, host


def _host_numbers(host, x):
    m = graph_executor.GraphModule(host["default"](tvm.cpu(0)))
    m.set_input("input", x)
    m.run()
    return m.get_output(0).numpy()


def _aot_on_board(kws, target, template, tmp_path):
    model, inputs, mod, params, host = kws
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        module = tvm.relay.build(mod, target=target, params=params, runtime=RUNTIME, executor=EXECUTOR)
    project = tvm.micro.generate_project(tvm.micro.get_microtvm_template_projects(template), module,
                                         tmp_path / "project", {})
    project.build()
    project.flash()
    xs = [inputs["input"], np.random.default_rng(7).standard_normal((1, 1, 20, 10)).astype("float32")]
    with tvm.micro.Session(project.transport()) as session:
        aot_executor = tvm.micro.create_local_aot_executor(session)
        assert aot_executor.get_num_inputs() == 1 and aot_executor.get_num_outputs() == 1
        for x in xs:
            aot_executor.get_input("input").copyfrom(x)
            aot_executor.run()
            got = aot_executor.get_output(0).numpy()
            # Same float32 graph, different compilers (gcc on the board, LLVM here) and summation
            # order: softmax outputs in [0, 1] agree to a few float32 ulps.
            np.testing.assert_allclose(got, _host_numbers(host, x), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got, run_ort(model, {"input": x})[0], rtol=1e-5, atol=1e-6)
    return project


def test_host_driven_aot_on_the_crt_template_matches_the_host_build(kws, tmp_path):
    project = _aot_on_board(kws, tvm.target.target.micro("host"), "crt", tmp_path)
    assert project.aot_config["inputs"][0]["name"] == "input"


@pytest.mark.parametrize("template,model", [("qemu-mps2-an385", "mps2_an385"), ("qemu-mps2-an500", "mps2_an500"),
                                            ("qemu-mps3-an547", "mps3_an547")])
def test_host_driven_aot_on_the_emulated_boards_matches_the_host_build(kws, template, model, tmp_path):
    _needs_board()
    _aot_on_board(kws, tvm.micro.testing.get_target("qemu", model), template, tmp_path)


def test_the_interface_comes_from_the_board_and_a_kernel_only_firmware_says_so(kws, tmp_path):
    _, _, mod, params, _ = kws
    module = relay.build(mod, target="c", params=params, runtime=RUNTIME, executor=EXECUTOR)
    project = tvm.micro.generate_project(tvm.micro.get_microtvm_template_projects("crt"), module, tmp_path / "a")
    project.build()
    with tvm.micro.Session(project.transport()) as session:
        aot = session.create_aot_executor()
        assert aot.config == module.get_executor_config()
        with pytest.raises(KilnError, match="no input 'data'; its inputs: input"):
            aot.get_input("data")
    graph = relay.build(mod, target="c", params=params)  # a graph build: kernels only
    project = tvm.micro.generate_project(tvm.micro.get_microtvm_template_projects("crt"), graph, tmp_path / "g")
    project.build()
    with tvm.micro.Session(project.transport()) as session:
        with pytest.raises(KilnError, match="serves no AOT model"):
            tvm.micro.create_local_aot_executor(session)


def test_project_types_and_standalone_firmware_has_no_transport(kws, tmp_path):
    _, _, mod, params, _ = kws
    module = relay.build(mod, target="c -mcpu=cortex-m3", params=params, runtime=Runtime("crt"), executor=EXECUTOR)
    template = tvm.micro.get_microtvm_template_projects("qemu-mps2-an385")
    standalone = tvm.micro.generate_project(template, module, tmp_path / "s")  # no system-lib: standalone
    assert hasattr(standalone, "run")
    with pytest.raises(KilnError, match="standalone firmware, which runs the model once .*'project_type': 'host_driven'"):
        standalone.transport()
    hosted = tvm.micro.generate_project(template, module, tmp_path / "h", {"project_type": "host_driven"})
    assert hasattr(hosted, "transport")
    with pytest.raises(KilnError, match="project_type 'zephyr' is unknown"):
        tvm.micro.generate_project(template, module, tmp_path / "z", {"project_type": "zephyr"})
    # The crt template makes a standalone program on request (this machine's cc, the MPS2 main.c).
    model, inputs, *_ = kws
    here = tvm.micro.generate_project(tvm.micro.get_microtvm_template_projects("crt"), module, tmp_path / "c",
                                      {"project_type": "aot_standalone_demo", "inputs": inputs})
    here.build()
    result = here.run()
    np.testing.assert_allclose(result["outputs"]["output"], run_ort(model, inputs)[0], rtol=1e-5, atol=1e-6)
    assert result["cycles"] > 0


def test_template_names_and_the_crt_dir():
    crt = tvm.micro.get_microtvm_template_projects("crt")
    assert crt == tvm.micro.get_microtvm_template_projects("host") and os.path.isfile(os.path.join(crt, "board.c"))
    assert os.path.isfile(os.path.join(tvm.micro.get_standalone_crt_dir(), "crt.h"))
    for name in ("qemu-mps2-an500", "mps2-an500", "qemu-mps3-an547", "mps3-an547"):
        assert os.path.isdir(tvm.micro.get_microtvm_template_projects(name))
    with pytest.raises(KilnError, match="no micro project template 'zephyr'; templates: crt, host"):
        tvm.micro.get_microtvm_template_projects("zephyr")


def test_micro_target_helper():
    host = tvm.target.target.micro("host")
    assert host.kind.name == "c" and host.model == "host" and "arm_cpu" not in host.keys
    m7 = tvm.target.target.micro("stm32f746xx")
    assert m7.mcpu == "cortex-m7" and m7.keys[0] == "arm_cpu" and str(tvm.target.Target(str(m7))) == str(m7)
    assert tvm.target.target.micro("mps3_an547").mcpu == "cortex-m55"
    with pytest.raises(tvm.errors.TargetError, match="model 'stm32f9' is unknown"):
        tvm.target.target.micro("stm32f9")


def test_micro_testing_helpers(tmp_path):
    assert str(tvm.micro.testing.get_target("crt")) == str(tvm.target.target.micro("host"))
    assert tvm.micro.testing.get_target("qemu", "mps2_an386").mcpu == "cortex-m4"
    with pytest.raises(KilnError, match="has no board 'nucleo'"):
        tvm.micro.testing.get_target("qemu", "nucleo")
    good, bad = tmp_path / "good.log", tmp_path / "bad.log"
    record = {"input": ["c", "t", [], {}], "config": {}, "result": [[2.5e-05], 0, 0.1, 0], "version": 0.2}
    good.write_text(json.dumps(record) + "\n")
    tvm.micro.testing.check_tune_log(good)
    bad.write_text(json.dumps(record) + "\n" + json.dumps({**record, "result": [[1e9], 4, 0.1, 0]}) + "\n")
    with pytest.raises(AssertionError, match="bad.log:2: the measurement failed"):
        tvm.micro.testing.check_tune_log(bad)


def test_aot_session_helpers_and_workspace_size(kws, tmp_path):
    model, inputs, mod, params, host = kws
    target = tvm.micro.testing.get_target("crt")
    with tvm.micro.testing.create_aot_session("crt", None, target, mod, params, build_dir=tmp_path) as session:
        aot = tvm.micro.create_local_aot_executor(session)
        rng = np.random.default_rng(3)
        samples = [rng.standard_normal((1, 1, 20, 10)).astype("float32") for _ in range(3)]
        labels = [int(np.argmax(_host_numbers(host, x))) for x in samples]
        seconds, accuracy, predicted = tvm.micro.testing.evaluate_model_accuracy(session, aot, samples, labels)
        assert predicted == labels and accuracy == 1.0 and seconds > 0
    lib = relay.build(mod, target=target, params=params, runtime=RUNTIME,
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    mlf = tvm.micro.export_model_library_format(lib, str(tmp_path / "m.tar"))
    assert tvm.micro.testing.mlf_extract_workspace_size_bytes(mlf) == lib.workspace_size > 0


def test_micro_tflite_tutorial_flow_graph_executor_on_the_crt_template(kws):
    """TVM 0.13's micro_tflite.py with the graph executor (the model from ONNX here)."""
    model, inputs, mod, params, host = kws
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        module = relay.build(mod, target=tvm.micro.testing.get_target("crt"), runtime=RUNTIME, params=params)
    temp_dir = tvm.contrib.utils.tempdir()
    tvm.micro.export_model_library_format(module, temp_dir / "model.tar")
    project = tvm.micro.generate_project(tvm.micro.get_microtvm_template_projects("crt"), module,
                                         temp_dir / "generated-project", {"project_type": "host_driven"})
    project.build()
    project.flash()
    with tvm.micro.Session(transport_context_manager=project.transport()) as session:
        graph_mod = tvm.micro.create_local_graph_executor(module.get_graph_json(), session.get_system_lib(),
                                                          session.device)
        graph_mod.set_input(**module.get_params())
        graph_mod.set_input("input", tvm.nd.array(inputs["input"]))
        graph_mod.run()
        got = graph_mod.get_output(0).numpy()
    np.testing.assert_allclose(got, _host_numbers(host, inputs["input"]), rtol=1e-5, atol=1e-6)


def test_host_driven_project_from_a_model_library_format_tar(kws, tmp_path):
    model, inputs, mod, params, host = kws
    module = relay.build(mod, target="c", params=params, runtime=RUNTIME, executor=EXECUTOR)
    mlf = tvm.micro.export_model_library_format(module, tmp_path / "model.tar")
    project = tvm.micro.project.generate_project_from_mlf(tvm.micro.get_microtvm_template_projects("crt"),
                                                          tmp_path / "project", mlf, {"project_type": "host_driven"})
    project.build()
    with tvm.micro.Session(project.transport()) as session:
        aot = tvm.micro.create_local_aot_executor(session)
        aot.set_input("input", inputs["input"])
        aot.run()
        np.testing.assert_allclose(aot.get_output(0).numpy(), _host_numbers(host, inputs["input"]),
                                   rtol=1e-5, atol=1e-6)


def test_inputs_by_their_model_names_even_when_not_c_identifiers(tmp_path):
    x = relay.var("input_1:0", shape=(4,), dtype="float32")
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.multiply(x, relay.const(2.0))))
    lib = relay.build(mod, target="c", executor=EXECUTOR, runtime=RUNTIME)
    project = tvm.micro.generate_project(tvm.micro.get_microtvm_template_projects("crt"), lib, tmp_path / "p")
    project.build()
    with tvm.micro.Session(project.transport()) as session:
        aot = tvm.micro.create_local_aot_executor(session)
        aot.set_input("input_1:0", np.arange(4, dtype="float32"))
        aot.run()
        np.testing.assert_array_equal(aot.get_output(0).numpy(), np.arange(4, dtype="float32") * 2)
        assert aot.get_input_index("input_1:0") == 0 and aot.get_input(0) is aot.get_input("input_1_0")


def test_the_tutorials_aot_module_wrapper(kws, tmp_path):
    """micro_aot.py's own line: tvm.runtime.executor.aot_executor.AotModule(session.create_aot_executor())."""
    model, inputs, mod, params, host = kws
    module = relay.build(mod, target=tvm.target.target.micro("host"), params=params, runtime=RUNTIME, executor=EXECUTOR)
    project = tvm.micro.generate_project(tvm.micro.get_microtvm_template_projects("crt"), module, tmp_path / "p", {})
    project.build()
    project.flash()
    with tvm.micro.Session(project.transport()) as session:
        aot_executor = tvm.runtime.executor.aot_executor.AotModule(session.create_aot_executor())
        aot_executor.get_input("input").copyfrom(inputs["input"])
        aot_executor.run()
        np.testing.assert_allclose(aot_executor.get_output(0).numpy(), _host_numbers(host, inputs["input"]),
                                   rtol=1e-5, atol=1e-6)
        assert aot_executor.module.time_evaluator("run", session.device, number=2)().mean > 0
    with pytest.raises(TypeError, match="not an AOT executor"):
        tvm.runtime.executor.aot_executor.AotModule(object())
