"""``kiln.autotvm``: tune tensor programs by measuring them on devices.

>>> from kiln import autotvm
>>> task = autotvm.task.create("tutorial/matmul", args=(512, 512, 512, "float32"), target="llvm")
>>> tuner = autotvm.tuner.XGBTuner(task)
>>> tuner.tune(n_trial=100, measure_option=autotvm.measure_option(
...     builder=autotvm.LocalBuilder(), runner=autotvm.LocalRunner(number=5)),
...     callbacks=[autotvm.callback.log_to_file("matmul.log")])
>>> with autotvm.apply_history_best("matmul.log"):
...     s, args = matmul(512, 512, 512, "float32")

docs/autotvm.md is the guide. xgboost (for XGBTuner) is imported only when it is used.
"""

from . import callback, dispatcher, measure, record, space, task, tuner  # noqa: F401
from .dispatcher import (  # noqa: F401
    ApplyConfig, ApplyHistoryBest, DispatchContext, FallbackContext, apply_history_best,
)
from .measure import (  # noqa: F401
    LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput, MeasureResult, RPCRunner,
    measure_option,
)
from .space import ConfigEntity, ConfigSpace, FallbackConfigEntity  # noqa: F401
from .task import (  # noqa: F401
    create, get_config, register_topi_compute, register_topi_schedule, template,
)
from .task.task import Task  # noqa: F401
