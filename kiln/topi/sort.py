"""Ranks along an axis, the building block of ONNX TopK: ``rank(x)[i]`` is the position element
``i`` takes when its axis is sorted (descending when ``largest``), ties kept in index order. Two
quadratic reductions, no data-dependent control flow, so every target can build them."""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import const


def rank(data, axis: int = -1, largest: bool = True):
    """int64 ranks of ``data`` along ``axis`` (0: the first of the sorted order)."""
    ndim = len(data.shape)
    axis = axis % ndim
    r = te.reduce_axis((0, data.shape[axis]), name="j")
    one, zero = const(1, "int64"), const(0, "int64")

    def fcompute(*i):
        src = list(i)
        src[axis] = r.var
        other, mine = data(*src), data(*i)
        before = (other > mine) if largest else (other < mine)
        tie = tir.all(other == mine, r.var < i[axis])
        return te.sum(tir.if_then_else(tir.any(before, tie), one, zero), axis=r)

    return te.compute(tuple(data.shape), fcompute, name="T_rank", tag="rank")


def select_by_rank(ranks, k: int, axis: int = -1):
    """int64 indices along ``axis`` of the elements ranked 0..k-1 (``ranks`` from ``rank``)."""
    ndim = len(ranks.shape)
    axis = axis % ndim
    r = te.reduce_axis((0, ranks.shape[axis]), name="j")
    shape = list(ranks.shape)
    shape[axis] = k

    def fcompute(*i):
        src = list(i)
        src[axis] = r.var
        hit = ranks(*src) == i[axis].astype("int64")
        return te.sum(tir.if_then_else(hit, r.var.astype("int64"), const(0, "int64")), axis=r)

    return te.compute(tuple(shape), fcompute, name="T_select_by_rank", tag="select_by_rank")
