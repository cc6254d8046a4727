"""Small helpers to write lowered TIR by hand in codegen tests (flat indices, handle params)."""

from __future__ import annotations

import kiln as tvm
from kiln.ir import (Allocate, BufferLoad, BufferStore, For, ForKind, IRModule, PrimFunc, Ramp,
                     Var, const, decl_buffer, seq)
from kiln.ir.dtype import HANDLE_T, dtype


def buffer(name, shape, dt="float32"):
    return decl_buffer(shape, dt, name)


def func(name, params, body):
    """A PrimFunc named name; params are Buffers (tensor args) or Vars (scalar args)."""
    handles, bmap = [], {}
    for p in params:
        if isinstance(p, Var):
            handles.append(p)
        else:
            h = Var(p.name + "_handle", HANDLE_T)
            handles.append(h)
            bmap[h] = p
    return PrimFunc(tuple(handles), body, buffer_map=bmap, attrs={"global_symbol": name})


def module(*funcs):
    return IRModule({f.attrs["global_symbol"]: f for f in funcs})


def build(mod_or_func, target="llvm"):
    from kiln import codegen
    if isinstance(mod_or_func, PrimFunc):
        mod_or_func = module(mod_or_func)
    return codegen.build(mod_or_func, target)


def loop(var, extent, body, kind=ForKind.SERIAL, lo=0):
    return For(var, const(lo, var.dtype) if isinstance(lo, int) else lo,
               const(extent, var.dtype) if isinstance(extent, int) else extent, kind, body)


def load(buf, index, dt=None):
    return BufferLoad(buf, (index,), dtype(dt) if dt else buf.dtype)


def store(buf, index, value):
    return BufferStore(buf, value, (index,))


def ramp(base, lanes, stride=1):
    base = const(base) if isinstance(base, int) else base
    return Ramp(base, const(stride, base.dtype), lanes, base.dtype.with_lanes(lanes))


def alloc(buf, count, body):
    return Allocate(buf, (const(count) if isinstance(count, int) else count,), body)


def nd(array):
    return tvm.nd.array(array)


__all__ = ["buffer", "func", "module", "build", "loop", "load", "store", "ramp", "alloc", "nd", "seq", "Var",
           "const"]
