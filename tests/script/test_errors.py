"""Script errors name the line, the column and the offending text, and show the source line."""

import pytest

import kiln as tvm
from kiln.errors import ScriptError
from kiln.script import from_source

SRC = '''
@T.prim_func
def f(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")):
    for i in T.serial(8):
        B[i] = {value}
'''


def _error(value: str) -> str:
    with pytest.raises(ScriptError) as info:
        from_source(SRC.format(value=value))
    return str(info.value)


def test_unknown_name_in_T_suggests_the_right_one():
    msg = _error("T.flaot32(0)")
    assert msg.startswith("line 5, col 16: T.flaot32: unknown name in T (did you mean T.float32?)")
    assert "        B[i] = T.flaot32(0)" in msg and msg.rstrip().endswith("^")


def test_wrong_buffer_rank():
    msg = _error("A[i]")
    assert msg.startswith("line 5, col 16: A[i]: buffer A has 2 dimension(s)")
    assert "indexed with 1" in msg


def test_type_mismatch_on_store():
    assert _error("i").startswith("line 5, col 16: i: type mismatch: storing int32 into B of float32")


def test_unknown_variable_suggests_a_close_one():
    assert "ii: unknown name (did you mean i?)" in _error("T.float32(ii)")


def test_python_syntax_error_points_at_the_column():
    assert _error("A[i, 0] +").startswith("line 5, col 25: invalid Python syntax")


def test_unsupported_python_is_named():
    assert "IfExp is not supported in TVMScript" in _error("1.0 if i > 0 else 0.0")


def test_decorated_function_errors_carry_the_file_line():
    import inspect

    line = inspect.currentframe().f_lineno + 5  # the A[i] = ... line below
    with pytest.raises(ScriptError) as info:
        @tvm.script.tir.prim_func
        def bad(A: tvm.script.tir.Buffer((4,), "float32")):
            for i in T.serial(4):  # noqa: F821 - T is only read by the parser
                A[i] = T.float32(0) + T.nonsense(i)  # noqa: F821
    assert str(info.value).startswith(f"line {line}, col ")
    assert "T.nonsense: unknown name in T" in str(info.value)
    assert "A[i] = T.float32(0) + T.nonsense(i)" in str(info.value)


def test_block_init_outside_a_block():
    text = '''
@T.prim_func
def f(A: T.Buffer((8,), "float32")):
    with T.init():
        A[0] = T.float32(0)
'''
    with pytest.raises(ScriptError, match=r"line 4, col \d+: T.init\(\) is only valid inside a T.block"):
        from_source(text)
