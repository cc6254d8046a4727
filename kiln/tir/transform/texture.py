"""Texture-scoped tensors: which dimensions of a 5-D tensor become an image's width and height.

A tensor in scope ``global.texture``, ``global.texture-nhwc`` or ``global.texture-weight`` has 5
dimensions, the innermost of extent 4 (NCHW4c, NHWC4c, OIHW4o / HWIO4o); it lives in an RGBA
image whose texels hold that innermost dimension. The first dimensions fold into the image's
height, the rest into its width (row-major, so the image's bytes are the tensor's bytes):

    global.texture         N*C*H  x  W        (NCHW4c: one image row per (n, c, h))
    global.texture-nhwc    N*H    x  W*C      (NHWC4c)
    global.texture-weight  O      x  I*H*W    (OIHW4o: one row per output-channel block)

A flat element index ``e`` of such a tensor is texel ``e // 4`` (lane ``e % 4``), at
``x = texel % width``, ``y = texel // width``; the OpenCL printer (codegen/opencl_texture.py)
reads and writes texels that way. When the preferred split is wider or taller than
``limit`` texels another split is taken; when none fits the build fails naming the tensor.
The device's real limit is checked again when the image is created (runtime/devices/opencl.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.functor import Visitor

SCOPES = {"global.texture": 3, "global.texture-nhwc": 2, "global.texture-weight": 1}
# Every OpenCL device with image support offers at least 8192 x 8192 2-D images (OpenCL 1.2
# full profile); the target may say more or less with -texture_spatial_limit=N.
DEFAULT_LIMIT = 8192


def is_texture(scope: str) -> bool:
    return scope in SCOPES


@dataclass(frozen=True)
class TextureLayout:
    """An RGBA image of ``width`` x ``height`` texels holding a 5-D tensor (see module doc)."""

    width: int
    height: int
    dtype: str
    split: int  # how many leading dimensions fold into the height

    def as_dict(self) -> dict:
        return {"width": self.width, "height": self.height, "dtype": self.dtype, "split": self.split}


def texture_layout(shape, dtype: str, scope: str, name: str, limit: int = DEFAULT_LIMIT) -> TextureLayout:
    """The image holding a tensor of ``shape`` in texture ``scope``; CompileError when impossible."""
    if scope not in SCOPES:
        raise CompileError(f"{name}: {scope!r} is not a texture scope ({', '.join(SCOPES)})")
    dims = []
    for d in shape:
        if not isinstance(d, (int, E.IntImm)):
            raise CompileError(f"{name}: a texture tensor needs a constant shape, got {tuple(shape)}; "
                               "use scope 'global' for tensors of symbolic shape")
        dims.append(int(d.value if isinstance(d, E.IntImm) else d))
    if len(dims) != 5 or dims[4] != 4:
        raise CompileError(f"{name}: scope {scope} holds 5-D tensors whose innermost dimension is 4 "
                           f"(NCHW4c, NHWC4c, OIHW4o), got shape {tuple(dims)}; pack the channels by 4 "
                           "first (topi.adreno / layout_transform) or use scope 'global'")
    if str(dtype) not in ("float32", "float16"):
        raise CompileError(f"{name}: textures hold float32 or float16 (RGBA CL_FLOAT / CL_HALF_FLOAT), "
                           f"got {dtype}; use scope 'global'")
    preferred = SCOPES[scope]
    for split in [preferred] + [k for k in (3, 2, 1, 4) if k != preferred]:
        height = _prod(dims[:split])
        width = _prod(dims[split:4])
        if width <= limit and height <= limit:
            return TextureLayout(width, height, str(dtype), split)
    raise CompileError(f"{name}: shape {tuple(dims)} fits no {limit} x {limit} image however its "
                       "dimensions are folded; keep it in scope 'global' (a buffer) or split the tensor")


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def note_textures(func):
    """Pipeline pass (before StorageFlatten, which forgets shapes): record each texture-scoped
    buffer's shape in ``func.attrs["texture_shapes"]`` ({data Var: (shape, dtype, scope, name)})."""
    from dataclasses import replace

    found = {}
    for buf in func.buffer_map.values():
        if is_texture(buf.scope):
            found[buf.data] = (tuple(buf.shape), str(buf.dtype), buf.scope, buf.name)

    class _Allocs(Visitor):
        def visit_Allocate(self, op):
            if is_texture(op.buffer.scope):
                found[op.buffer.data] = (tuple(op.buffer.shape), str(op.buffer.dtype), op.buffer.scope, op.buffer.name)
            self.generic_visit(op)

    _Allocs().visit(func.body)
    if not found:
        return func
    return replace(func, attrs={**func.attrs, "texture_shapes": found})


def texture_layouts(func, limit: int = DEFAULT_LIMIT) -> dict:
    """{buffer data Var: TextureLayout} of the texture-scoped buffers note_textures recorded."""
    return {key: texture_layout(shape, dtype, scope, name, limit)
            for key, (shape, dtype, scope, name) in func.attrs.get("texture_shapes", {}).items()}


def texel_coords(index: E.PrimExpr, width: int):
    """(x, y, lane) of flat element ``index`` in an image ``width`` texels wide."""
    from kiln.tir.simplify import simplify

    dt = index.dtype
    four, w = E.const(4, dt), E.const(width, dt)
    texel = E.FloorDiv(index, four, dt)
    return (simplify(E.FloorMod(texel, w, dt)), simplify(E.FloorDiv(texel, w, dt)),
            simplify(E.FloorMod(index, four, dt)))


def plan_textures(func, caps):
    """GPU pipeline step tir.TextureLayouts: the image layout of each texture-scoped tensor in
    ``func.attrs["texture"]``, sized by the target's ``texture_spatial_limit``; tir.SplitHostDevice
    hands each kernel the layouts of its parameters (the printer's images), and the host keeps
    them all (device_workspace allocates images for them)."""
    from dataclasses import replace

    limit = caps.target.attrs.get("texture_spatial_limit") or DEFAULT_LIMIT if caps is not None else DEFAULT_LIMIT
    textures = texture_layouts(func, limit)
    return replace(func, attrs={**func.attrs, "texture": textures}) if textures else func
