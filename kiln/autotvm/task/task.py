"""Tuning tasks: a template function, its arguments and a target; and the template registry.

>>> @autotvm.template("tutorial/matmul")
... def matmul(N, L, M, dtype):
...     cfg = autotvm.get_config()
...     ...
...     return s, [A, B, C]
>>> task = autotvm.task.create("tutorial/matmul", args=(512, 512, 512, "float32"), target="llvm")
>>> len(task.config_space)

A task's *workload* ``(name, *args)`` identifies it in logs and dispatch contexts; tensors among
the arguments are written as ``("TENSOR", shape, dtype)``.
"""

from __future__ import annotations

import contextvars
import functools

from kiln.errors import TuningError

from .. import dispatcher
from ..space import ConfigSpace

# Template name -> function. The seed API looks templates up by name (task.create("name")), so
# a table is unavoidable; it only maps names to functions and holds no tuning state.
TEMPLATES: dict[str, callable] = {}

# Template name -> ``fn(*task args) -> {argument index: numpy array}``: arguments the runners set
# to these values instead of filling them with pseudo-random data (measure/fill.py), e.g. an offset
# table that random values would send outside the data (the mixed int8 conv's, int8_cpu.py).
INPUT_VALUES: dict[str, callable] = {}

# The workload of the template call in progress, so get_config() can ask the dispatch context.
_workload: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    "kiln_autotvm_workload", default=None)


def serialize_args(args) -> tuple:
    """Arguments as hashable, JSON-friendly values: tuples, numbers, strings, TENSOR tuples."""
    def one(x):
        if isinstance(x, (list, tuple)):
            return tuple(one(v) for v in x)
        if hasattr(x, "op") and hasattr(x, "shape") and hasattr(x, "dtype"):  # te.Tensor
            return ("TENSOR", tuple(_int(s) for s in x.shape), str(x.dtype))
        if isinstance(x, (int, float, str, bool)) or x is None:
            return x
        if hasattr(x, "value"):  # IntImm/FloatImm
            return x.value
        if type(x).__name__ == "Target":
            return str(x)
        raise TuningError(f"task argument {x!r} ({type(x).__name__}) cannot be recorded; use "
                          "numbers, strings, tuples and te tensors")
    return tuple(one(a) for a in args)


def deserialize_args(args) -> tuple:
    """The inverse of serialize_args for values read back from JSON (lists become tuples)."""
    def one(x):
        if isinstance(x, list):
            return tuple(one(v) for v in x)
        return x
    return tuple(one(a) for a in args)


def _int(v):
    value = getattr(v, "value", v)
    if not isinstance(value, int):
        raise TuningError(f"tensor dimension {v!r} is symbolic; tasks need constant shapes")
    return value


def args_to_placeholders(args) -> list:
    """Replace ("TENSOR", shape, dtype) arguments by te placeholders (for topi templates)."""
    from kiln import te
    out = []
    for i, a in enumerate(args):
        if isinstance(a, tuple) and len(a) == 3 and a[0] == "TENSOR":
            out.append(te.placeholder(a[1], dtype=a[2], name=f"placeholder{i}" if i else "data"))
        else:
            out.append(a)
    return out


def template(task_name: str, func=None):
    """Register a tunable template under ``task_name``. The function returns ``(s, args)``."""
    def register(f):
        # Re-registering a name (module reloaded, notebook cell re-run) replaces the template.
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            token = _workload.set((task_name, *serialize_args(args)))
            try:
                return f(*args, **kwargs)
            finally:
                _workload.reset(token)
        wrapper.template_name = task_name
        TEMPLATES[task_name] = wrapper
        return wrapper
    return register(func) if func is not None else register


def register_input_values(task_name: str, func=None):
    """Register ``fn(*args) -> {argument index: numpy array}`` for the tasks of ``task_name``:
    the runners (LocalRunner, RPCRunner) pass those arguments these values, the rest random data."""
    def register(f):
        INPUT_VALUES[task_name] = f
        return f
    return register(func) if func is not None else register


def get_config():
    """The config of the template call in progress (a ConfigSpace while a task is created, the
    chosen ConfigEntity while a candidate is built, the tuned best under apply_history_best)."""
    from kiln.target import Target
    return dispatcher.current().query(Target.current(allow_none=True), _workload.get())


def _load_builtin_templates() -> None:
    """kiln's te templates and kiln.topi's tunable ops register when imported; import them the
    first time a name is not found, so ``task.create("kiln/matmul", ...)`` works as is."""
    import importlib
    for module in ("kiln.autotvm.templates", "kiln.topi"):
        try:
            importlib.import_module(module)
        except ImportError:
            pass


class Task:
    """One tuning job: ``name``, ``args``, ``target``, ``config_space``, ``flop``, ``workload``."""

    def __init__(self, name: str, args):
        if name not in TEMPLATES:
            _load_builtin_templates()
        if name not in TEMPLATES:
            raise TuningError(f"no template named {name!r}; define it with "
                              f"@autotvm.template({name!r}) (known: {sorted(TEMPLATES)[:20]})")
        self.name = name
        self.args = serialize_args(args)
        self.func = TEMPLATES[name]
        self.config_space: ConfigSpace | None = None
        self.target = None
        self.target_host = None
        self.flop = 0.0

    @property
    def workload(self) -> tuple:
        return (self.name, *self.args)

    def input_values(self) -> dict:
        """{argument index: numpy array} the runners must pass as is (``register_input_values``)."""
        fn = INPUT_VALUES.get(self.name)
        return dict(fn(*self.args)) if fn is not None else {}

    def instantiate(self, config):
        """Run the template under ``config``: returns ``(schedule, tensors)``."""
        from kiln.target import Target
        target = self.target if self.target is not None else Target("llvm")
        with dispatcher.ApplyConfig(config), target:
            return self.func(*self.args)

    # Pickled into build processes: the template is found again by name there.
    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("func", None)
        state.pop("feature_cache", None)  # the cost model's, large and useless to a build process
        state["target"] = None if self.target is None else str(self.target)
        state["target_host"] = None if self.target_host is None else str(self.target_host)
        return state

    def __setstate__(self, state):
        from kiln.target import Target
        self.__dict__.update(state)
        self.func = TEMPLATES.get(self.name)
        if self.func is None:
            raise TuningError(f"template {self.name!r} is not registered in this process; define "
                              "it at module level of an imported module")
        if self.target is not None:
            self.target = Target(self.target, host=self.target_host)

    def __repr__(self) -> str:
        space = len(self.config_space) if self.config_space is not None else "?"
        return f"Task(func_name={self.name}, args={self.args}, workload={self.workload}, space={space})"


def create(task_name: str, args, target, target_host=None) -> Task:
    """Create a task and compute its config space by running the template once."""
    from kiln.target import Target
    from .flop import compute_flop

    task = Task(task_name, args)
    task.target = Target(target, host=target_host)
    task.target_host = task.target.host
    space = ConfigSpace()
    sch, _ = task.instantiate(space)
    task.config_space = space
    task.flop = space.flop or float(compute_flop(sch))
    if not task.flop:
        raise TuningError(f"task {task_name}: the schedule does no floating-point work to count; "
                          "call cfg.add_flop(n) in the template")
    return task
