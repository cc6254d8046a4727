"""Helpers TVM 0.13's microTVM tutorials and tests call as ``tvm.micro.testing``.

    target = micro.testing.get_target("crt")                       # c -model=host
    target = micro.testing.get_target("qemu", "mps2_an386")        # c -keys=arm_cpu,cpu -mcpu=cortex-m4 ...
    with micro.testing.create_aot_session("crt", None, target, mod, params) as session:
        aot = micro.create_local_aot_executor(session)
        seconds, accuracy, labels = micro.testing.evaluate_model_accuracy(session, aot, samples, labels)
    micro.testing.check_tune_log("tune.log")

AOT test helpers (``AOTTestModel``, ``compile_and_run``, ``generate_ref_data``, the default and
Corstone-300 runners) are in ``micro.testing.aot_test_utils``.

Platforms: ``"crt"`` (a host process; board ``None`` or ``"host"``) and ``"qemu"`` (kiln's emulated
boards: ``mps2_an385`` Cortex-M3, ``mps2_an386`` M4F, ``mps2_an500`` M7, ``mps3_an547`` M55).
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path

from kiln.errors import KilnError

_BOARDS = {
    "crt": {"host": {"model": "host", "template": "crt"}},
    "qemu": {"mps2_an385": {"model": "mps2_an385", "template": "qemu-mps2-an385", "cpu": "cortex-m3"},
             "mps2_an386": {"model": "mps2_an386", "template": "qemu-mps2-an386", "cpu": "cortex-m4"},
             "mps2_an500": {"model": "mps2_an500", "template": "qemu-mps2-an500", "cpu": "cortex-m7"},
             "mps3_an547": {"model": "mps3_an547", "template": "qemu-mps3-an547", "cpu": "cortex-m55"}},
}


def get_supported_boards(platform: str) -> dict:
    """``{board: {"model": ..., "template": ...}}`` of a platform (``"crt"`` or ``"qemu"``)."""
    if platform not in _BOARDS:
        raise KilnError(f"micro.testing: platform {platform!r} is unknown; kiln has {', '.join(_BOARDS)} "
                        "(zephyr and arduino boards are not modelled)")
    return _BOARDS[platform]


def _board(platform: str, board: str | None) -> dict:
    boards = get_supported_boards(platform)
    if board is None and len(boards) == 1:
        return next(iter(boards.values()))
    if board not in boards:
        raise KilnError(f"micro.testing: platform {platform!r} has no board {board!r}; boards: {', '.join(boards)}")
    return boards[board]


def get_target(platform: str, board: str | None = None):
    """The C target of a board: ``get_target("crt")`` is ``micro("host")``."""
    from kiln.target.target import micro
    return micro(_board(platform, board)["model"])


def check_tune_log(log_path) -> None:
    """Every record of a tuning log parses and has a finite cost below 1e9 seconds (an error
    record's cost is 1e9); raises AssertionError naming the first bad line otherwise."""
    with open(log_path) as f:
        lines = [line for line in f if line.strip()]
    assert lines, f"{log_path}: the tuning log is empty"
    for number, line in enumerate(lines, 1):
        record = json.loads(line)
        cost = record["result"][0][0]
        assert cost < 1e9, f"{log_path}:{number}: the measurement failed (cost {cost}, error {record['result'][1]})"


def mlf_extract_workspace_size_bytes(mlf_tar_path) -> int:
    """The AOT arena size recorded in a Model Library Format tar's metadata.json."""
    with tarfile.open(mlf_tar_path) as tar:
        names = {m.name.lstrip("./"): m for m in tar.getmembers()}
        if "metadata.json" not in names:
            raise KilnError(f"{mlf_tar_path} has no metadata.json; is it a Model Library Format tar?")
        meta = json.load(tar.extractfile(names["metadata.json"]))
    if "memory" not in meta:
        raise KilnError(f"{mlf_tar_path} is a graph-executor build; only AOT builds plan a workspace")
    return int(meta["memory"]["workspace_size_bytes"])


def get_conv2d_relay_module():
    """A conv2d of int8 NCHW data (1x3x64x64) with int8 OIHW weights (8x3x5x5), int32 out, pad 2."""
    from kiln import relay
    from kiln.ir import IRModule

    data = relay.var("data", relay.TensorType((1, 3, 64, 64), "int8"))
    weight = relay.var("weight", relay.TensorType((8, 3, 5, 5), "int8"))
    y = relay.nn.conv2d(data, weight, padding=(2, 2), channels=8, kernel_size=(5, 5), data_layout="NCHW",
                        kernel_layout="OIHW", out_dtype="int32")
    return relay.transform.InferType()(IRModule.from_expr(relay.Function([data, weight], y)))


def create_aot_session(platform: str, board, target, mod, params, build_dir=None, tune_logs=None,
                       timeout_override=None, use_cmsis_nn: bool = False, project_options: dict | None = None):
    """AOT-compile ``mod`` for ``target``, generate, build and flash a host-driven project for the
    board, and return the (not yet opened) ``micro.Session``: use it in a ``with`` block."""
    from kiln import autotvm, relay, transform
    from kiln.relay.backend import Executor, Runtime

    from kiln.micro import Session, generate_project, get_microtvm_template_projects

    if use_cmsis_nn:
        raise KilnError("create_aot_session: use_cmsis_nn needs the CMSIS-NN library, which kiln does not "
                        "offload to; leave it False (kiln generates the kernels)")
    build_dir = Path(build_dir or tempfile.mkdtemp(prefix="kiln-micro-aot-"))
    with transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        if tune_logs is not None:
            with autotvm.apply_history_best(tune_logs):
                lowered = relay.build(mod, target=target, params=params, executor=Executor("aot"),
                                      runtime=Runtime("crt", {"system-lib": True}))
        else:
            lowered = relay.build(mod, target=target, params=params, executor=Executor("aot"),
                                  runtime=Runtime("crt", {"system-lib": True}))
    template = get_microtvm_template_projects(_board(platform, board)["template"])
    project = generate_project(template, lowered, build_dir / "project",
                               {"project_type": "host_driven", **(project_options or {})})
    project.build()
    project.flash()
    return Session(project.transport(), timeout_override=timeout_override)


def evaluate_model_accuracy(session, aot_executor, input_data, true_labels, runs_per_sample: int = 1):
    """(mean board seconds per run, accuracy, predicted labels) of a one-input, one-output classifier."""
    if aot_executor.get_num_inputs() != 1 or aot_executor.get_num_outputs() != 1:
        raise KilnError("evaluate_model_accuracy: the model must have one input and one output (class scores)")
    if runs_per_sample < 1:
        raise KilnError(f"evaluate_model_accuracy: runs_per_sample={runs_per_sample} must be >= 1")
    predicted, times = [], []
    for sample in input_data:
        aot_executor.get_input(0).copyfrom(sample)
        times.append(aot_executor.module.time_evaluator("run", session.device, number=runs_per_sample)().mean)
        predicted.append(int(aot_executor.get_output(0).numpy().argmax()))
    correct = sum(int(t) == p for t, p in zip(true_labels, predicted))
    return sum(times) / len(times), correct / len(predicted), predicted


def tune_model(platform: str, board, target, mod, params, num_trials: int, tuner_cls=None):
    """Tune every task of ``mod`` on the board; returns the log as a StringIO."""
    from kiln import autotvm, transform

    from kiln.micro import AutoTvmModuleLoader, autotvm_build_func, get_microtvm_template_projects

    with transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        tasks = autotvm.task.extract_from_program(mod["main"], {}, target)
    if not tasks:
        raise KilnError(f"tune_model: the model has no tunable ops for {target}")
    loader = AutoTvmModuleLoader(get_microtvm_template_projects(_board(platform, board)["template"]))
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=1, build_func=autotvm_build_func),
                                    runner=autotvm.LocalRunner(number=1, repeat=1, timeout=100, module_loader=loader))
    tuner_cls = tuner_cls or autotvm.tuner.GATuner
    results = io.StringIO()
    for task in tasks:
        tuner_cls(task).tune(n_trial=num_trials, measure_option=option,
                             callbacks=[autotvm.callback.log_to_file(results)])
    results.seek(0)
    return results


__all__ = ["get_supported_boards", "get_target", "check_tune_log", "mlf_extract_workspace_size_bytes",
           "get_conv2d_relay_module", "create_aot_session", "evaluate_model_accuracy", "tune_model"]
