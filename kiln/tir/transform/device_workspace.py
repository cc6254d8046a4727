"""Global-memory tensors between kernels: device workspace allocated by the host function.

After split_host_device, an Allocate left in a GPU host function holds a tensor one kernel
writes and a later kernel reads (a multi-kernel schedule such as Winograd's transforms). Host
memory would not do: it becomes ``data = tir.kiln_device_alloc(nbytes, like)`` before the
kernels and ``tir.kiln_device_free(data)`` after them, which the host code generator turns into
calls of the device-launch hook (llvm/launch.py); ``like`` is a buffer argument of the function,
so the workspace is made on the device the call's tensors live on.
"""

from __future__ import annotations

from dataclasses import replace

from kiln.ir import expr as E
from kiln.ir.dtype import HANDLE_T, INT32, INT64
from kiln.ir.functor import Mutator
from kiln.ir.stmt import Evaluate, LetStmt, PrimFunc, seq
from kiln.tir.simplify import simplify

ALLOC_OP = "tir.kiln_device_alloc"
FREE_OP = "tir.kiln_device_free"
ALLOC_TEXTURE_OP = "tir.kiln_device_alloc_texture"  # (width, height, element bits, like)


class _Workspace(Mutator):
    def __init__(self, like, textures=None):
        super().__init__()
        self.like = like
        self.textures = textures or {}

    def visit_Allocate(self, op):
        body = self.visit(op.body)
        layout = self.textures.get(op.buffer.data)
        if layout is not None:  # a texture-scoped tensor: an RGBA image (tir/transform/texture.py)
            alloc = E.Call(HANDLE_T, ALLOC_TEXTURE_OP, (E.const(layout.width, INT64), E.const(layout.height, INT64),
                                                        E.const(op.buffer.dtype.bits, INT64), self.like))
            return LetStmt(op.buffer.data, alloc, seq(body, Evaluate(E.Call(INT32, FREE_OP, (op.buffer.data,)))))
        nbytes = E.const(op.buffer.dtype.bits * op.buffer.dtype.lanes // 8, INT64)
        for x in op.extents:
            nbytes = nbytes * E.cast(x, INT64)
        alloc = E.Call(HANDLE_T, ALLOC_OP, (simplify(nbytes), self.like))
        return LetStmt(op.buffer.data, alloc, seq(body, Evaluate(E.Call(INT32, FREE_OP, (op.buffer.data,)))))


def device_workspace(host: PrimFunc) -> PrimFunc:
    bufs = list(host.buffer_map.values())
    like = bufs[0].data if bufs else E.const(0, INT64)
    return replace(host, body=_Workspace(like, host.attrs.get("texture")).visit(host.body))
