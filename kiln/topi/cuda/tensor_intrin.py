"""Tensor-core intrinsics for ``s[X].tensorize``: wmma loads, multiply-accumulate and stores.

Each is a ``te.decl_tensor_intrin`` whose pattern is one tile (m x k of A, k x n of B, m x n
of the accumulator) and whose TIR is one warp-wide call (kiln/codegen/cuda_wmma.py prints them).
Fragment buffers number their tiles: ``elem_offset // (tile elements)`` is the fragment index.

    load_a = intrin_wmma_load_matrix("wmma.matrix_a")                  # shared A tile -> fragment
    gemm = intrin_wmma_gemm(out_dtype="float32")                      # acc += a @ b (b as n x k)
    store = intrin_wmma_store_matrix(out_dtype="float32", dst_scope="global")
"""

from __future__ import annotations

from kiln import te
from kiln.ir import expr as E
from kiln.ir.stmt import Evaluate, SeqStmt, decl_buffer

WMMA_SHAPES = ((16, 16, 16), (32, 8, 16), (8, 32, 16))


def _call(op: str, *args):
    return Evaluate(E.Call(E.const(0).dtype, op, tuple(E.convert(a) if not isinstance(a, str) else E.StringImm(a)
                                                      for a in args)))


def _strided(shape, dtype, name, scope):
    return decl_buffer(shape, dtype, name, strides=[te.var(f"{name}_s"), 1], scope=scope, offset_factor=1)


def _check_shape(shape):
    if tuple(shape) not in WMMA_SHAPES:
        raise ValueError(f"wmma shape {tuple(shape)} is not one of {WMMA_SHAPES} (m, n, k)")
    return tuple(shape)


def intrin_wmma_load_matrix(scope: str, shape=(16, 16, 16), layout: str = "row_major", dtype: str = "float16",
                            src_scope: str = "shared"):
    """Load one A (scope "wmma.matrix_a") or B ("wmma.matrix_b") tile from memory in layout.

    The pattern's tile is the tile as stored: m x k for row-major A, k x m for column-major A,
    k x n for row-major B, n x k for column-major B (dense's weight)."""
    m, n, k = _check_shape(shape)
    rows, cols = {"wmma.matrix_a": (m, k), "wmma.matrix_b": (k, n)}[scope]
    if layout == "col_major":
        rows, cols = cols, rows
    elif layout != "row_major":
        raise ValueError(f"wmma layout must be row_major or col_major, got {layout!r}")
    src = te.placeholder((rows, cols), dtype, name="src")
    frag = te.compute((rows, cols), lambda i, j: src[i, j], name="frag")
    tile = rows * cols

    def fintrin(ins, outs):
        (s,), (f,) = ins, outs
        return _call("tir.tvm_load_matrix_sync", f.data, m, n, k, E.FloorDiv(f.elem_offset, E.const(tile), f.elem_offset.dtype),
                     s.access_ptr("r"), s.strides[0], layout)

    binds = {src: _strided(src.shape, dtype, "src", src_scope), frag: _strided(frag.shape, dtype, "frag", scope)}
    return te.decl_tensor_intrin(frag.op, fintrin, name=f"wmma_load_{scope[5:]}", binds=binds)


def intrin_wmma_gemm(shape=(16, 16, 16), dtype: str = "float16", out_dtype: str = "float32", b_layout: str = "col_major"):
    """acc[i, j] += sum_k a[i, k] * b[j, k] (b_layout col_major: b stored n x k) or b[k, j] (row_major)."""
    m, n, k = _check_shape(shape)
    a = te.placeholder((m, k), dtype, name="a")
    b = te.placeholder((n, k) if b_layout == "col_major" else (k, n), dtype, name="b")
    rk = te.reduce_axis((0, k), name="k")

    def bval(j):
        return b[j, rk] if b_layout == "col_major" else b[rk, j]

    c = te.compute((m, n), lambda i, j: te.sum(a[i, rk].astype(out_dtype) * bval(j).astype(out_dtype), axis=rk),
                   name="acc")

    def fintrin(ins, outs):
        (A, B), (C,) = ins, outs

        def index(buf, tile):
            return E.FloorDiv(buf.elem_offset, E.const(tile), buf.elem_offset.dtype)

        ci = index(C, m * n)
        fill = _call("tir.tvm_fill_fragment", C.data, m, n, k, ci, E.const(0.0, out_dtype))
        mma = _call("tir.tvm_mma_sync", C.data, ci, A.data, index(A, m * k), B.data, index(B, n * k), C.data, ci)
        return SeqStmt((fill, mma)), fill, mma

    binds = {a: _strided(a.shape, dtype, "a", "wmma.matrix_a"), b: _strided(b.shape, dtype, "b", "wmma.matrix_b"),
             c: _strided(c.shape, out_dtype, "acc", "wmma.accumulator")}
    return te.decl_tensor_intrin(c.op, fintrin, name="wmma_gemm", binds=binds)


def intrin_wmma_store_matrix(shape=(16, 16, 16), out_dtype: str = "float32", dst_scope: str = "global"):
    """Store one m x n accumulator tile, row-major, to memory in dst_scope."""
    m, n, k = _check_shape(shape)
    acc = te.placeholder((m, n), out_dtype, name="acc")
    dst = te.compute((m, n), lambda i, j: acc[i, j], name="dst")

    def fintrin(ins, outs):
        (f,), (d,) = ins, outs
        return _call("tir.tvm_store_matrix_sync", f.data, m, n, k,
                     E.FloorDiv(f.elem_offset, E.const(m * n), f.elem_offset.dtype), d.access_ptr("w"), d.strides[0],
                     "row_major")

    binds = {acc: _strided(acc.shape, out_dtype, "acc", "wmma.accumulator"),
             dst: _strided(dst.shape, out_dtype, "dst", dst_scope)}
    return te.decl_tensor_intrin(dst.op, fintrin, name="wmma_store", binds=binds)
