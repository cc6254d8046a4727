"""float16 kept in memory only: OpenCL kernels that compute in float on devices without cl_khr_fp16.

Without the cl_khr_fp16 extension OpenCL C may declare ``half`` pointers but not load, store or
compute ``half`` values; ``vload_half[n]`` / ``vstore_half[n]`` convert between half in memory
and float in registers, and are core OpenCL. With kernel attr ``half_storage`` (set for OpenCL
targets, kiln/codegen/opencl.py) every float16 value is a float in registers: loads from global
half buffers are vload_half, stores vstore_half_rte (to nearest even, whatever the device's
default rounding), private and shared float16 arrays are float arrays, float16 constants and casts are float ones. Images convert by
themselves (opencl_texture.py). Results differ from true half arithmetic only in that rounding
to half happens at stores, not after every operation.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.dtype import DType
from .c_family_expr import _contiguous

_F16 = ("float", 16)


def _is_half(dt) -> bool:
    return (dt.kind, dt.bits) == _F16


class HalfStorage:
    """Mixin for an OpenCL printer; active when ``self.half_storage`` is true."""

    half_storage = False

    def scalar_type(self, dt):
        if self.half_storage and _is_half(dt):
            return "float"
        return super().scalar_type(dt)

    def buffer_param(self, buf) -> str:
        if self.half_storage and _is_half(buf.dtype):
            return self.lang.buffer_param.format(type="half", name=self.name(buf.data))
        return super().buffer_param(buf)

    def _global_half(self, buf) -> bool:
        return self.half_storage and _is_half(buf.dtype) and buf.scope == "global"

    def expr_FloatImm(self, e):
        if self.half_storage and _is_half(e.dtype):
            return super().expr_FloatImm(replace(e, dtype=DType("float", 32)))
        return super().expr_FloatImm(e)

    def expr_BufferLoad(self, e):
        if not self._global_half(e.buffer) or self._texture(e.buffer) is not None:
            return super().expr_BufferLoad(e)
        ptr, idx, lanes = self.name(e.buffer.data), e.indices[0], e.dtype.lanes
        if lanes == 1:
            return f"vload_half(0, {ptr} + {self.index(idx, e.buffer)})"
        base = _contiguous(idx)
        if base is not None:
            return f"vload_half{lanes}(0, {ptr} + {self.index(base, e.buffer)})"
        parts = ", ".join(f"vload_half(0, {ptr} + {self.lane_of(idx, k)})" for k in range(lanes))
        return f"((float{lanes})({parts}))"

    def stmt_BufferStore(self, s):
        if not self._global_half(s.buffer) or self._texture(s.buffer) is not None:
            return super().stmt_BufferStore(s)
        ptr, idx, lanes = self.name(s.buffer.data), s.indices[0], s.value.dtype.lanes
        if lanes == 1:
            self.emit(f"vstore_half_rte({self.expr(s.value)}, 0, {ptr} + {self.index(idx, s.buffer)});")
            return
        base = _contiguous(idx)
        if base is not None:
            self.emit(f"vstore_half{lanes}_rte({self.expr(s.value)}, 0, {ptr} + {self.index(base, s.buffer)});")
            return
        v = self.fresh_value(s.value)
        for k in range(lanes):
            self.emit(f"vstore_half_rte({self.lang.lane.format(x=v, k=k)}, 0, {ptr} + {self.lane_of(idx, k)});")
