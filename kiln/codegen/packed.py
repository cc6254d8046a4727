"""The packed calling convention (docs/abi.md "Entry points"), described once.

    int32_t name(const KilnValue* args, const int32_t* type_codes, int32_t num_args);

``arguments(func)`` says, for a PrimFunc, what its packed entry reads from each argument slot
and which Vars that defines: a tensor's data pointer (``data + byte_offset``), the symbolic
dimensions first seen in its shape and its symbolic strides (compact row-major, as the ABI
promises); a handle; a scalar, converted when the caller passed the other kind of number. The
LLVM backend (codegen/llvm/function.py) and the C backend (codegen/c.py) each spell these
steps in their own language; neither decides them itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CompileError
from ..ir import expr as E

VALUE_BYTES = 8  # one KilnValue: a union of int64_t, double and void*
TYPE_INT, TYPE_FLOAT = 0, 2  # type codes a caller may give a scalar (KILN_INT, KILN_FLOAT)
# Fields of DLTensor (DLPack v0.8), by index: what the entry reads of a tensor argument.
DLTENSOR_DATA, DLTENSOR_SHAPE, DLTENSOR_BYTE_OFFSET = 0, 4, 6


@dataclass(frozen=True)
class TensorArg:
    """``args[index].v_handle`` is a DLTensor*: ``buffer.data`` is its data + byte_offset;
    ``dims`` ((k, Var)) are read from ``shape[k]``; ``strides`` ((k, Var)) are the compact
    stride of dimension k, the product of the extents after it."""

    index: int
    buffer: object
    dims: tuple
    strides: tuple


@dataclass(frozen=True)
class HandleArg:
    """``args[index].v_handle`` is an opaque pointer, bound to ``var``."""

    index: int
    var: E.Var


@dataclass(frozen=True)
class ScalarArg:
    """``args[index]`` is a number bound to ``var``: read as ``v_float64`` for a float Var
    unless ``type_codes[index] == TYPE_INT`` (then ``v_int64``, converted), as ``v_int64`` for
    an integer Var unless ``type_codes[index] == TYPE_FLOAT`` (then ``v_float64``, truncated)."""

    index: int
    var: E.Var

    @property
    def other_code(self) -> int:
        """The type code that means the caller passed the other kind of number."""
        return TYPE_INT if self.var.dtype.is_float else TYPE_FLOAT


def arguments(func, symbol: str = "") -> list:
    """What the packed entry of ``func`` reads from each argument, in argument order."""
    out, bound = [], set()  # ids of the Vars defined so far
    for i, param in enumerate(func.params):
        buf = func.buffer_map.get(param)
        if buf is None:
            bound.add(id(param))
            out.append(HandleArg(i, param) if param.dtype.is_handle else ScalarArg(i, param))
            continue
        if id(buf.data) in bound:
            raise CompileError(f"{symbol or func.attrs.get('global_symbol', 'main')}: parameters share the "
                               f"storage of buffer {buf.name!r}")
        bound.add(id(buf.data))
        dims = []
        for k, dim in enumerate(buf.shape):
            if isinstance(dim, E.Var) and id(dim) not in bound:
                bound.add(id(dim))
                dims.append((k, dim))
        strides = []
        for k in range(len(buf.strides) - 1, -1, -1):
            s = buf.strides[k]
            if isinstance(s, E.Var) and id(s) not in bound:
                bound.add(id(s))
                strides.append((k, s))
        out.append(TensorArg(i, buf, tuple(dims), tuple(strides)))
    return out
