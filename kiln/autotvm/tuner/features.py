"""Features of a config for the cost model.

- ``knob``: the knob values themselves (split factors as log2, orders, annotations, options).
  Cheap, but only comparable within one task.
- ``itervar``: read from the loop nest the config produces (te lowering, before the TIR passes):
  for each loop around the heaviest store, outermost first, its log2 extent, its kind
  (serial/parallel/vectorized/unrolled), the log2 work below it, and for the store and the
  first loads the log2 stride of the access along that loop. Fixed length, so records of other
  tasks can train the same model (transfer learning).
- ``curve``: for the same accesses, the log2 number of distinct elements touched below each
  loop level (the footprint curve from the innermost loop outwards) and the log2 reuse
  (work / footprint) per level. Captures cache behaviour more directly than strides.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.ir import expr as E
from kiln.ir import stmt as S

MAX_LOOPS = 10
MAX_ACCESSES = 3
_KINDS = (S.ForKind.SERIAL, S.ForKind.PARALLEL, S.ForKind.VECTORIZED, S.ForKind.UNROLLED)


def _log2(x: float) -> float:
    return math.log2(abs(x) + 1.0)


def _eval(e, env: dict) -> float:
    """The value of an index expression with loop variables from ``env`` (others are 0)."""
    match e:
        case E.IntImm() | E.FloatImm():
            return e.value
        case E.Var():
            return env.get(e, 0)
        case E.Add():
            return _eval(e.a, env) + _eval(e.b, env)
        case E.Sub():
            return _eval(e.a, env) - _eval(e.b, env)
        case E.Mul():
            return _eval(e.a, env) * _eval(e.b, env)
        case E.FloorDiv() | E.Div():
            b = _eval(e.b, env)
            return _eval(e.a, env) // b if b else 0
        case E.FloorMod() | E.Mod():
            b = _eval(e.b, env)
            return _eval(e.a, env) % b if b else 0
        case E.Min():
            return min(_eval(e.a, env), _eval(e.b, env))
        case E.Max():
            return max(_eval(e.a, env), _eval(e.b, env))
        case E.Cast():
            return _eval(e.value, env)
        case E.Ramp():
            return _eval(e.base, env)
        case E.Broadcast():
            return _eval(e.value, env)
    return 0


def _const(e) -> int:
    v = getattr(e, "value", None)
    return int(v) if isinstance(v, (int, float)) else 1


class _Access:
    def __init__(self, buffer, indices):
        self.shape = [_const(d) for d in buffer.shape]
        self.indices = indices

    def flat(self, env) -> float:
        total, scale = 0, 1
        for idx, dim in zip(reversed(self.indices), reversed(self.shape)):
            total += _eval(idx, env) * scale
            scale *= dim
        return total


def _stores(stmt, chain, out):
    """(loop chain, store) for every BufferStore under ``stmt``."""
    match stmt:
        case S.For():
            _stores(stmt.body, chain + [stmt], out)
        case S.BufferStore():
            out.append((chain, stmt))
        case S.SeqStmt():
            for s in stmt.seq:
                _stores(s, chain, out)
        case S.IfThenElse():
            _stores(stmt.then_case, chain, out)
            if stmt.else_case is not None:
                _stores(stmt.else_case, chain, out)
        case _:
            body = getattr(stmt, "body", None)
            if body is not None:
                _stores(body, chain, out)


def _loads(e, out):
    if isinstance(e, E.BufferLoad):
        out.append(_Access(e.buffer, e.indices))
    for name in ("a", "b", "value", "condition", "true_value", "false_value", "base"):
        child = getattr(e, name, None)
        if isinstance(child, E.PrimExpr):
            _loads(child, out)
    for arg in getattr(e, "args", ()) if isinstance(e, E.Call) else ():
        _loads(arg, out)
    for idx in getattr(e, "indices", ()) if isinstance(e, E.BufferLoad) else ():
        _loads(idx, out)


def _main_nest(func):
    found: list = []
    _stores(func.body, [], found)
    if not found:
        return [], [], 0
    chain, store = max(found, key=lambda cs: math.prod(_const(f.extent) for f in cs[0]))
    loads: list = []
    _loads(store.value, loads)
    accesses = [_Access(store.buffer, store.indices)] + loads
    return chain, accesses[:MAX_ACCESSES], len(found)


def _strides(chain, accesses):
    """Mean stride of each access along each loop: (f(extent-1) - f(0)) / (extent-1)."""
    out = []
    for loop in chain:
        ext = _const(loop.extent)
        row = []
        for acc in accesses:
            if ext <= 1:
                row.append(0.0)
                continue
            row.append((acc.flat({loop.loop_var: ext - 1}) - acc.flat({})) / (ext - 1))
        out.append(row)
    return out


def _lowered(task, config):
    from kiln.te.lower import lower_to_primfunc
    sch, args = task.instantiate(config)
    return lower_to_primfunc(sch, args, "features")


def itervar(task, config) -> np.ndarray:
    chain, accesses, n_stores = _main_nest(_lowered(task, config))
    strides = _strides(chain, accesses)
    per_loop = 6 + MAX_ACCESSES
    rows = []
    for depth, loop in enumerate(chain):
        ext = _const(loop.extent)
        inner = math.prod(_const(f.extent) for f in chain[depth + 1:])
        kinds = [1.0 if loop.kind == k else 0.0 for k in _KINDS]
        stride = [_log2(s) for s in strides[depth]] + [0.0] * (MAX_ACCESSES - len(accesses))
        rows.append([_log2(ext), *kinds, _log2(inner), *stride])
    rows = rows[-MAX_LOOPS:]  # the innermost loops matter most
    pad = [[0.0] * per_loop] * (MAX_LOOPS - len(rows))
    work = math.prod(_const(f.extent) for f in chain)
    return np.array([v for r in pad + rows for v in r] + [_log2(work), float(n_stores), float(len(chain))],
                    dtype=np.float32)


def curve(task, config) -> np.ndarray:
    chain, accesses, _ = _main_nest(_lowered(task, config))
    strides = _strides(chain, accesses)
    feats = []
    for a in range(MAX_ACCESSES):
        footprint, work, points = 1.0, 1.0, []
        for depth in range(len(chain) - 1, -1, -1):  # innermost outwards
            ext = _const(chain[depth].extent)
            work *= ext
            if a < len(accesses) and strides[depth][a] != 0:
                footprint *= ext
            points.append((_log2(footprint), _log2(work / footprint)))
        points = points[:MAX_LOOPS] + [points[-1] if points else (0.0, 0.0)] * (MAX_LOOPS - len(points))
        feats += [p[0] for p in points] + [p[1] for p in points]
    return np.array(feats, dtype=np.float32)


def knob(task, config) -> np.ndarray:
    del task
    return np.array(config.get_flatten_feature(), dtype=np.float32)


EXTRACTORS = {"knob": knob, "itervar": itervar, "curve": curve}
