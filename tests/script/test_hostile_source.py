"""from_source on hostile text: one ScriptError for NUL characters, deep nesting and integer
literals beyond 64 bits (which used to wrap silently), never another exception."""

import pytest

from kiln.errors import ScriptError
from kiln.script import from_source
from kiln.script.parser import MAX_DEPTH

SRC = '''
@T.prim_func
def f(A: T.Buffer((8,), "int64"), B: T.Buffer((8,), "int64")):
    for i in T.serial(8):
        B[i] = {value}
'''


def test_nul_character_is_refused_with_its_line():
    with pytest.raises(ScriptError, match=r"^line 5, col 0: the source holds a NUL character"):
        from_source(SRC.format(value="A[i] +\0 1"))


@pytest.mark.parametrize("literal", ["9223372036854775808", "99999999999999999999999", "-9223372036854775809",
                                     "0x" + "f" * 40])
def test_integer_literal_beyond_int64_is_refused(literal):
    with pytest.raises(ScriptError, match=r"line 5, col \d+: integer literal .* does not fit in 64 bits"):
        from_source(SRC.format(value=f"A[i] + T.int64({literal})"))


def test_int64_extremes_are_kept_exactly():
    for literal, want in [("9223372036854775807", (1 << 63) - 1), ("-9223372036854775808", -(1 << 63))]:
        func = from_source(SRC.format(value=f"A[i] + T.int64({literal})"))
        assert str(want) in func.script()


@pytest.mark.parametrize("text", ["(" * 300 + "A[i]" + ")" * 300, "A[i]" + " + 1" * 5000, "-" * 3000 + "A[i]"])
def test_deep_nesting_is_refused_not_a_recursion_error(text):
    with pytest.raises(ScriptError, match="nests (more than 100 levels|deeper than Python can parse)|too many nested"):
        from_source(SRC.format(value=text))


def test_nesting_within_the_limit_still_parses():
    depth = MAX_DEPTH - 10  # the statement around the expression takes a few levels
    func = from_source(SRC.format(value="A[i]" + " + 1" * depth))
    assert func.script().count("+ T.int64(1)") == depth


def test_syntax_error_without_a_line_number_is_still_one_script_error():
    with pytest.raises(ScriptError):
        from_source("\ufeff\0")
