"""TVMScript blocks: parsed into Block/BlockRealize, printed back, reads/writes inferred when absent."""

import pytest

import kiln as tvm
from kiln.errors import ScriptError
from kiln.ir.block import Block, BlockRealize
from kiln.ir.expr import IterType
from kiln.script import from_source, tir as T


@T.prim_func
def implicit(A: T.Buffer((16, 9), "float32"), D: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 8):
        with T.block("D"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                D[vi] = T.float32(0)
            D[vi] = D[vi] + A[vi, vk] + A[vi, vk + 1]


@T.prim_func
def explicit(A: T.Buffer((16, 9), "float32"), D: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 8):
        with T.block("D"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(D[vi], A[vi, vk:vk + 2])
            T.writes(D[vi])
            with T.init():
                D[vi] = T.float32(0)
            D[vi] = D[vi] + A[vi, vk] + A[vi, vk + 1]


def test_a_block_is_kept_with_its_axes_and_init():
    realize = implicit.body.body.body
    assert isinstance(realize, BlockRealize) and isinstance(realize.block, Block)
    blk = realize.block
    assert blk.name_hint == "D" and [iv.var.name for iv in blk.iter_vars] == ["vi", "vk"]
    assert [iv.iter_type for iv in blk.iter_vars] == [IterType.DATA_PAR, IterType.COMM_REDUCE]
    assert [iv.dom.extent.value for iv in blk.iter_vars] == [16, 8]
    assert blk.init is not None


def test_reads_and_writes_are_inferred_when_absent():
    tvm.ir.assert_structural_equal(implicit, explicit)
    # Accesses whose offsets do not compare cover the whole dimension.
    text = implicit.script().replace("A[vi, vk + 1]", "A[vi, 8 - vk]")
    other = from_source("\n".join(line for line in text.splitlines() if "T.reads" not in line))
    assert "T.reads(D[vi], A[vi, 0:9])" in other.script()


@T.prim_func
def every_feature(A: T.Buffer((10, 8), "float32")):
    for i_0, i_1 in T.grid(3, 4):
        for j in T.serial(2, 8):
            with T.block("A"):
                vi = T.axis.spatial(10, i_0 * 4 + i_1)
                vj = T.axis.spatial(T.Range(2, 6), j)
                T.where(i_0 * 4 + i_1 < 10)
                T.reads(A[vi, vj - 2:vj + 1])
                T.writes(A[vi, vj])
                T.block_attr({"note": "kept"})
                tmp = T.alloc_buffer((1,), "float32", scope="local")
                tmp[0] = A[vi, vj - 2] + A[vi, vj]
                A[vi, vj] = tmp[0]


def test_every_block_statement_prints_and_parses_back():
    text = every_feature.script()
    for piece in ('with T.block("A"):', "vj = T.axis.spatial(T.Range(2, 6), j)", "T.where(", "T.reads(A[vi, vj - 2:",
                  'T.block_attr({"note": "kept"})', 'tmp = T.alloc_buffer((1,), "float32", scope="local")'):
        assert piece in text, piece
    blk = every_feature.body.body.body.body.block
    assert [b.name for b in blk.alloc_buffers] == ["tmp"] and blk.annotations == {"note": "kept"}
    tvm.ir.assert_structural_equal(from_source(text), every_feature)


def test_blocks_differing_in_an_axis_kind_are_not_equal():
    other = from_source(implicit.script().replace('T.axis.remap("SR"', 'T.axis.remap("SS"'))
    assert not tvm.ir.structural_equal(other, implicit)


@pytest.mark.parametrize("body, message", [
    ('vi = T.axis.remap("S", [i + 1])', r"T.axis.remap binds loop variables; write vi = T.axis.spatial"),
    ('vi = T.axis.remap("X", [i])', r"unknown axis kind 'X'"),
    ('T.reads(A[0:2, 1])', r"A has 1 dimensions, the region 2"),
    ('T.where(i)', r"T.where needs a bool condition"),
    ('vi = T.axis.remap(3, [i])', r"T.axis.remap takes a string of kinds and a list of loop variables"),
    ('vi = T.axis.spatial((1, 2, 3), i)', r"a block axis domain is an extent, \(begin, end\) or T.Range"),
    ('vi = T.axis.spatial(8, A[0])', r"expected an integer expression, got float32"),
    ('T.reads(A[0:8:2])', r"a region has no step"),
    ('T.writes(A[i:"x"])', r"expected an integer expression"),
])
def test_block_errors_name_the_line(body, message):
    text = f'''
@T.prim_func
def f(A: T.Buffer((8,), "float32")):
    for i in T.serial(8):
        with T.block("A"):
            {body}
            A[i] = T.float32(0)
'''
    with pytest.raises(ScriptError, match=r"line 6, col \d+: .*" + message):
        from_source(text)


@pytest.mark.parametrize("text, message", [
    ('@T.prim_func\ndef f(A: T.Buffer((16, T.Range(0, 4)), "float32")):\n    T.evaluate(0)\n',
     r"line 2, col \d+: .*expected an expression, got Range"),
    ('@T.prim_func\ndef f(A: T.Buffer((16,), "float32")):\n    A[0] = A[1], + A[2]\n',
     r"line 3, col \d+: .*expected an expression, got tuple"),
])
def test_non_expressions_where_expressions_belong(text, message):
    with pytest.raises(ScriptError, match=message):
        from_source(text)
