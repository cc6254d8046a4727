"""Broadcast, math, reductions, transforms and resize against numpy (x86 default schedules)."""

import numpy as np
import pytest

from kiln import te, topi
from kiln.errors import ShapeError
from kiln.topi import testing


@pytest.mark.parametrize("fn,ref", [
    (topi.add, np.add), (topi.subtract, np.subtract), (topi.multiply, np.multiply), (topi.divide, np.divide),
    (topi.maximum, np.maximum), (topi.minimum, np.minimum),
    (topi.power, lambda a, b: np.power(np.abs(a), b)),
])
def test_broadcast_binary(runner, fn, ref):
    A = te.placeholder((4, 1, 19), name="a")
    B = te.placeholder((3, 1), name="b")
    a, b = runner.rand(4, 1, 19), runner.rand(3, 1)
    if fn is topi.power:
        a = np.abs(a)
    got = runner.run(topi.x86.schedule_injective, fn(A, B), [A, B], [a, b])
    np.testing.assert_allclose(got, ref(a, b), rtol=1e-5, atol=1e-6)


def test_broadcast_with_scalar_and_int_floor_ops(runner):
    A = te.placeholder((5, 6), name="a", dtype="int32")
    a = runner.rand(5, 6, dtype="int32")
    np.testing.assert_array_equal(runner.run(topi.x86.schedule_injective, topi.floor_divide(A, 7), [A], [a]), a // 7)
    np.testing.assert_array_equal(runner.run(topi.x86.schedule_injective, topi.floor_mod(A, 7), [A], [a]), a % 7)
    np.testing.assert_array_equal(runner.run(topi.x86.schedule_injective, topi.subtract(3, A), [A], [a]), 3 - a)


def test_broadcast_shape_error():
    with pytest.raises(ShapeError, match=r"dim 1: 3 vs 4"):
        topi.add(te.placeholder((2, 3)), te.placeholder((2, 4)))


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid", "sqrt", "erf", "floor", "round", "abs", "negative", "sign",
                                  "exact_exp", "exact_tanh", "exact_sigmoid", "exact_erf"])
def test_unary_math(runner, name):
    import math

    refs = {"sigmoid": lambda a: 1 / (1 + np.exp(-a)), "erf": np.vectorize(math.erf), "sign": np.sign,
            "exact_exp": np.exp, "exact_tanh": np.tanh, "exact_sigmoid": lambda a: 1 / (1 + np.exp(-a)),
            "exact_erf": np.vectorize(math.erf)}
    A = te.placeholder((7, 33), name="x")
    a = runner.rand(7, 33) * 2
    if name == "sqrt":
        a = np.abs(a)
    got = runner.run(topi.x86.schedule_injective, getattr(topi, name)(A), [A], [a])
    np.testing.assert_allclose(got, (refs[name] if name in refs else getattr(np, name))(a), rtol=1e-5, atol=1e-6)


def test_cast(runner):
    A = te.placeholder((9,), name="x")
    a = runner.rand(9) * 50
    got = runner.run(topi.x86.schedule_injective, topi.cast(A, "int32"), [A], [a])
    np.testing.assert_array_equal(got, a.astype("int32"))


@pytest.mark.parametrize("name,axis,keepdims,exclude", [
    ("sum", 1, False, False), ("max", (0, 2), True, False), ("min", None, False, False),
    ("mean", -1, True, False), ("prod", 1, False, True), ("sum", (1,), False, True),
])
def test_reductions(runner, name, axis, keepdims, exclude):
    A = te.placeholder((3, 17, 5), name="x")
    a = runner.rand(3, 17, 5) * (0.5 if name == "prod" else 1)
    out = getattr(topi, name)(A, axis=axis, keepdims=keepdims, exclude=exclude)
    got = runner.run(topi.x86.schedule_reduce, out, [A], [a])
    np_axis = axis
    if exclude:
        keep = [axis] if isinstance(axis, int) else list(axis)
        np_axis = tuple(d for d in range(3) if d not in keep)
    ref = getattr(np, name)(a, axis=np_axis, keepdims=keepdims)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_first_index_on_ties(runner, name):
    A = te.placeholder((4, 9), name="x")
    a = np.round(runner.rand(4, 9))  # few distinct values: ties happen
    got = runner.run(topi.x86.schedule_reduce, getattr(topi, name)(A, axis=1), [A], [a])
    np.testing.assert_array_equal(got, getattr(np, name)(a, axis=1))
    got = runner.run(topi.x86.schedule_reduce, getattr(topi, name)(A, axis=1, keepdims=True, select_last_index=True),
                     [A], [a])
    np.testing.assert_array_equal(got[:, 0], 8 - getattr(np, name)(a[:, ::-1], axis=1))


def test_reshape_transpose_flatten(runner):
    A = te.placeholder((2, 3, 4), name="x")
    a = runner.rand(2, 3, 4)
    np.testing.assert_array_equal(runner.run(topi.x86.schedule_injective, topi.reshape(A, (4, -1)), [A], [a]), a.reshape(4, -1))
    np.testing.assert_array_equal(runner.run(topi.x86.schedule_injective, topi.transpose(A, (2, 0, 1)), [A], [a]),
                                  a.transpose(2, 0, 1))
    np.testing.assert_array_equal(runner.run(topi.x86.schedule_injective, topi.flatten(A), [A], [a]), a.reshape(2, 12))
    with pytest.raises(ShapeError, match="cannot become"):
        topi.reshape(A, (5, 5))


def test_concatenate_split_stack(runner):
    A = te.placeholder((2, 3), name="a")
    B = te.placeholder((2, 5), name="b")
    a, b = runner.rand(2, 3), runner.rand(2, 5)
    got = runner.run(topi.x86.schedule_concatenate, topi.concatenate([A, B], axis=1), [A, B], [a, b])
    np.testing.assert_array_equal(got, np.concatenate([a, b], 1))
    parts = topi.split(B, [1, 4], axis=1)
    got = runner.run(topi.x86.schedule_injective, parts, [B], [b])
    for g, r in zip(got, np.split(b, [1, 4], axis=1)):
        np.testing.assert_array_equal(g, r)
    got = runner.run(topi.x86.schedule_injective, topi.stack([A, A], axis=1), [A], [a])
    np.testing.assert_array_equal(got, np.stack([a, a], 1))


@pytest.mark.parametrize("begin,end,strides", [([1, 0], [3, 7], [1, 2]), ([-1, 6], [-5, 0], [-1, -3]), ([0, 2], [100, 100], None)])
def test_strided_slice(runner, begin, end, strides):
    A = te.placeholder((4, 7), name="x")
    a = runner.rand(4, 7)
    got = runner.run(topi.x86.schedule_injective, topi.strided_slice(A, begin, end, strides), [A], [a])
    st = strides or [1, 1]
    ref = a[begin[0]:end[0]:st[0], begin[1]:end[1]:st[1]]
    np.testing.assert_array_equal(got, ref)


def test_take_squeeze_expand_where_broadcast_to(runner):
    A = te.placeholder((5, 1, 3), name="x")
    I = te.placeholder((2, 2), name="i", dtype="int32")  # noqa: E741
    a, i = runner.rand(5, 1, 3), np.array([[0, -1], [7, -8]], dtype="int32")
    for mode in ("clip", "wrap"):  # numpy's modes: clip sends -1 to 0, wrap to the last element
        got = runner.run(topi.x86.schedule_injective, topi.take(A, I, axis=0, mode=mode), [A, I], [a, i])
        np.testing.assert_array_equal(got, np.take(a, i, axis=0, mode=mode), err_msg=mode)
        got = runner.run(topi.x86.schedule_injective, topi.take(A, -1, axis=0, mode=mode), [A], [a])
        np.testing.assert_array_equal(got, np.take(a, -1, axis=0, mode=mode), err_msg=mode)
    got = runner.run(topi.x86.schedule_injective, topi.squeeze(A, 1), [A], [a])
    np.testing.assert_array_equal(got, a.squeeze(1))
    got = runner.run(topi.x86.schedule_injective, topi.expand_dims(A, 0, 2), [A], [a])
    np.testing.assert_array_equal(got, a[None, None])
    got = runner.run(topi.x86.schedule_injective, topi.broadcast_to(A, (2, 5, 4, 3)), [A], [a])
    np.testing.assert_array_equal(got, np.broadcast_to(a, (2, 5, 4, 3)))
    C = te.placeholder((5, 4, 1), name="c", dtype="bool")
    c = runner.rng.random((5, 4, 1)) > 0.5
    got = runner.run(topi.x86.schedule_injective, topi.where(C, A, 0.0), [C, A], [c, a])
    np.testing.assert_array_equal(got, np.where(c, a, 0.0))


def test_pad_and_layout_transform(runner):
    A = te.placeholder((1, 20, 3, 2), name="x")
    a = runner.rand(1, 20, 3, 2)
    got = runner.run(topi.x86.schedule_injective, topi.nn.pad(A, (0, 0, 1, 2), (0, 1, 0, 1), 7.0), [A], [a])
    np.testing.assert_array_equal(got, np.pad(a, ((0, 0), (0, 1), (1, 0), (2, 1)), constant_values=7.0))
    got = runner.run(topi.x86.schedule_injective, topi.layout_transform(A, "NCHW", "NCHW8c"), [A], [a])
    ref = np.pad(a, ((0, 0), (0, 4), (0, 0), (0, 0))).reshape(1, 3, 8, 3, 2).transpose(0, 1, 3, 4, 2)
    np.testing.assert_array_equal(got, ref)
    B = te.placeholder((1, 3, 3, 2, 8), name="y")
    got = runner.run(topi.x86.schedule_injective, topi.layout_transform(B, "NCHW8c", "NHWC"), [B], [ref])
    np.testing.assert_array_equal(got, np.pad(a, ((0, 0), (0, 4), (0, 0), (0, 0))).transpose(0, 2, 3, 1))


@pytest.mark.parametrize("method,mode", [
    ("nearest_neighbor", "asymmetric"), ("nearest_neighbor", "half_pixel"), ("linear", "half_pixel"),
    ("linear", "align_corners"), ("linear", "pytorch_half_pixel"),
])
def test_resize2d(runner, method, mode):
    A = te.placeholder((1, 2, 5, 7), name="x")
    a = runner.rand(1, 2, 5, 7)
    out = topi.image.resize2d(A, (9, 4), "NCHW", method, mode)
    got = runner.run(topi.x86.schedule_injective, out, [A], [a])
    np.testing.assert_allclose(got, testing.resize2d_python(a, (9, 4), "NCHW", method, mode), rtol=1e-5, atol=1e-5)
