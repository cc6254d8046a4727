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

from .evaluation import create_aot_session, evaluate_model_accuracy, tune_model  # noqa: F401
from .utils import (check_tune_log, get_conv2d_relay_module, get_supported_boards, get_target,  # noqa: F401
                    mlf_extract_workspace_size_bytes)

__all__ = ["get_supported_boards", "get_target", "check_tune_log", "mlf_extract_workspace_size_bytes",
           "get_conv2d_relay_module", "create_aot_session", "evaluate_model_accuracy", "tune_model"]
