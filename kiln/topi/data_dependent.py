"""NonZero and Unique as ``te.extern`` kernels: outputs in buffers of their largest size, valid
entries first along the dynamic axis, the rest zeroed, and a (1,) int64 count
(``relay/op/dynamic.py`` describes the convention). Sequential loops; on GPU targets one thread."""

from __future__ import annotations

import math

from kiln import te, tir
from kiln.ir import expr as E


def _one_thread(ib, gpu: bool) -> str:
    if gpu:
        ib.scope_attr(te.thread_axis("blockIdx.x"), "thread_extent", 1)
        ib.scope_attr(te.thread_axis("threadIdx.x"), "thread_extent", 1)
        return "local"
    return "global"


def _is_set(value):
    return value if value.dtype.is_bool else value != E.const(0, value.dtype)


def nonzero(data, gpu: bool = False):
    """(coordinates [ndim, size] int64, count [1] int64), the coordinates in row-major order."""
    shape = [int(d) for d in data.shape] or [1]
    size = math.prod(shape)

    def body(ins, outs):
        ib = tir.ir_builder.create()
        x = ib.buffer_ptr(ins[0], shape=(size,))
        out, count = ib.buffer_ptr(outs[0]), ib.buffer_ptr(outs[1])
        scope = _one_thread(ib, gpu)
        n = ib.allocate("int64", (1,), name="n", scope=scope)
        n[0] = E.const(0, "int64")
        with ib.for_range(0, size, name="f") as f:
            with ib.if_scope(_is_set(x[f])):
                rest = f.astype("int64")
                for d in reversed(range(len(shape))):
                    out[d, n[0]] = rest % shape[d]
                    rest = rest // shape[d]
                n[0] = n[0] + E.const(1, "int64")
        with ib.for_range(0, size, name="p") as p:
            with ib.if_scope(p.astype("int64") >= n[0]):
                for d in range(len(shape)):
                    out[d, p] = E.const(0, "int64")
        count[0] = n[0]
        return ib.get()

    return te.extern([(len(shape), size), (1,)], [data], body, name="nonzero", dtype=["int64", "int64"],
                     tag="nonzero")


def unique(data, axis=None, sorted_: bool = True, gpu: bool = False):
    """ONNX Unique over slices along ``axis`` (elements when None): (values, first index of each,
    inverse index of every slice, counts, number of distinct slices). Sorted ascending
    (lexicographically for slices) when ``sorted_``, else in order of first occurrence."""
    shape = [int(d) for d in data.shape]
    if axis is None:
        outer, n, inner = 1, math.prod(shape), 1
        out_shape = (n,)
    else:
        axis %= len(shape)
        outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
        out_shape = tuple(shape)
    length = outer * inner  # elements of one slice
    total = outer * n * inner

    def elem(k, t):  # element t of slice k, flat in the [outer, n, inner] view
        k, t = k.astype("int64"), t.astype("int64")
        return (t // inner * n + k) * inner + t % inner

    def body(ins, outs):
        ib = tir.ir_builder.create()
        x = ib.buffer_ptr(ins[0], shape=(max(total, 1),))
        values = ib.buffer_ptr(outs[0], shape=(max(total, 1),))
        first_idx, inverse, counts, count = (ib.buffer_ptr(b) for b in outs[1:])
        scope = _one_thread(ib, gpu)
        first = ib.allocate("int64", (max(n, 1),), name="first", scope=scope)
        pos = ib.allocate("int64", (max(n, 1),), name="pos", scope=scope)
        st = ib.allocate("int64", (2,), name="st", scope=scope)  # comparison state, distinct count
        zero, one = E.const(0, "int64"), E.const(1, "int64")

        def compare(j, k):
            """st[0] = 0 when slices j and k are equal, 1 when j sorts before k, 2 after."""
            st[0] = zero
            with ib.for_range(0, length, name="t") as t:
                a, b = x[elem(j, t)], x[elem(k, t)]
                with ib.if_scope(tir.all(st[0] == zero, a != b)):
                    st[0] = tir.if_then_else(a < b, one, E.const(2, "int64"))

        with ib.for_range(0, n, name="k") as k:  # first occurrence of each slice
            first[k] = k.astype("int64")
            with ib.for_range(0, n, name="j") as j:
                with ib.if_scope(tir.all(j < k, first[k] == k.astype("int64"))):
                    compare(j, k)
                    with ib.if_scope(st[0] == zero):
                        first[k] = j.astype("int64")
        st[1] = zero
        with ib.for_range(0, n, name="k1") as k:  # output position of each distinct slice
            with ib.if_scope(first[k] == k.astype("int64")):
                st[1] = st[1] + one
                pos[k] = zero
                with ib.for_range(0, n, name="j1") as j:
                    with ib.if_scope(tir.all(first[j] == j.astype("int64"), j != k)):
                        if sorted_:
                            compare(j, k)
                            with ib.if_scope(st[0] == one):
                                pos[k] = pos[k] + one
                        else:
                            with ib.if_scope(j < k):
                                pos[k] = pos[k] + one
        with ib.for_range(0, max(total, 1), name="z") as z:
            with ib.if_scope(z < total):
                values[z] = E.const(0, data.dtype)
        with ib.for_range(0, n, name="k2") as k:
            first_idx[k] = zero
            counts[k] = zero
        with ib.for_range(0, n, name="k3") as k:
            p = ib.let("p", pos[first[k]])
            inverse[k] = p
            counts[p] = counts[p] + one
            with ib.if_scope(first[k] == k.astype("int64")):
                first_idx[p] = k.astype("int64")
                with ib.for_range(0, length, name="t3") as t:
                    values[elem(p, t)] = x[elem(k, t)]
        count[0] = st[1]
        return ib.get()

    vec = (n,)
    return te.extern([out_shape, vec, vec, vec, (1,)], [data], body, name="unique",
                     dtype=[data.dtype, "int64", "int64", "int64", "int64"], tag="unique")
