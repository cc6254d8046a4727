"""Every math intrinsic, integer division flavour and cast against numpy, scalar and vector."""

import numpy as np
import pytest

from kiln.ir import Call, Cast, FloorDiv, FloorMod, Div, Mod, Max, Min, const, var
from kiln.ir.dtype import dtype
from tirkit import buffer, build, func, load, loop, module, nd, ramp, store

N, LANES = 64, 8
_rng = np.random.default_rng(0)

UNARY = {  # name -> (numpy function, input sampler)
    "exp": (np.exp, lambda: _rng.uniform(-5, 5, N)),
    "exp2": (np.exp2, lambda: _rng.uniform(-5, 5, N)),
    "exp10": (lambda x: 10.0 ** x, lambda: _rng.uniform(-3, 3, N)),
    "log": (np.log, lambda: _rng.uniform(0.01, 10, N)),
    "log2": (np.log2, lambda: _rng.uniform(0.01, 10, N)),
    "log10": (np.log10, lambda: _rng.uniform(0.01, 10, N)),
    "log1p": (np.log1p, lambda: _rng.uniform(-0.5, 10, N)),
    "sqrt": (np.sqrt, lambda: _rng.uniform(0, 10, N)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), lambda: _rng.uniform(0.1, 10, N)),
    "tanh": (np.tanh, lambda: _rng.uniform(-4, 4, N)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda: _rng.uniform(-8, 8, N)),
    "erf": (None, lambda: _rng.uniform(-3, 3, N)),
    "fabs": (np.abs, lambda: _rng.uniform(-5, 5, N)),
    "abs": (np.abs, lambda: _rng.uniform(-5, 5, N)),
    "floor": (np.floor, lambda: _rng.uniform(-5, 5, N)),
    "ceil": (np.ceil, lambda: _rng.uniform(-5, 5, N)),
    "round": (np.round, lambda: np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 3.7] * 8)),
    "nearbyint": (np.rint, lambda: np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 3.7] * 8)),
    "trunc": (np.trunc, lambda: _rng.uniform(-5, 5, N)),
    "sin": (np.sin, lambda: _rng.uniform(-5, 5, N)),
    "cos": (np.cos, lambda: _rng.uniform(-5, 5, N)),
    "tan": (np.tan, lambda: _rng.uniform(-1.2, 1.2, N)),
    "asin": (np.arcsin, lambda: _rng.uniform(-1, 1, N)),
    "acos": (np.arccos, lambda: _rng.uniform(-1, 1, N)),
    "atan": (np.arctan, lambda: _rng.uniform(-5, 5, N)),
    "sinh": (np.sinh, lambda: _rng.uniform(-3, 3, N)),
    "cosh": (np.cosh, lambda: _rng.uniform(-3, 3, N)),
}
BINARY = {
    "pow": (np.power, lambda: _rng.uniform(0.1, 3, N), lambda: _rng.uniform(-2, 2, N)),
    "atan2": (np.arctan2, lambda: _rng.uniform(-2, 2, N), lambda: _rng.uniform(-2, 2, N)),
    "fmod": (np.fmod, lambda: _rng.uniform(-9, 9, N), lambda: _rng.uniform(0.5, 3, N)),
    "copysign": (np.copysign, lambda: _rng.uniform(-9, 9, N), lambda: _rng.uniform(-1, 1, N)),
}


def _erf(x):
    import math
    return np.array([math.erf(v) for v in x])


def _unary_funcs(dt, lanes):
    funcs = []
    for name in UNARY:
        A, B = buffer("A", (N,), dt), buffer("B", (N,), dt)
        i = var("i")
        if lanes == 1:
            body = loop(i, N, store(B, i, Call(dtype(dt), "tir." + name, (load(A, i),))))
        else:
            vt = dtype(dt).with_lanes(lanes)
            body = loop(i, N // lanes, store(B, ramp(i * lanes, lanes),
                                             Call(vt, "tir." + name, (load(A, ramp(i * lanes, lanes), vt),))))
        funcs.append(func("k_" + name, [A, B], body))
    return funcs


@pytest.mark.parametrize("dt,lanes", [("float32", 1), ("float32", LANES), ("float64", 1), ("float64", 4),
                                      ("float16", 1), ("float16", LANES)])
def test_unary_math(dt, lanes):
    m = build(module(*_unary_funcs(dt, lanes)))
    tol = {"float16": 3e-3, "float32": 2e-6, "float64": 1e-13}[dt]
    for name, (ref, sample) in UNARY.items():
        x = sample().astype(dt)
        y = nd(np.zeros(N, dt))
        m["k_" + name](nd(x), y)
        expect = (_erf if ref is None else ref)(x.astype("float64"))
        np.testing.assert_allclose(y.numpy().astype("float64"), expect.astype(dt).astype("float64"),
                                   rtol=tol * 4, atol=tol, err_msg=f"tir.{name} {dt}x{lanes}")


@pytest.mark.parametrize("lanes", [1, LANES])
def test_binary_math(lanes):
    funcs = []
    for name in BINARY:
        A, B, C = buffer("A", (N,)), buffer("B", (N,)), buffer("C", (N,))
        i = var("i")
        if lanes == 1:
            value = Call(dtype("float32"), "tir." + name, (load(A, i), load(B, i)))
            body = loop(i, N, store(C, i, value))
        else:
            vt, idx = dtype("float32x8"), ramp(i * lanes, lanes)
            body = loop(i, N // lanes, store(C, idx, Call(vt, "tir." + name, (load(A, idx, vt), load(B, idx, vt)))))
        funcs.append(func(name, [A, B, C], body))
    m = build(module(*funcs))
    for name, (ref, sa, sb) in BINARY.items():
        a, b = sa().astype("float32"), sb().astype("float32")
        c = nd(np.zeros(N, "float32"))
        m[name](nd(a), nd(b), c)
        np.testing.assert_allclose(c.numpy(), ref(a, b), rtol=1e-5, atol=1e-6, err_msg=name)


def test_float_classes_and_min_max_nan():
    A, B = buffer("A", (8,)), buffer("B", (8,))
    R = buffer("R", (8,), "bool")
    i = var("i")
    fs = [func(n, [A, R], loop(i, 8, store(R, i, Call(dtype("bool"), "tir." + n, (load(A, i),)))))
          for n in ("isnan", "isinf", "isfinite")]
    C = buffer("C", (8,))
    fs.append(func("vmin", [A, B, C], loop(i, 8, store(C, i, Min(load(A, i), load(B, i), dtype("float32"))))))
    fs.append(func("vmax", [A, B, C], loop(i, 8, store(C, i, Max(load(A, i), load(B, i), dtype("float32"))))))
    m = build(module(*fs))
    x = np.array([0, np.nan, np.inf, -np.inf, 1.5, -2, np.nan, 3], "float32")
    y = np.array([1, 2, 3, 4, np.nan, -3, 5, 2], "float32")
    for name, ref in (("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)):
        r = nd(np.zeros(8, "bool"))
        m[name](nd(x), r)
        np.testing.assert_array_equal(r.numpy(), ref(x), err_msg=name)
    for name, ref in (("vmin", np.minimum), ("vmax", np.maximum)):
        c = nd(np.zeros(8, "float32"))
        m[name](nd(x), nd(y), c)
        np.testing.assert_array_equal(c.numpy(), ref(x, y), err_msg=name)


@pytest.mark.parametrize("dt", ["int32", "int64", "int8"])
@pytest.mark.parametrize("divisor", [None, 4, 7])
def test_integer_division_flavours(dt, divisor):
    a = np.arange(-40, 40, dtype=dt)
    b = np.array([v for v in range(-9, 10) if v] * 10, dtype=dt)[:80]
    n = 80
    A, Bb = buffer("A", (n,), dt), buffer("B", (n,), dt)
    outs = {k: buffer(k, (n,), dt) for k in ("fdiv", "fmod", "tdiv", "tmod")}
    i = var("i")
    x = load(A, i)
    y = const(divisor, dt) if divisor else load(Bb, i)
    t = dtype(dt)
    body = [store(outs["fdiv"], i, FloorDiv(x, y, t)), store(outs["fmod"], i, FloorMod(x, y, t)),
            store(outs["tdiv"], i, Div(x, y, t)), store(outs["tmod"], i, Mod(x, y, t))]
    from kiln.ir import seq
    m = build(func("divs", [A, Bb, *outs.values()], loop(i, n, seq(*body))))
    res = {k: nd(np.zeros(n, dt)) for k in outs}
    m["divs"](nd(a), nd(b), *res.values())
    d = np.full(n, divisor, dt) if divisor else b
    np.testing.assert_array_equal(res["fdiv"].numpy(), a // d)
    np.testing.assert_array_equal(res["fmod"].numpy(), a % d)
    np.testing.assert_array_equal(res["tdiv"].numpy(), np.trunc(a / d).astype(dt))
    np.testing.assert_array_equal(res["tmod"].numpy(), np.fmod(a, d))


def test_vector_floor_div_mod_by_constant():
    A, Q, R = buffer("A", (64,), "int32"), buffer("Q", (64,), "int32"), buffer("R", (64,), "int32")
    i = var("i")
    vt = dtype("int32x16")
    from kiln.ir import Broadcast, seq
    x, k = load(A, ramp(i * 16, 16), vt), Broadcast(const(6), 16, vt)
    body = loop(i, 4, seq(store(Q, ramp(i * 16, 16), FloorDiv(x, k, vt)), store(R, ramp(i * 16, 16), FloorMod(x, k, vt))))
    m = build(func("vdiv", [A, Q, R], body))
    a = np.arange(-32, 32, dtype="int32")
    q, r = nd(np.zeros(64, "int32")), nd(np.zeros(64, "int32"))
    m["vdiv"](nd(a), q, r)
    np.testing.assert_array_equal(q.numpy(), a // 6)
    np.testing.assert_array_equal(r.numpy(), a % 6)


CASTS = [("float32", "int32"), ("float32", "uint8"), ("int32", "float32"), ("int8", "int32"), ("uint8", "int32"),
         ("int32", "int8"), ("float32", "float16"), ("float16", "float32"), ("float64", "float32"),
         ("int32", "bool"), ("float32", "bool"), ("bool", "int32"), ("bool", "float32"), ("uint32", "float64"),
         ("int64", "int16")]


def test_casts():
    fs = []
    for k, (src, dst) in enumerate(CASTS):
        A, B = buffer("A", (16,), src), buffer("B", (16,), dst)
        i = var("i")
        fs.append(func(f"c{k}", [A, B], loop(i, 16, store(B, i, Cast(dtype(dst), load(A, i))))))
    m = build(module(*fs))
    for k, (src, dst) in enumerate(CASTS):
        if src == "bool":
            x = np.array([True, False] * 8)
        elif src.startswith("float"):
            x = np.array([-3.7, -1.2, -0.5, 0, 0.5, 1.5, 2.5, 3.9] * 2, src)
            if dst.startswith("uint"):
                x = np.abs(x)
        else:
            x = (np.arange(16) * 37 - 200).astype(src) if not src.startswith("uint") else (np.arange(16) * 13).astype(src)
        y = nd(np.zeros(16, dst))
        m[f"c{k}"](nd(x), y)
        np.testing.assert_array_equal(y.numpy(), x.astype(dst), err_msg=f"{src}->{dst}")


def test_bitwise_and_shifts():
    from kiln.ir import seq
    a = np.array([5, -8, 1023, 0, -1, 77, 12, 3], "int32")
    A, B = buffer("A", (8,), "int32"), buffer("B", (8,), "int32")
    outs = [buffer(f"o{k}", (8,), "int32") for k in range(6)]
    i = var("i")
    x, y = load(A, i), load(B, i)
    t = dtype("int32")
    values = [Call(t, "tir.bitwise_and", (x, y)), Call(t, "tir.bitwise_or", (x, y)),
              Call(t, "tir.bitwise_xor", (x, y)), Call(t, "tir.bitwise_not", (x,)),
              Call(t, "tir.shift_right", (x, const(2))), Call(t, "tir.popcount", (Call(t, "tir.shift_left", (x, const(1))),))]
    m = build(func("bits", [A, B, *outs], loop(i, 8, seq(*[store(o, i, v) for o, v in zip(outs, values)]))))
    b = np.array([3, 3, 255, 9, 7, 1, 12, -1], "int32")
    res = [nd(np.zeros(8, "int32")) for _ in outs]
    m["bits"](nd(a), nd(b), *res)
    shl = (a << 1).astype("int64") & 0xFFFFFFFF
    expect = [a & b, a | b, a ^ b, ~a, a >> 2, np.array([bin(v).count("1") for v in shl])]
    for r, e in zip(res, expect):
        np.testing.assert_array_equal(r.numpy(), e)


def test_float16_arithmetic_and_bool_storage():
    A, B = buffer("A", (32,), "float16"), buffer("B", (32,), "float16")
    M = buffer("M", (32,), "bool")
    i = var("i")
    from kiln.ir import Select, seq
    x = load(A, i)
    body = loop(i, 32, seq(store(B, i, x * x + const(1.0, "float16")), store(M, i, x > const(0.0, "float16"))))
    f = func("h", [A, B, M], body)
    m = build(f)
    a = np.linspace(-3, 3, 32).astype("float16")
    b, mm = nd(np.zeros(32, "float16")), nd(np.zeros(32, "bool"))
    m["h"](nd(a), b, mm)
    # two float16 roundings at most (one where the CPU fuses them): within 2u(1+u), u = 2^-11
    np.testing.assert_allclose(b.numpy().astype("float64"), a.astype("float64") ** 2 + 1,
                               rtol=2 * 2.0 ** -11 * (1 + 2.0 ** -11), atol=0)
    np.testing.assert_array_equal(mm.numpy(), a > 0)
    del Select


def test_extern_call_reaches_libm():
    A, B = buffer("A", (4,), "float64"), buffer("B", (4,), "float64")
    i = var("i")
    m = build(func("ext", [A, B], loop(i, 4, store(B, i, Call(dtype("float64"), "cbrt", (load(A, i),))))))
    b = nd(np.zeros(4))
    m["ext"](nd(np.array([8.0, 27.0, -1.0, 2.0])), b)
    np.testing.assert_allclose(b.numpy(), np.cbrt([8.0, 27.0, -1.0, 2.0]))


def test_kernel_named_like_a_libm_function_is_rejected():
    from kiln.errors import CompileError
    A, B = buffer("A", (4,), "float64"), buffer("B", (4,), "float64")
    i = var("i")
    f = func("log1p", [A, B], loop(i, 4, store(B, i, Call(dtype("float64"), "tir.log1p", (load(A, i),)))))
    with pytest.raises(CompileError, match="'log1p' is also the name of a C library function"):
        build(f)
