"""OpenCL kernels that read and write texture-scoped tensors as ``image2d_t``.

A kernel's buffer of scope ``global.texture*`` (layout in kiln/tir/transform/texture.py) is
a ``__read_only image2d_t`` parameter when the kernel only reads it and ``__write_only
image2d_t`` when it only writes it (OpenCL 1.2 has no read-write images). Reads go through
``read_imagef`` with a nearest, unnormalized, clamped sampler and give a whole RGBA texel (a
4-lane load) or one lane of it; writes are whole texels (``write_imagef``), so a stage that
writes a texture must vectorize its innermost axis of 4. ``read_imagef`` / ``write_imagef``
convert CL_HALF_FLOAT texels to and from float, so float16 textures need no cl_khr_fp16 when
the kernel computes in float32 (a cast from or to float16 around the access is folded away).
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import expr as E
from ..ir.dtype import DType
from ..ir.functor import Visitor
from ..tir.lanes import index_lane
from .c_family_expr import _contiguous, _multiple_of
from .opencl_half import HalfStorage

SAMPLER = ("__constant sampler_t kiln_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | "
           "CLK_FILTER_NEAREST;")
LANE_HELPER = ("static inline float kiln_lane4(float4 v, int k) "
               "{ return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w)); }")


# float -> the nearest half (ties to even), still as float: bit rounding of the mantissa to 10
# bits for normal halves, multiples of 2^-24 (rint: ties to even) below 2^-14 (subnormal halves).
HALF_RTE_HELPER = (
    "static inline float4 kiln_half_rte4(float4 v) { "
    "uint4 b = as_uint4(v); "
    "float4 n = as_float4((b + (uint4)(0xFFFu) + ((b >> 13) & (uint4)(1u))) & (uint4)(0xFFFFE000u)); "
    "float4 sub = rint(v * 16777216.0f) * 5.9604644775390625e-8f; "
    "return select(n, sub, isless(fabs(v), (float4)(6.103515625e-05f))); }")


class TextureImages(HalfStorage):
    """Mixed into OpenCLPrinter (codegen/opencl.py ``TexturePrinter``): prints texture-scoped
    buffers (kernel attr ``texture``) as images, and float16 as half in memory / float in
    registers when the kernel has attr ``half_storage``."""

    def print_kernel(self, func) -> str:
        self.half_storage = bool(func.attrs.get("half_storage"))
        self.textures = func.attrs.get("texture", {})
        self.written = _written(func.body) if self.textures else set()
        self.read = _read(func.body) if self.textures else set()
        self.texels: dict = {}  # (image, x, y) text -> the float4 variable holding that texel
        self.texel_vars: list = []
        if self.textures:
            self.needs.add(SAMPLER)
        return super().print_kernel(func)

    def _texture(self, buf):
        return self.textures.get(buf.data)

    def buffer_param(self, buf) -> str:
        if self._texture(buf) is None:
            return super().buffer_param(buf)
        key = id(buf.data)
        if key in self.written and key in self.read:
            raise CompileError(f"{self.func_name}: texture {buf.name} is both read and written by one kernel; "
                               "OpenCL 1.2 images are read-only or write-only in a kernel: read it in a "
                               "later kernel (a separate stage)")
        access = "__write_only" if key in self.written else "__read_only"
        return f"{access} image2d_t {self.name(buf.data)}"

    # Loads ----------------------------------------------------------------------------------
    def expr_BufferLoad(self, e):
        layout = self._texture(e.buffer)
        if layout is None:
            return super().expr_BufferLoad(e)
        return self._cast_texel(self._load_float(e, layout), e.dtype)

    def _load_float(self, e, layout) -> str:
        """The float value(s) a load of texture e.buffer reads (float4 for 4 lanes, else float)."""
        img = self.name(e.buffer.data)
        idx, lanes = e.indices[0], e.dtype.lanes
        if lanes == 4:
            base = _contiguous(idx)
            if base is not None and _multiple_of(base, 4, self.analyzer):
                return self._read(img, base, layout)
        if lanes == 1:
            x, y, lane = self._coords(idx, layout.width)
            texel = self._fetch(img, x, y)
            if isinstance(lane, E.IntImm):
                return f"{texel}.s{lane.value}"
            self.needs.add(LANE_HELPER)
            return f"kiln_lane4({texel}, {self.expr(lane)})"
        parts = []
        for k in range(lanes):
            one = E.BufferLoad(e.buffer, (_lane_index(idx, k),), e.dtype.element_of())
            parts.append(self._load_float(one, layout))
        return f"((float{lanes})({', '.join(parts)}))"

    def _read(self, img: str, base, layout) -> str:
        x, y, _ = self._coords(base, layout.width)
        return self._fetch(img, x, y)

    def _fetch(self, img: str, x, y) -> str:
        """A variable holding texel (x, y), read once per straight-line block: a kernel only reads
        __read_only images, which cannot change under it, and clamped reads out of range are
        safe, so a read under a condition may move before it. Reusing the texel matters where
        one work-item takes several lanes of it (4 channels of a tile, 4 reduction steps)."""
        key = (img, self.expr(x), self.expr(y))
        name = self.texels.get(key)
        if name is None:
            var = E.Var(f"{img}_texel", DType("float", 32, 4))
            self.texel_vars.append(var)  # alive while printing: names are keyed by id()
            name = self.name(var)
            self.emit(f"float4 {name} = read_imagef({img}, kiln_sampler, (int2)({key[1]}, {key[2]}));")
            self.texels[key] = name
        return name

    def _block(self, s) -> None:
        # Texels read inside a nested block are not visible after it; outer ones stay valid.
        outer = self.texels
        self.texels = dict(outer)
        try:
            super()._block(s)
        finally:
            self.texels = outer

    def _cast_texel(self, text: str, dtype) -> str:
        if dtype.is_float and dtype.bits == 32:
            return text
        if dtype.lanes == 1:
            return f"(({self.type(dtype)}){text})"
        return f"convert_{self.type(dtype)}({text})"

    def expr_Cast(self, e):
        # float16 texture -> float32: read_imagef already converted; no half arithmetic needed.
        v = e.value
        if (isinstance(v, E.BufferLoad) and self._texture(v.buffer) is not None and e.dtype.is_float
                and e.dtype.bits == 32):
            return self._load_float(v, self._texture(v.buffer))
        return super().expr_Cast(e)

    def _coords(self, index, width: int):
        """(x, y, lane), simplified with the loop bounds known here (k / 4 == 0 for k < 4)."""
        from ..tir.transform.texture import texel_coords

        return tuple(self.analyzer.simplify(c) for c in texel_coords(index, width))

    # Stores ---------------------------------------------------------------------------------
    def stmt_BufferStore(self, s):
        layout = self._texture(s.buffer)
        if layout is None:
            return super().stmt_BufferStore(s)
        idx, lanes = s.indices[0], s.value.dtype.lanes
        base = _contiguous(idx) if lanes == 4 else None
        if base is None or not _multiple_of(base, 4, self.analyzer):
            raise CompileError(f"{self.func_name}: texture {s.buffer.name} is written one element at a time; "
                               "images are written a whole texel at once: vectorize the innermost axis "
                               "(extent 4) of the stage that writes it (s[X].vectorize(X.op.axis[4]))")
        x, y, _ = self._coords(base, layout.width)
        value = s.value
        if isinstance(value, E.Cast) and value.value.dtype.is_float and value.value.dtype.bits == 32:
            value = value.value  # write_imagef converts float to the image's half texels itself
        half = _half_vector_load(value)
        if half is not None and not self._global_half(half.buffer):
            half = None  # private / local half arrays hold float in registers: an ordinary load
        if half is not None:  # a float16 buffer -> texture copy: vload_half4 needs no cl_khr_fp16
            ptr = self.name(half.buffer.data)
            text = f"vload_half4(0, {ptr} + {self.index(_contiguous(half.indices[0]), half.buffer)})"
        elif value.dtype.is_float and value.dtype.bits == 32:
            text = self.expr(value)
        else:
            text = f"convert_float4({self.expr(value)})"
        if half is None and layout.dtype == "float16":
            # Round to half here, to nearest even as vstore_half does: drivers differ in how
            # write_imagef rounds to CL_HALF_FLOAT (texture and buffer builds then agree).
            self.needs.add(HALF_RTE_HELPER)
            text = f"kiln_half_rte4({text})"
        self.emit(f"write_imagef({self.name(s.buffer.data)}, (int2)({self.expr(x)}, {self.expr(y)}), {text});")




def _half_vector_load(value):
    """The 4-lane contiguous load of a float16 buffer that ``value`` is (maybe through casts), or None."""
    while isinstance(value, E.Cast):
        value = value.value
    if (isinstance(value, E.BufferLoad) and value.dtype.is_float and value.dtype.bits == 16
            and value.dtype.lanes == 4 and _contiguous(value.indices[0]) is not None):
        return value
    return None


def _lane_index(idx, k: int):
    scalar = index_lane(idx, k)
    if scalar is not None:
        return scalar
    raise CompileError(f"cannot take lane {k} of texture index {idx}; do not vectorize this read")


def _stores_and_loads(body):
    stores, loads = set(), set()

    class _Find(Visitor):
        def visit_BufferStore(self, op):
            stores.add(id(op.buffer.data))
            self.generic_visit(op)

        def visit_BufferLoad(self, op):
            loads.add(id(op.buffer.data))
            self.generic_visit(op)

    _Find().visit(body)
    return stores, loads


def _written(body) -> set:
    return _stores_and_loads(body)[0]


def _read(body) -> set:
    return _stores_and_loads(body)[1]

