"""Adreno graphs on textures: NCHW4c layouts, OIHW4o weights, and which graph entries are images.

For targets with the key ``adreno`` (docs/adreno.md, "Graph entries in textures"):

- ``alter_layout`` runs AlterOpLayout's rewriter (relay/transform/alter_layout.py) with a block
  of 4: convolutions whose output channels divide by 4 write NCHW4c, and depthwise convs,
  pools, elementwise ops and channel concatenations between them stay in NCHW4c. An RGBA
  texel holds one block. There is no Winograd rule (that one is x86's).
- ``prepack`` stores the constant OIHW weight of such a convolution as OIHW4o at build time
  (``global.texture-weight``: one image row per block of 4 output channels).
- ``plan_scopes`` picks the graph entries that live in images: a kernel output that is 5-D with
  innermost 4, float32 or float16, fits ``-texture_spatial_limit`` in its scope's preferred
  fold, is written by a schedule that writes whole texels (topi.adreno.schedule_nchw4c), and
  is read only by other kernels (graph outputs stay NCHW buffers).
"""

from __future__ import annotations

import numpy as np

from ..expr import Call, Constant, Function, TupleGetItem
from ..op import nn as nn_ops
from ..op.registry import OpDef
from ..ty import TensorType

TEXTURE = "global.texture"
WEIGHT = "global.texture-weight"
BLOCK = 4
# Anchor schedules whose adreno version writes NCHW4c outputs a whole texel at a time.
_TEXEL_WRITERS = {"conv2d_NCHWc", "conv2d_winograd_NCHWc", "depthwise_conv2d_NCHWc", "pool", "injective"}


def enabled() -> bool:
    from kiln.topi.adreno.texture import textures_enabled

    return textures_enabled()


def alter_layout(func, target):
    """``func`` with convolutions (and the ops between them) on NCHW4c. NHWC convolutions
    (Keras, TFLite models) are first converted to NCHW, weights transposed at build time, as
    TVM's Adreno flow converts them: the texture path is NCHW4c, and the graph's inputs and
    outputs keep the model's own layout."""
    from ..transform.alter_layout import _Rewriter, _shape
    from ..transform.convert_layout import convert_layout
    from ..transform.infer_type import infer
    from ..visitor import post_order

    if any(isinstance(n, Call) and n.op is nn_ops.CONV2D and str(n.attrs.data_layout) == "NHWC"
           for n in post_order(func.body)):
        func = infer(convert_layout(func, {"nn.conv2d": ["NCHW", "default"]}))

    def conv_block(call) -> int:
        return BLOCK if _shape(call)[1] % BLOCK == 0 and str(call.checked_type.dtype).startswith("float") else 0

    return _Rewriter(conv_block, lambda c: BLOCK if c % BLOCK == 0 else 0, winograd=False).run(func)


def prepack(op_name: str, attrs, types):
    """OIHW -> OIHW4o for the constant weight of a blocked conv (groups 1 or depthwise)."""
    from kiln.relay.op import layout

    from .op_impl import WeightTransform

    if op_name != "nn.conv2d" or attrs.kernel_layout != "OIHW":
        return None
    if not (layout.channel_block(attrs.data_layout) or layout.channel_block(attrs.out_layout or attrs.data_layout)):
        return None
    o, i, kh, kw = (int(d) for d in types[1].shape)
    if o % BLOCK:
        return None
    return WeightTransform(1, (o // BLOCK, i, kh, kw, BLOCK), pack_oihw4o, ("adreno_oihw4o",))


def pack_oihw4o(w: np.ndarray) -> np.ndarray:
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // BLOCK, BLOCK, i, kh, kw).transpose(0, 2, 3, 4, 1))


def fits(shape, dtype: str, scope: str) -> bool:
    """Whether a tensor may live in ``scope``: 5-D, innermost 4, float, its scope's preferred fold
    within the target's -texture_spatial_limit (runtimes allocate exactly that fold)."""
    from kiln.target import Target
    from kiln.tir.transform.texture import DEFAULT_LIMIT, SCOPES

    if len(shape) != 5 or int(shape[4]) != 4 or str(dtype) not in ("float32", "float16"):
        return False
    target = Target.current(allow_none=True)
    limit = (getattr(target, "attrs", None) or {}).get("texture_spatial_limit") or DEFAULT_LIMIT
    split = SCOPES[scope]
    dims = [int(d) for d in shape]
    return int(np.prod(dims[:split])) <= limit and int(np.prod(dims[split:4])) <= limit


def weight_scope(transform, dtype: str) -> str:
    if transform is not None and transform.key == ("adreno_oihw4o",) and enabled() \
            and fits(transform.shape, dtype, WEIGHT):
        return WEIGHT
    return "global"


def _writes_texels(func: Function) -> bool:
    from .op_impl import anchor_of, schedule_key
    from ..visitor import post_order

    calls = [n for n in post_order(func.body) if isinstance(n, Call) and isinstance(n.op, OpDef)]
    if not calls:
        return False
    anchor = anchor_of(calls)
    return schedule_key(anchor.op.name, anchor.attrs) in _TEXEL_WRITERS


def plan_scopes(main: Function) -> dict:
    """{call of a primitive function in ``main``: "global.texture"} for the calls whose single
    output lives in an image (see the module doc); empty when textures are disabled."""
    from ..visitor import children, post_order

    if not enabled():
        return {}
    order = post_order(main.body)
    users: dict = {}
    for node in order:
        for kid in children(node):
            users.setdefault(kid, []).append(node)
    out: dict = {}
    for node in order:
        if not (isinstance(node, Call) and isinstance(node.op, Function) and node.op.attrs
                and node.op.attrs.get("Primitive") and not node.op.attrs.get("Compiler")):
            continue
        ty = node.checked_type
        if node is main.body or not isinstance(ty, TensorType) or not fits(ty.shape, str(ty.dtype), TEXTURE):
            continue
        readers = users.get(node, [])
        if not readers or not all(_kernel_call(u) and node in u.args for u in readers):
            continue
        if _writes_texels(node.op):
            out[node] = TEXTURE
    return out


def _kernel_call(node) -> bool:
    return (isinstance(node, Call) and isinstance(node.op, Function) and bool(node.op.attrs)
            and bool(node.op.attrs.get("Primitive")) and not node.op.attrs.get("Compiler"))


def arg_scope(arg, scopes: dict) -> str:
    if isinstance(arg, (Constant, TupleGetItem)):
        return "global"
    return scopes.get(arg, "global")
