"""Instantiating, timing and tuning AOT models on a board (TVM 0.13: tvm.micro.testing.evaluation)."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

from kiln.errors import KilnError

from .utils import _board


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
