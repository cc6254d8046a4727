"""IR nodes behave as TVM users expect: operators build nodes, == builds EQ, printing is readable."""

import pytest

import kiln as tvm
from kiln import te, tir
from kiln.ir import structural_equal, structural_hash


def test_operators_build_nodes():
    i = te.var("i")
    e = i * 2 + 1
    assert isinstance(e, tir.Add) and isinstance(e.a, tir.Mul)
    assert str(e.dtype) == "int32"
    assert str((i + 1.5).dtype) == "float32"


def test_eq_builds_a_node_and_bool_is_identity():
    i, j = te.var("i"), te.var("j")
    assert isinstance(i == j, tir.EQ)
    assert bool(i == i) and not bool(i == j)
    with pytest.raises(ValueError, match="Python bool"):
        bool(i < j)


def test_structural_equality_maps_variables():
    a, b = te.var("a"), te.var("b")
    assert structural_equal(a * 2 + 1, b * 2 + 1)
    assert not structural_equal(a * 2 + 1, b * 3 + 1)
    assert structural_hash(a + 1) == structural_hash(b + 1)


def test_convert_and_const():
    n = tvm.convert(1024)
    assert isinstance(n, tir.IntImm) and n.value == 1024
    assert str(tir.const(1, "int8").dtype) == "int8"
    assert tir.const(300, "uint8").value == 44  # wraps like the machine type


def test_dtype_errors_name_the_dtype():
    with pytest.raises(ValueError, match="float33"):
        te.placeholder((2,), dtype="float33")


def test_math_needs_float():
    with pytest.raises(TypeError, match="needs a float"):
        te.exp(te.var("i"))


def test_bfloat16_widens_to_float32_and_refuses_float16():
    b16, f32, f16 = te.var("b", "bfloat16"), te.var("f", "float32"), te.var("h", "float16")
    assert str((b16 + f32).dtype) == "float32"
    assert str((b16 * 2).dtype) == "bfloat16"
    with pytest.raises(TypeError, match="cannot combine bfloat16 and float16 without an explicit cast"):
        b16 + f16
