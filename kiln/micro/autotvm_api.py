"""TVM 0.13's names for tuning on the board, over kiln's MicroBuilder/MicroRunner (autotvm.py):

    module_loader = micro.AutoTvmModuleLoader(template_project_dir=micro.get_microtvm_template_projects("crt"))
    builder = autotvm.LocalBuilder(n_parallel=1, build_func=micro.autotvm_build_func,
                                   runtime=Runtime("crt", {"system-lib": True}))
    runner = autotvm.LocalRunner(number=1, repeat=1, timeout=100, module_loader=module_loader)

``autotvm_build_func`` makes LocalBuilder keep each candidate as C source (the task's target
must be ``c``); ``module_loader`` makes LocalRunner link it with the CRT into firmware for the
template's board and time it in board time through a session. Nothing here imports autotvm
until a candidate is built or timed.
"""

from __future__ import annotations

import os

from kiln.errors import KilnError


def _build_c_candidate(state, config):
    from kiln.autotvm.measure.measure import BuildResult, MeasureErrorNo

    from .autotvm import build_c_candidate
    task = state[0]
    if task.target is None or task.target.kind.name != "c":
        return BuildResult(None, [], (MeasureErrorNo.COMPILE_HOST, f"micro.autotvm_build_func: task {task.name} "
                                      f"targets {task.target}; create it for a C target such as "
                                      "micro.testing.get_target('crt') or 'c -mcpu=cortex-m4'"), 0.0)
    return build_c_candidate(state, config)


def autotvm_build_func(*_args, **_kwargs):
    """Pass as ``LocalBuilder(build_func=micro.autotvm_build_func)``; not called directly."""
    raise KilnError("micro.autotvm_build_func is a LocalBuilder build_func: pass it as "
                    "autotvm.LocalBuilder(build_func=micro.autotvm_build_func)")


autotvm_build_func.output_format = "c"
autotvm_build_func.build_candidate = _build_c_candidate  # LocalBuilder builds each candidate with this


class AutoTvmModuleLoader:
    """``AutoTvmModuleLoader(template_project_dir, project_options=None)``: LocalRunner's
    ``module_loader`` for candidates built by ``autotvm_build_func``."""

    def __init__(self, template_project_dir, project_options: dict | None = None):
        from .project import _template_of
        self.template = _template_of(template_project_dir)
        self.project_options = dict(project_options or {})

    def measure(self, measure_inputs, build_results, number: int, repeat: int, timeout: float) -> list:
        """MeasureResults of ``build_results`` (C sources), timed on the template's board."""
        from .autotvm import MicroRunner
        runner = MicroRunner(self.template, number=number, repeat=repeat, timeout=timeout)
        return runner.run(measure_inputs, build_results)

    def __repr__(self) -> str:
        return f"AutoTvmModuleLoader({os.path.basename(self.template)})"
