"""Graph transforms tvmc applies before compiling: layout conversion and mixed precision.

>>> from kiln.driver.tvmc.transform import apply_graph_transforms
>>> mod = apply_graph_transforms(mod, {"mixed_precision": True,
...                                    "mixed_precision_ops": ["nn.conv2d", "nn.dense"],
...                                    "mixed_precision_calculation_type": "float16",
...                                    "mixed_precision_acc_type": "float32"})

``mixed_precision_ops`` are the ops always converted (ToMixedPrecision's ALWAYS list); the
built-in ALWAYS ops left out of it only follow their inputs. The calculation type is the
storage and arithmetic type of the converted ops (float16 or bfloat16), the accumulation type
float16 or float32 (a float32 accumulator, cast to the calculation type after the op); bfloat16
accumulates in float32 only.
"""

from __future__ import annotations

from .common import TVMCException

DEFAULT_MIXED_PRECISION_OPS = ("nn.conv2d", "nn.dense")
KEYS = ("mixed_precision", "mixed_precision_ops", "mixed_precision_calculation_type",
        "mixed_precision_acc_type", "desired_layout", "desired_layout_ops")


def mixed_precision_overrides(ops) -> dict:
    """ToMixedPrecision overrides that make exactly ``ops`` the ALWAYS list."""
    from kiln.relay import op as relay_op
    from kiln.relay.transform.mixed_precision import ALWAYS, ALWAYS_OPS, FOLLOW

    known = set(relay_op.list_ops())
    for name in ops:
        if name not in known:
            raise TVMCException(f"--mixed-precision-ops: {name!r} is not a relay op; use names such as "
                                "nn.conv2d nn.dense nn.batch_matmul (relay.op.list_ops() lists them)")
    overrides = {name: FOLLOW for name in ALWAYS_OPS if name not in ops}
    overrides.update({name: ALWAYS for name in ops})
    return overrides


def apply_graph_transforms(mod, args: dict, params: dict | None = None):
    """``mod`` with the transforms ``args`` asks for (keys: KEYS). ``params`` are bound first.
    Before a float16 conversion, batch norms are folded into the constant weights (in float32),
    so each weight is rounded to float16 once and no scale is left between a conv and its cast."""
    from kiln import transform as pass_infra
    from kiln.relay import transform

    unknown = set(args or {}) - set(KEYS)
    if unknown:
        raise TVMCException(f"apply_graph_transforms: unknown option(s) {sorted(unknown)}; it takes {', '.join(KEYS)}")
    args = args or {}
    if params:
        mod = transform.BindParams(params)(mod)
    if params or args.get("mixed_precision"):
        with pass_infra.PassContext(opt_level=3):
            mod = pass_infra.Sequential([transform.SimplifyInference(), transform.FoldConstant(),
                                         transform.FoldScaleAxis(), transform.FoldConstant()])(transform.InferType()(mod))
    layout = args.get("desired_layout")
    if layout:
        if layout not in ("NCHW", "NHWC"):
            raise TVMCException(f"--desired-layout {layout!r}: use NCHW or NHWC")
        ops = args.get("desired_layout_ops") or ["nn.conv2d"]
        with pass_infra.PassContext(opt_level=3):
            mod = transform.ConvertLayout({name: [layout, "default"] for name in ops})(mod)
    if args.get("mixed_precision"):
        calc = args.get("mixed_precision_calculation_type") or "float16"
        acc = args.get("mixed_precision_acc_type") or "float32"
        if calc not in ("float16", "bfloat16"):
            raise TVMCException(f"--mixed-precision-calculation-type {calc!r}: kiln converts to float16 or bfloat16")
        if acc not in ("float16", "float32") or (calc == "bfloat16" and acc != "float32"):
            raise TVMCException(f"--mixed-precision-acc-type {acc!r}: use float32"
                                + ("" if calc == "bfloat16" else " or float16")
                                + f" with --mixed-precision-calculation-type {calc}")
        ops = list(args.get("mixed_precision_ops") or DEFAULT_MIXED_PRECISION_OPS)
        mod = transform.ToMixedPrecision(calc, accumulation_dtype=acc,
                                         overrides=mixed_precision_overrides(ops))(mod)
    return mod


def add_transform_arguments(parser) -> None:
    parser.add_argument("--desired-layout", choices=["NCHW", "NHWC"],
                        help="convert convolutions to this data layout before compiling")
    parser.add_argument("--mixed-precision", action="store_true",
                        help="run the heavy ops (and the cheap ops between them) in float16 or bfloat16; "
                             "inputs and outputs stay float32")
    parser.add_argument("--mixed-precision-ops", nargs="+", metavar="OP", default=None,
                        help="ops always converted (default: nn.conv2d nn.dense)")
    parser.add_argument("--mixed-precision-calculation-type", default="float16", choices=["float16", "bfloat16"],
                        help="the low-precision type (float16, or bfloat16: float32's range, 8 significant "
                             "bits; AVX512-BF16/AMX CPUs multiply it natively)")
    parser.add_argument("--mixed-precision-acc-type", default="float32", choices=["float16", "float32"],
                        help="accumulation type of the converted ops: float16, or float32 with a cast to "
                             "the calculation type after each op (default: float32; bfloat16 needs float32)")


def transform_args(args) -> dict:
    """apply_graph_transforms options from an argparse namespace."""
    return {"mixed_precision": args.mixed_precision, "mixed_precision_ops": args.mixed_precision_ops,
            "mixed_precision_calculation_type": args.mixed_precision_calculation_type,
            "mixed_precision_acc_type": args.mixed_precision_acc_type, "desired_layout": args.desired_layout}
