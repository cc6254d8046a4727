"""Which tuning config a tunable op gets when relay.build lowers it: the autotvm hook.

``select_config(op_name, workload, target)`` is the single place the graph compiler asks. It
returns a config (an autotvm ``ConfigEntity``, or any mapping of knob name to value that topi's
computes read) or None, meaning "topi's default schedule". Answers come from, in order:

1. a provider installed with ``with use_config_provider(fn):`` (``fn(op_name, workload, target)``),
   for tests and for tools that pick configs by other means;
2. the active autotvm dispatch context (``with autotvm.apply_history_best(log):``), through the
   lookup ``kiln.autotvm`` installs in ``kiln/tuning.py`` when imported -- a plain build never
   imports it. Fallback configs count as "no answer".

The workload is the autotvm task workload of the op (``workload_of``): the template name for
the target (``conv2d_nchw.x86``), the input tensors as ``("TENSOR", shape, dtype)`` and the op's
attributes. ``asked_workloads`` (relay/backend/asked_workloads.py, above the build) runs
relay.build's own passes and graph codegen and records what it asks here, so the tasks ``autotvm.task.extract_from_program`` makes of them are, by
construction, the workloads a build under the same PassContext looks up: a log written by
tuning them is found here (layouts, fusion and the target's alter-layout rules included).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Callable

from ...tuning import tuned_config
from ..op import layout

_provider: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("kiln_relay_config_provider",
                                                                            default=None)

# relay op -> autotvm template base name; the family ("x86" / "arm_cpu") is appended. conv2d
# picks its template by layout and groups (see template_of). autotvm's task extraction calls
# workload_of too, so the workloads a log holds are exactly the ones asked for here.
TEMPLATES = {
    "nn.conv2d": "conv2d_nchw",
    "nn.dense": "dense_nopack",
    "nn.batch_matmul": "batch_matmul",
    # the CPU int8 kernels of qnn chains (relay/qnn/cpu_int8.py, autotvm/templates/int8_cpu.py)
    "nn.contrib_conv2d_int8": "conv2d_int8",
    "nn.contrib_conv2d_int8_mixed": "conv2d_int8_mixed",
    "nn.contrib_depthwise_conv2d_int8": "depthwise_conv2d_int8",
    "nn.contrib_dense_int8": "dense_int8",
    "nn.contrib_batch_matmul_int8": "batch_matmul_int8",
}


def _tensor(ty) -> tuple:
    return ("TENSOR", tuple(int(d) for d in ty.shape), str(ty.dtype))


def template_of(op_name: str, attrs, arg_types, family: str) -> str | None:
    """The tunable template for one call (``conv2d_nhwc.arm_cpu``), or None."""
    base = TEMPLATES.get(op_name)
    if base is None:
        return None
    if op_name == "nn.conv2d" and family == "adreno" and _blocked(attrs):
        # adreno's NCHW4c convs (opt_level 3) run their own schedule: templates of their own.
        return "depthwise_conv2d_NCHW4c.adreno" if int(attrs.groups) > 1 else "conv2d_NCHW4c.adreno"
    if op_name == "nn.conv2d":
        # A channel-blocked conv (AlterOpLayout's NCHW16c) is the same task as its NCHW original.
        layouts = (layout.primal(str(attrs.data_layout)), str(attrs.kernel_layout))
        # The templates take the kernel in the layout topi's computes read; other pairs stay untuned.
        base = {("NCHW", "OIHW"): "conv2d_nchw", ("NHWC", "HWIO"): "conv2d_nhwc"}.get(layouts)
        channels = int(arg_types[0].shape[1 if layouts[0] == "NCHW" else 3]) * \
            max(1, layout.channel_block(str(attrs.data_layout)))
        groups = int(attrs.groups)
        if base == "conv2d_nchw" and groups > 1 and groups == channels:
            base = "depthwise_conv2d_nchw"
        elif base is not None and groups > 1:
            return None  # grouped (not depthwise) convolutions have no tunable schedule
    elif op_name == "nn.batch_matmul" and attrs.get("transpose_a", False):
        return None  # topi.x86 runs the generic compute for it: nothing to tune
    elif family in ("gpu", "mali", "adreno") and _few_rows(arg_types[0]):
        return None  # a GPU runs it as a per-row (GEMV) kernel that has no knobs: nothing to tune
    return None if base is None else f"{base}.{family}"


def _few_rows(data_type) -> bool:
    """A dense/batch_matmul whose rows are so few that topi.gpu and topi.mali schedule it
    without a config (one work-item or one warp per output row): a tuned config never changes it."""
    from kiln.topi.gpu.dense import SMALL_M

    return int(data_type.shape[-2]) < SMALL_M


def _blocked(attrs) -> int:
    """The output channel block of a conv (0: plain), or its input's when only that is blocked."""
    return layout.channel_block(str(attrs.out_layout or attrs.data_layout)) or \
        layout.channel_block(str(attrs.data_layout))


def workload_of(op_name: str, attrs, arg_types, family: str):
    """The autotvm workload of one call, or None for ops that are not tunable.

    ``(template, *input tensors, *attributes)``, the attributes in the order the template's
    compute takes them (kiln/autotvm/templates/topi_cpu.py)."""
    template = template_of(op_name, attrs, arg_types, family)
    if template is None:
        return None
    tensors = tuple(_tensor(t) for t in arg_types)
    if template.endswith("NCHW4c.adreno"):  # the shapes the build lowers; the output's block
        return (template, *tensors, tuple(int(v) for v in attrs.strides), tuple(int(v) for v in attrs.padding),
                tuple(int(v) for v in attrs.dilation), int(attrs.groups),
                str(attrs.get("out_dtype", "") or arg_types[0].dtype),
                layout.channel_block(str(attrs.out_layout or attrs.data_layout)))
    if op_name.startswith("nn.contrib_") and op_name.endswith(("_int8", "_int8_mixed")):  # attrs as (name, value) pairs
        from ..qnn.cpu_int8 import workload_attrs
        return (template, *tensors, *workload_attrs(op_name, attrs))
    if op_name == "nn.conv2d" and layout.channel_block(str(attrs.data_layout)):
        data = arg_types[0]
        nchw = layout.blocked_shape(tuple(int(d) for d in data.shape), str(attrs.data_layout), "NCHW")
        tensors = (("TENSOR", nchw, str(data.dtype)),) + tensors[1:]
    out_dtype = str(attrs.get("out_dtype", "") or arg_types[0].dtype)
    if op_name == "nn.conv2d":
        extra = (tuple(int(v) for v in attrs.strides), tuple(int(v) for v in attrs.padding),
                 tuple(int(v) for v in attrs.dilation), int(attrs.groups), out_dtype)
    elif op_name == "nn.dense":
        extra = (out_dtype,)
    else:
        extra = (out_dtype, bool(attrs.get("transpose_b", True)))
    return (template, *tensors, *extra)


def select_config(op_name: str, workload, target):
    """The config to build ``op_name`` with for ``workload`` on ``target``; None = topi default."""
    if workload is None:
        return None
    provider = _provider.get()
    if provider is not None:
        return provider(op_name, workload, target)
    return tuned_config(workload, target)


def current_provider() -> Callable | None:
    """The provider of the innermost ``use_config_provider`` block, or None."""
    return _provider.get()


@contextlib.contextmanager
def use_config_provider(provider: Callable):
    """Within the block, ``select_config`` answers ``provider(op_name, workload, target)``."""
    token = _provider.set(provider)
    try:
        yield
    finally:
        _provider.reset(token)
