"""``tvm.tir``: the loop IR nodes, intrinsics and passes."""

from kiln.ir.expr import (  # noqa: F401
    EQ, GE, GT, LE, LT, NE, Add, And, Broadcast, BufferLoad, Call, Cast, Div, FloatImm, FloorDiv,
    FloorMod, IntImm, IterVar, Let, Max, Min, Mod, Mul, Not, Or, PrimExpr, ProducerLoad, Ramp,
    Reduce, Select, SizeVar, StringImm, Sub, Var, cast, const,
)
from kiln.ir.stmt import (  # noqa: F401
    Allocate, AssertStmt, AttrStmt, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse,
    LetStmt, PrimFunc, SeqStmt, Stmt, While, decl_buffer,
)
from kiln.ir.expr import Range  # noqa: F401

from .op import *  # noqa: F401,F403
from .op import abs, all, any, max, min, round, pow  # noqa: F401
from . import transform  # noqa: F401
from . import ir_builder  # noqa: F401,E402
from . import schedule  # noqa: F401,E402
from .schedule import BlockRV, LoopRV, Schedule, TensorIntrin  # noqa: F401,E402
from kiln.ir.block import Block, BlockRealize, BufferRegion  # noqa: F401,E402
