"""``relay.transform``: graph passes, usable alone or in ``tvm.transform.Sequential``.

Each pass factory (``FoldConstant()``, ``FuseOps(fuse_opt_level=2)``...) returns a Pass that
types its result, so passes can be chained in any order. The pass bodies are plain
functions in this folder (``fold_constant(expr)``, ``fuse_ops(func)``...).
"""

from __future__ import annotations

from kiln.transform import FunctionPass, ModulePass, PassContext, PassInfo, Sequential

from ..expr import Function
from .alter_layout import alter_op_layout
from .annotate_target import annotate_target
from .bind import bind_params_by_name
from .convert_layout import convert_layout
from .dead_code import dead_code_elimination
from .fake_quantization_to_integer import fake_quantization_to_integer
from .fold_constant import fold_constant
from .fold_scale_axis import fold_scale_axis
from .fuse_expand_depthwise import fuse_expand_depthwise
from .fuse_ops import fuse_ops, partition
from .infer_type import infer, infer_type
from .merge_compiler_regions import merge_compiler_regions
from .merge_composite import merge_composite
from .partition_graph import partition_graph
from .mixed_precision import to_mixed_precision
from .simplify_inference import simplify_inference


def _function_pass(fn, name: str, opt_level: int, required=()):
    """Apply ``fn(func) -> func`` to each non-primitive Function and type the result."""
    def run(func, mod, ctx):
        return infer(fn(infer(func)))
    return FunctionPass(run, PassInfo(opt_level, name, tuple(required)))


def InferType():  # noqa: N802 - seed names follow TVM
    """Give every node of every relay function its type (``expr.checked_type``)."""
    return ModulePass(lambda mod, ctx: infer_type(mod), PassInfo(0, "InferType"))


def FoldConstant():  # noqa: N802
    """Evaluate constant subgraphs with the numpy reference executor."""
    return _function_pass(fold_constant, "FoldConstant", 2)


def FakeQuantizationToInteger():  # noqa: N802
    """QDQ regions (dequantize -> float ops -> quantize) to qnn ops (fake_quantization_to_integer.py)."""
    return _function_pass(fake_quantization_to_integer, "FakeQuantizationToInteger", 0)


def SimplifyInference():  # noqa: N802
    """batch_norm -> per-channel multiply/add; dropout -> identity."""
    return _function_pass(simplify_inference, "SimplifyInference", 0)


def FoldScaleAxis():  # noqa: N802
    """Fold per-channel constant scales that follow conv2d/dense into their weights."""
    return _function_pass(fold_scale_axis, "FoldScaleAxis", 3)


def DeadCodeElimination(inline_once: bool = False):  # noqa: N802
    """Drop unused let bindings."""
    return _function_pass(dead_code_elimination, "DeadCodeElimination", 1)


def ConvertLayout(desired_layouts: dict):  # noqa: N802
    """Run conv2d in the requested layout, e.g. ``{"nn.conv2d": ["NHWC", "default"]}``."""
    return _function_pass(lambda f: convert_layout(f, desired_layouts), "ConvertLayout", 3)


def AlterOpLayout():  # noqa: N802
    """On an x86 target (the enclosing ``with tvm.target.Target(...)``; relay.build sets it),
    run convolutions, and the pooling and elementwise ops between them, on channel-blocked
    NCHW16c data (see alter_layout.py). Other targets, or no target: the function unchanged."""
    def run(func, mod, ctx):
        from kiln.target import Target

        from ..backend.family import target_family

        target = Target.current(allow_none=True)
        if target is not None and target_family(target) == "adreno":  # NCHW4c on textures
            from ..backend import adreno_textures

            return infer(adreno_textures.alter_layout(infer(func), target))
        if target is None or target.kind.name != "llvm" or target_family(target) != "x86":
            return func
        return infer(alter_op_layout(infer(func), target))
    return FunctionPass(run, PassInfo(3, "AlterOpLayout"))


def NarrowRequantize():  # noqa: N802
    """On a Cortex-M target (``-mcpu=cortex-m*``), each canonical int64 requantize that gives the same
    integers in 32-bit arithmetic is written so (narrow_requantize.py). Other targets: unchanged."""
    def run(func, mod, ctx):
        from kiln.target import Target

        from .narrow_requantize import narrow_requantize
        target = Target.current(allow_none=True)
        if target is None or not target.cortex_m:
            return func
        return infer(narrow_requantize(infer(func)))
    return FunctionPass(run, PassInfo(2, "NarrowRequantize"))


def FuseExpandDepthwise():  # noqa: N802
    """On an x86 target, run each 1x1 conv2d + bias + clip followed by a depthwise conv2d (after
    AlterOpLayout: blocked layouts, constant weights) as one op that keeps the expanded tensor in
    cache (fuse_expand_depthwise.py). Other targets, or no target: the function unchanged."""
    def run(func, mod, ctx):
        from kiln.target import Target

        from ..backend.family import target_family
        target = Target.current(allow_none=True)
        if target is None or target.kind.name != "llvm" or target_family(target) != "x86":
            return func
        return infer(fuse_expand_depthwise(infer(func)))
    return FunctionPass(run, PassInfo(3, "FuseExpandDepthwise"))


def FuseConvEpilogue():  # noqa: N802
    """On an x86 target, each bfloat16/float16 conv2d summing in float32 + cast + bias [+ residual]
    [+ relu] (ToMixedPrecision's, after AlterOpLayout) computes its epilogue in float32 and
    rounds once: with AMX-BF16 as one op whose AMX kernel applies it to its tiles in cache, elsewhere
    by moving the cast after it, so FuseOps puts it in the conv's tile store (fuse_conv_epilogue.py).
    Other targets, or no target: the function unchanged."""
    def run(func, mod, ctx):
        from kiln.target import Target
        from kiln.target.cpu_facts import cpu_facts

        from ..backend.family import target_family
        from .fuse_conv_epilogue import fuse_conv_epilogue
        target = Target.current(allow_none=True)
        if target is None or target.kind.name != "llvm" or target_family(target) != "x86":
            return func
        return infer(fuse_conv_epilogue(infer(func), amx="amx-bf16" in cpu_facts(target).features))
    return FunctionPass(run, PassInfo(3, "FuseConvEpilogue"))


def FuseAttention():  # noqa: N802
    """On an x86 target (and a CUDA one with PassContext config ``relay.FuseAttention.cuda``), each
    batch_matmul -> scale -> mask -> softmax -> batch_matmul chain as one nn.attention op that keeps
    a head's scores in cache (fuse_attention.py; on CUDA in shared memory, topi/cuda/attention.py).
    Other targets, or no target: the function unchanged."""
    def run(func, mod, ctx):
        from kiln.target import Target

        from ..backend.family import target_family
        from .fuse_attention import fuse_attention

        target = Target.current(allow_none=True)
        # cuda: opt-in (topi/cuda/attention.py: right, but slower than the chain on the H200 so far)
        cuda = target is not None and target.kind.name == "cuda" and ctx.config.get("relay.FuseAttention.cuda", False)
        if target is None or not (target.kind.name == "llvm" and target_family(target) == "x86" or cuda):
            return func
        rows = not cuda and bool(ctx.config.get("relay.FuseAttention.rows", True))  # x86's compute only
        return infer(fuse_attention(infer(func), rows=rows))
    return FunctionPass(run, PassInfo(3, "FuseAttention"))


def FuseDenseEpilogue():  # noqa: N802
    """On an x86 or CUDA target, GELU graphs as nn.gelu and reshapes moved below a dense layer's
    bias and activation, so FuseOps puts them in the dense kernel (fuse_dense_epilogue.py; on CUDA
    BERT-base float32 went from 303 to 279 kernels). Other targets, or no target: the function
    unchanged."""
    def run(func, mod, ctx):
        from kiln.target import Target

        from ..backend.family import target_family
        from .fuse_dense_epilogue import fuse_dense_epilogue

        target = Target.current(allow_none=True)
        cuda = target is not None and target.kind.name == "cuda"  # its dense schedules fuse epilogues too
        if target is None or not (cuda or target.kind.name == "llvm" and target_family(target) == "x86"):
            return func
        return fuse_dense_epilogue(infer(func))
    return FunctionPass(run, PassInfo(3, "FuseDenseEpilogue"))


def FlattenRows():  # noqa: N802
    """On a CUDA target, and on an x86 one for a transformer (_x86_rows), layer norms and softmaxes
    on the 2-D rows the dense layers read, casts next to what they convert (flatten_rows.py): no
    reshape kernels between them, and the residual adds join the dense kernels. Other targets:
    the function unchanged."""
    def run(func, mod, ctx):
        from kiln.target import Target

        from .flatten_rows import flatten_rows

        target = Target.current(allow_none=True)
        kind = target.kind.name if target is not None else None
        if not (kind == "cuda" or kind == "llvm" and _x86_rows(target, func)):
            return func
        return flatten_rows(infer(func))
    return FunctionPass(run, PassInfo(3, "FlattenRows"))


def _x86_rows(target, func) -> bool:
    """FlattenRows on an x86 CPU: for a transformer (fused attention or batched products), where
    the reshapes it removes were kernels of their own and the residual adds joined no dense
    kernel (ViT-B/16: 207 -> 160 kernels). Not for CNNs (ConvNeXt's layer norms): their graphs stay."""
    from ..analysis import op_calls
    from ..backend.family import target_family

    return target_family(target) == "x86" and bool(op_calls(func, ["nn.attention", "nn.batch_matmul"]))


def FuseOps(fuse_opt_level: int = -1):  # noqa: N802
    """Group ops into primitive functions (see fuse_ops.py for the rule).

    ``fuse_opt_level=-1`` follows the PassContext: 0 at opt_level 0, else 1.
    """
    def run(func, mod, ctx):
        level = fuse_opt_level if fuse_opt_level >= 0 else (0 if ctx.opt_level == 0 else 1)
        depth = int(ctx.config.get("relay.FuseOps.max_depth", 256))
        return fuse_ops(infer(func), level, depth)
    return FunctionPass(run, PassInfo(0, "FuseOps"))


def ToMixedPrecision(mixed_precision_type: str = "float16", missing_op_mode: int = 1,  # noqa: N802
                     accumulation_dtype: str | None = None, overrides: dict | None = None):
    """Run conv2d/dense/batch_matmul (and the cheap ops around them) in ``mixed_precision_type``
    (float16 or bfloat16), accumulating in ``accumulation_dtype`` (float16 or float32; bfloat16:
    float32); graph inputs and
    outputs keep their dtype. ``overrides``: ``{op_name: "always" | "follow" | "never"}``
    (see mixed_precision.py for the lists). ``missing_op_mode`` is TVM's knob for ops in no
    list; kiln always keeps those in float32."""
    del missing_op_mode
    return _function_pass(lambda f: to_mixed_precision(f, mixed_precision_type, accumulation_dtype, overrides),
                          "ToMixedPrecision", 0)


def BindParams(params: dict):  # noqa: N802
    """Replace ``main``'s params named in ``params`` by constants."""
    def run(mod, ctx):
        return mod.with_functions({k: (bind_params_by_name(f, params) if k == "main" else f) for k, f in mod.items()})
    return ModulePass(run, PassInfo(0, "BindParams"))


def MergeComposite(pattern_table):  # noqa: N802
    """Wrap each match of ``(name, pattern[, check])`` in a function with ``Composite=name``
    (merge_composite.py); entries are tried in table order."""
    return _function_pass(lambda f: merge_composite(f, pattern_table), "MergeComposite", 0)


def AnnotateTarget(targets, include_non_call_ops: bool = True):  # noqa: N802
    """Mark the ops (and composites) each external compiler in ``targets`` supports
    (annotate_target.py)."""
    del include_non_call_ops
    return _function_pass(lambda f: annotate_target(f, targets), "AnnotateTarget", 0)


def MergeCompilerRegions():  # noqa: N802
    """Join neighbouring regions of one compiler where that makes no cycle."""
    return _function_pass(merge_compiler_regions, "MergeCompilerRegions", 0)


def PartitionGraph(mod_name: str = "default"):  # noqa: N802
    """Outline each region into a function ``tvmgen_<mod_name>_<compiler>_main_<n>`` with
    ``Compiler=<compiler>``, called from main and added to the module (partition_graph.py)."""
    def run(mod, ctx):
        start = sum(1 for name in mod if name.startswith(f"tvmgen_{mod_name}_"))
        main, functions = partition_graph(infer(mod["main"]), mod_name, start)
        out = {name: f for name, f in mod.items()}
        out["main"] = infer(main)
        for name, f in functions.items():
            out[name] = infer(f)
        return mod.with_functions(out)
    return ModulePass(run, PassInfo(0, "PartitionGraph"))


def optimize_sequence() -> Sequential:
    """The passes relay.build runs before lowering, in order (each gated by its opt level)."""
    from ..qnn.transform import CanonicalizeOps, Legalize  # quantized models: docs/quantization.md
    return Sequential([FakeQuantizationToInteger(), Legalize(), CanonicalizeOps(), SimplifyInference(), FoldConstant(), FoldScaleAxis(), FoldConstant(), NarrowRequantize(), AlterOpLayout(),
                       DeadCodeElimination(), InferType(), FuseExpandDepthwise(), FuseConvEpilogue(), FuseAttention(), FuseDenseEpilogue(), FlattenRows(), FuseOps(),
                       InferType()], name="relay.optimize")


__all__ = ["InferType", "AlterOpLayout", "NarrowRequantize", "FuseExpandDepthwise", "FuseConvEpilogue", "FuseAttention", "FlattenRows", "FuseDenseEpilogue", "fuse_expand_depthwise", "alter_op_layout", "FoldConstant", "SimplifyInference", "FoldScaleAxis", "DeadCodeElimination",
           "ConvertLayout", "FuseOps", "BindParams", "Sequential", "PassContext", "optimize_sequence",
           "bind_params_by_name", "fold_constant", "simplify_inference", "fold_scale_axis", "fuse_ops", "partition",
           "convert_layout", "dead_code_elimination", "infer", "infer_type", "ToMixedPrecision", "to_mixed_precision",
           "MergeComposite", "AnnotateTarget", "MergeCompilerRegions", "PartitionGraph", "merge_composite",
           "annotate_target", "merge_compiler_regions", "partition_graph"]
