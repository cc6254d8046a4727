"""Lower fused primitive functions to TIR, one kernel each, and compile them into one module.

FuseOps leaves ``main`` calling primitive functions (``attrs["Primitive"] == 1``). For each
call, ``TECompiler.lower`` turns the function into TE by calling the computes of
``op_impl.OP_IMPLS`` in dataflow order, schedules the whole group with the schedule of its
*anchor* (the op with the most complex pattern: conv2d, dense, pooling, a reduction...; the
elementwise/injective ops around it are inlined by that schedule), and lowers it to a PrimFunc
named like ``tvmgen_default_fused_nn_conv2d_add_nn_relu``.

Identical functions (same ops, attrs, types and scalar constants; same weight transform) are
lowered once: the cache maps a structural key of the function to its kernel, so the 2nd..nth
identical ResNet block reuse the first one's kernel.

Lowering waits until ``build``: when the build cache (build_cache.py) holds the module of
these kernels, nothing is lowered at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from kiln import te
from kiln.cache import Uncacheable
from kiln.errors import CompileError, KilnError
from kiln.ir.expr import const

from ..expr import Call, Constant, Function, Tuple, TupleGetItem, Var
from ..op.registry import OpDef
from ..ty import TupleType
from ..visitor import post_order
from . import build_cache, dispatch
from .family import target_family
from .op_impl import (GPU_PACKAGES, PACKAGES, SCHEDULES, ComputeCtx, WeightTransform, anchor_of, get_impl,
                      schedule_key)


@dataclass(frozen=True)
class LoweredFunc:
    """One kernel: its symbol, its TIR, and how its constant inputs must be transformed."""

    name: str
    prim_func: object  # None until TECompiler.build lowers it
    transforms: tuple  # WeightTransform per transformed parameter
    num_outputs: int
    scopes: tuple = ((), ())  # storage scope of each parameter and output ("global.texture*": images)


class TECompiler:
    """Lowers primitive functions for one target and builds them into one runtime module."""

    def __init__(self, target, mod_name: str = "default"):
        self.target = target
        self.family = target_family(target)
        self.prefix = f"tvmgen_{_sanitize(mod_name)}_fused_"
        self.cache: dict = {}
        self.lowered: list[LoweredFunc] = []
        self._taken: set[str] = set()
        self._plans: dict[str, tuple] = {}  # kernel name -> what _lower_te needs
        self._parts: list | None = []  # build_cache.kernel_part of each kernel; None: uncacheable
        # kernel name -> the tunable workload it was built for (autotvm.in_model times tuned
        # picks per kernel inside the whole model)
        self.workloads: dict[str, tuple] = {}

    # -- one function --------------------------------------------------------------------------
    def lower(self, func: Function, const_params: frozenset = frozenset(), scopes=None) -> LoweredFunc:
        """The kernel of primitive function ``func``; ``const_params`` are indices of the params
        bound to constants at the call site (their layout may be transformed at build time);
        ``scopes``: (scope of each param, of the output) when some are textures (adreno)."""
        calls = [n for n in post_order(func.body) if isinstance(n, Call) and isinstance(n.op, OpDef)]
        if not calls:
            raise CompileError(f"primitive function has no operator calls: {func}")
        anchor = anchor_of(calls)
        arg_types = [a.checked_type for a in anchor.args]
        workload = dispatch.workload_of(anchor.op.name, anchor.attrs, arg_types, self.family) \
            if all(hasattr(t, "shape") for t in arg_types) else None
        cfg = dispatch.select_config(anchor.op.name, workload, self.target)
        # Under the target: the weights' block derives from its vector width (topi.cpu), and its
        # -texture_spatial_limit decides which weights fit an image (adreno).
        with self.target:
            transform = self._weight_transform(func, anchor, const_params, cfg)
            scopes = self._scopes(func, transform, scopes)
        structure = structural_key(func) if scopes == ((), ()) else (structural_key(func), scopes)
        key = (structure, transform.key + (transform.index,) if transform else None, _cfg_key(cfg))
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        name = self._unique(self.prefix + _sanitize("_".join(c.op.name for c in calls)))
        out_type = func.body.checked_type
        lowered = LoweredFunc(name, None, (transform,) if transform else (),
                              len(out_type.fields) if isinstance(out_type, TupleType) else 1, scopes)
        self._plans[name] = (func, calls, anchor, cfg, transform, scopes)
        if workload is not None:
            self.workloads[name] = workload
        if self._parts is not None:
            try:
                self._parts.append(build_cache.kernel_part(name, key[0], transform, cfg))
            except Uncacheable:
                self._parts = None
        self.cache[key] = lowered
        self.lowered.append(lowered)
        return lowered

    def _lower_all(self) -> None:
        for i, lowered in enumerate(self.lowered):
            if lowered.prim_func is not None:
                continue
            func, calls, anchor, cfg, transform, scopes = self._plans.pop(lowered.name)
            name, ops = lowered.name, ", ".join(c.op.name for c in calls)
            try:
                with self.target:
                    prim = self._lower_te(func, calls, anchor, cfg, transform, name, scopes)
            except KilnError as err:
                raise type(err)(f"{name} (ops {ops}): {err}") from err
            except Exception as err:  # a compute or schedule bug must still say which fused op it was
                raise CompileError(f"{name} (ops {ops}): lowering failed: {type(err).__name__}: {err}") from err
            self.lowered[i] = replace(lowered, prim_func=prim)

    def _scopes(self, func, transform, scopes) -> tuple:
        """(param scopes, output scopes); ((), ()) when every one is "global"."""
        if self.family != "adreno":
            return (), ()
        from . import adreno_textures

        ins, outs = scopes or ((), ())
        ins = list(ins) or ["global"] * len(func.params)
        if transform is not None:
            ins[transform.index] = adreno_textures.weight_scope(
                transform, str(func.params[transform.index].checked_type.dtype))
        outs = tuple(outs) or ("global",)
        if all(x == "global" for x in ins) and all(x == "global" for x in outs):
            return (), ()
        return tuple(ins), outs

    def _weight_transform(self, func, anchor, const_params, cfg) -> WeightTransform | None:
        impl = get_impl(anchor.op.name)
        if self.family == "adreno" and const_params:  # OIHW4o weights of NCHW4c convs
            from . import adreno_textures

            spec = adreno_textures.prepack(anchor.op.name, anchor.attrs, [a.checked_type for a in anchor.args])
        elif impl.prepack is None or not const_params or self.family in GPU_PACKAGES:  # CPU weight layouts
            return None
        else:
            spec = impl.prepack(anchor.attrs, [a.checked_type for a in anchor.args], cfg)
        if spec is None:
            return None
        weight = anchor.args[spec.index]
        if not isinstance(weight, Var) or weight not in func.params:
            return None
        index = list(func.params).index(weight)
        if index not in const_params or _uses(func, weight) != 1:
            return None
        return WeightTransform(index, spec.shape, spec.fn, spec.key, spec.dtype)

    def _lower_te(self, func, calls, anchor, cfg, transform, name, scopes=((), ())):
        from kiln.te.lower import lower_to_primfunc

        inputs = []
        value: dict = {}
        for i, p in enumerate(func.params):
            ty = p.checked_type
            mine = transform is not None and transform.index == i
            shape = transform.shape if mine else tuple(int(d) for d in ty.shape)
            dtype = (transform.dtype if mine else None) or str(ty.dtype)  # a prepack may widen (Cortex-M int16)
            value[p] = te.placeholder(shape, name=f"p{i}", dtype=dtype)
            inputs.append(value[p])
        pkg = PACKAGES[self.family]
        for node in post_order(func.body):
            if node in value:
                continue
            if isinstance(node, Constant):
                value[node] = _scalar(node)
            elif isinstance(node, Tuple):
                value[node] = [value[f] for f in node.fields]
            elif isinstance(node, TupleGetItem):
                value[node] = value[node.tuple_value][node.index]
            elif isinstance(node, Call) and isinstance(node.op, OpDef):
                ctx = ComputeCtx(pkg, cfg if node is anchor else None,
                                 prepacked=bool(transform) and node is anchor)
                args = [value[a] for a in node.args]
                value[node] = get_impl(node.op.name).compute(node.attrs, args, node.checked_type, ctx)
            elif not isinstance(node, (Var, OpDef)):
                raise CompileError(f"cannot lower a {type(node).__name__} inside a fused function")
        out = value[func.body]
        outs = [_materialize(t) for t in (out if isinstance(out, list) else [out])]
        sched = SCHEDULES[schedule_key(anchor.op.name, anchor.attrs)][self.family]
        s = sched(outs)
        ins_scope, outs_scope = scopes
        for t, scope in list(zip(inputs, ins_scope)) + list(zip(outs, outs_scope)):
            if scope != "global":  # an image argument (adreno: docs/adreno.md)
                s[t].set_scope(scope)
        return lower_to_primfunc(s, inputs + outs, name)

    def _unique(self, name: str) -> str:
        if len(name) > 80:  # long fused chains: keep the names readable, the suffix keeps them unique
            name = name[:80].rstrip("_")
        out, k = name, 0
        while out in self._taken:
            k += 1
            out = f"{name}_{k}"
        self._taken.add(out)
        return out

    # -- the module ----------------------------------------------------------------------------
    def build(self):
        """Run the TIR pipeline and code generation over every kernel; a runtime CompiledModule."""
        from kiln import codegen
        from kiln.build_module import lower
        from kiln.ir.module import IRModule

        if not self.lowered:
            return None
        key = build_cache.module_key(self.target, self._parts)
        names = [f.name for f in self.lowered]
        module = build_cache.load(key, names, self.target) if key else None
        if module is not None:
            return module
        self._lower_all()
        mod = IRModule({f.name: f.prim_func for f in self.lowered})
        module = codegen.build(lower(mod), self.target)
        if key:
            build_cache.store(key, module)
        return module


def _scalar(node: Constant):
    """A scalar constant as a 0-d tensor (inlined by every schedule)."""
    data = node.data
    value = data.item()
    return te.compute((), lambda: const(value, str(data.dtype)), name="T_const", tag="elemwise")


def _materialize(t):
    """A kernel output must be computed by the kernel: copy an input passed straight through."""
    if isinstance(t.op, (te.ComputeOp, te.ExternOp)):
        return t
    return te.compute(t.shape, lambda *i: t(*i), name="T_copy", tag="elemwise")


def _uses(func: Function, var: Var) -> int:
    n = 0
    for node in post_order(func.body):
        if isinstance(node, Call):
            n += sum(1 for a in node.args if a is var)
        elif isinstance(node, Tuple):
            n += sum(1 for f in node.fields if f is var)
    return n


def _sanitize(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", text)


def _cfg_key(cfg):
    if cfg is None:
        return None
    index = getattr(cfg, "index", None)
    if index is not None:
        return ("index", index, id(cfg))
    if isinstance(cfg, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in cfg.items()))
    return ("id", id(cfg))


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, float) and v != v:
        return "nan"
    return v


def structural_key(func: Function) -> tuple:
    """A hashable description of a primitive function: equal keys mean the same kernel."""
    index: dict = {}
    items = [tuple(_type_key(p.checked_type) for p in func.params)]
    for i, p in enumerate(func.params):
        index[p] = ("param", i)
    for node in post_order(func.body):
        if node in index:
            continue
        if isinstance(node, Constant):
            item = ("const", str(node.data.dtype), _freeze(node.data))
        elif isinstance(node, Call) and isinstance(node.op, OpDef):
            item = ("call", node.op.name, tuple(index[a] for a in node.args),
                    tuple(sorted((k, _freeze(v)) for k, v in node.attrs.items())))
        elif isinstance(node, Tuple):
            item = ("tuple", tuple(index[f] for f in node.fields))
        elif isinstance(node, TupleGetItem):
            item = ("get", index[node.tuple_value], node.index)
        else:
            item = (type(node).__name__, _ById(id(node)))
        index[node] = len(items)
        items.append(item)
    return tuple(items)


class _ById(int):
    """An object's id in a key: unique within this process, so never written to the build cache."""


def _type_key(ty):
    if isinstance(ty, TupleType):
        return tuple(_type_key(f) for f in ty.fields)
    return (tuple(int(d) for d in ty.shape), str(ty.dtype))
