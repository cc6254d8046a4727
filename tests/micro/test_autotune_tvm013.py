"""TVM 0.13's micro_autotune.py flow: LocalBuilder(build_func=micro.autotvm_build_func,
runtime=Runtime("crt", {"system-lib": True})) + LocalRunner(module_loader=micro.AutoTvmModuleLoader(...)),
the log checked with micro.testing.check_tune_log, the tuned build run through a session with
micro.create_local_debug_executor against numpy."""

import json

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu

RUNTIME = tvm.relay.backend.Runtime("crt", {"system-lib": True})


def _conv_model():
    data = relay.var("data", relay.TensorType((1, 3, 10, 10), "float32"))
    weight = relay.var("weight", relay.TensorType((6, 3, 5, 5), "float32"))
    y = relay.nn.conv2d(data, weight, padding=(2, 2), kernel_size=(5, 5), kernel_layout="OIHW", out_dtype="float32")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([data, weight], y)))
    return mod, {"weight": np.random.default_rng(0).random((6, 3, 5, 5)).astype("float32")}


def _conv_ref(x, w):
    xp = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    out = np.zeros((1, 6, 10, 10), "float64")
    for i in range(5):
        for j in range(5):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 10, j:j + 10], w[:, :, i, j])
    return out


def _tune(template, target, log, trials):
    mod, _ = _conv_model()
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        tasks = tvm.autotvm.task.extract_from_program(mod["main"], {}, target)
    assert len(tasks) == 1
    module_loader = tvm.micro.AutoTvmModuleLoader(template_project_dir=tvm.micro.get_microtvm_template_projects(template),
                                                  project_options={"verbose": False})
    builder = tvm.autotvm.LocalBuilder(n_parallel=1, build_kwargs={"build_option": {"tir.disable_vectorize": True}},
                                       do_fork=True, build_func=tvm.micro.autotvm_build_func, runtime=RUNTIME)
    runner = tvm.autotvm.LocalRunner(number=1, repeat=1, timeout=100, module_loader=module_loader)
    measure_option = tvm.autotvm.measure_option(builder=builder, runner=runner)
    tuner = tvm.autotvm.tuner.GATuner(tasks[0])
    tuner.tune(n_trial=trials, measure_option=measure_option,
               callbacks=[tvm.autotvm.callback.log_to_file(str(log))], si_prefix="M")
    return tasks[0]


def test_micro_autotune_flow_on_the_crt_template(tmp_path):
    target = tvm.micro.testing.get_target("crt")
    log = tmp_path / "microtvm_autotune.log.txt"
    task = _tune("crt", target, log, 3)
    tvm.micro.testing.check_tune_log(log)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 3 and all(r["result"][1] == 0 for r in records)
    mod, params = _conv_model()
    x = np.random.default_rng(1).random((1, 3, 10, 10)).astype("float32")
    with tvm.autotvm.apply_history_best(str(log)):
        with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
            lowered = tvm.relay.build(mod, target=target, runtime=RUNTIME, params=params)
    temp_dir = tvm.contrib.utils.tempdir()
    project = tvm.micro.generate_project(str(tvm.micro.get_microtvm_template_projects("crt")), lowered,
                                         temp_dir / "project", {"verbose": False})
    project.build()
    project.flash()
    with tvm.micro.Session(project.transport()) as session:
        debug_module = tvm.micro.create_local_debug_executor(lowered.get_graph_json(), session.get_system_lib(),
                                                             session.device)
        debug_module.set_input(**lowered.get_params())
        debug_module.set_input("data", x)
        debug_module.run()
        got = debug_module.get_output(0).numpy()
    # 75 float32 products per output, values in [0, 75): float32 accumulation error well below 1e-4.
    np.testing.assert_allclose(got, _conv_ref(x.astype("float64"), params["weight"].astype("float64")),
                               rtol=1e-5, atol=1e-4)
    assert task.name.startswith("conv2d")


def test_candidates_are_timed_in_board_time_on_an_emulated_board(tmp_path):
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    log = tmp_path / "m4.log"
    _tune("qemu-mps2-an386", tvm.micro.testing.get_target("qemu", "mps2_an386"), log, 2)
    tvm.micro.testing.check_tune_log(log)
    costs = [json.loads(line)["result"][0][0] for line in log.read_text().splitlines()]
    # Board time is whole SysTick ticks of the 25 MHz clock (host time would not be), and a 15k
    # multiply-add conv at 1 ns per instruction takes more than 15 us.
    for c in costs:
        assert abs(c * 25e6 - round(c * 25e6)) < 1e-6 and c > 15e-6


def test_a_task_for_llvm_is_a_clear_build_error(tmp_path):
    log = tmp_path / "llvm.log"
    _tune("crt", "llvm", log, 1)
    record = json.loads(log.read_text().splitlines()[0])
    assert record["result"][1] != 0 and "create it for a C target" in str(record["result"][0])


def test_micro_testing_tune_model_on_the_int8_conv(tmp_path):
    mod = tvm.micro.testing.get_conv2d_relay_module()
    log = tvm.micro.testing.tune_model("crt", None, tvm.micro.testing.get_target("crt"), mod, {}, 1)
    (tmp_path / "t.log").write_text(log.read())
    tvm.micro.testing.check_tune_log(tmp_path / "t.log")
    record = json.loads((tmp_path / "t.log").read_text().splitlines()[0])
    assert record["input"][0] == "c -model=host" and record["input"][1].startswith("conv2d")
