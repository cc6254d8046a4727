"""The loop IR: expressions, statements, buffers, functions and modules."""

from .block import Block, BlockRealize, BufferRegion
from .dtype import DType, dtype
from .expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, BinaryOp, Broadcast, BufferLoad, Call, Cast, CmpOp, Div,
    FloatImm, FloorDiv, FloorMod, IntImm, IterType, IterVar, Let, Max, Min, Mod, Mul, Node, Not, Or,
    PrimExpr, ProducerLoad, Ramp, Range, Reduce, Select, SizeVar, StringImm, Sub, Var, cast, const,
    convert, size_var, var,
)
from .functor import Mutator, Visitor, post_order_visit, substitute
from .module import GlobalVar, IRModule
from .stmt import (
    Allocate, AssertStmt, AttrStmt, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse,
    LetStmt, PrimFunc, SeqStmt, Stmt, While, decl_buffer, seq,
)
from .structural import assert_structural_equal, structural_equal, structural_hash
from .op_attr import get_op_attr, register_op_attr
from . import printer as _printer  # installs the text form of nodes and modules (Node.script)
