"""The module metadata JSON of docs/abi.md, derived from the PrimFuncs' parameters."""

from __future__ import annotations

from ..ir import expr as E


def arg_entry(func, param) -> dict:
    """One entry of a function's "args": tensor (from buffer_map), handle or scalar."""
    buf = func.buffer_map.get(param)
    if buf is not None:
        # The runtime (numpy only) holds bfloat16 tensors as their bits: uint16 arrays (docs/abi.md).
        dtype = "uint16" if buf.dtype.kind == "bfloat" else str(buf.dtype)
        return {"name": buf.name, "kind": "tensor", "dtype": dtype,
                "shape": [_dim(d) for d in buf.shape]}
    if param.dtype.is_handle:
        return {"name": param.name, "kind": "handle", "dtype": "handle"}
    return {"name": param.name, "kind": "scalar", "dtype": str(param.dtype)}


def _dim(d):
    """An int, or the name of the symbolic Var (other expressions as text)."""
    if isinstance(d, E.IntImm):
        return int(d.value)
    if isinstance(d, int):
        return d
    if isinstance(d, E.Var):
        return d.name
    return str(d)


def module_metadata(funcs: list[tuple[str, object]], target, triple: str) -> dict:
    from .. import __version__

    return {
        "abi_version": 1,
        "kiln_version": __version__,
        "target": str(target),
        "triple": triple,
        "device_type": 1,
        "entry": funcs[0][0] if funcs else "",
        "functions": [{"name": name, "args": [arg_entry(f, p) for p in f.params]} for name, f in funcs],
        "device_code": None,
    }
