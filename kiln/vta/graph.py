"""Graph packing: a QNN relay graph runs its convolutions and dense layers on the accelerator,
the rest on the CPU.

``graph_pack(mod)`` finds each chain ``qnn.conv2d -> [add int32 constant bias] ->
qnn.requantize -> [clip]`` whose requantize is a power-of-two scale ratio (rounding UPWARD, zero
points 0), whose channels are multiples of the blocks and whose input is not the 3-channel stem,
and compiles it for the accelerator (``top.conv2d`` with the cost model's tile, bias in the
accumulator SRAM, ``(acc + 2**(k-1)) >> k`` and the clip on the ALU). A ``qnn.dense`` chain of
the same form with batch, input and output sizes in whole blocks becomes ``top.dense`` the same
way (``top.dense_tile``: the largest tiles that fit); ResNet-18's 1000-class classifier is not in
whole 16-blocks and stays on the CPU. Everything between those
chains is cut into CPU functions (maximal runs in graph order) compiled by ``relay.build`` for
the host. ``PackedGraph.run(**inputs)`` executes the steps in order, packing activations into
the accelerator's NCHW{n}{c} layout and back at each boundary.

The CPU reference is ``relay.build`` of the same graph: both compute the same integers.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from kiln.errors import CompileError

from . import search, top
from .compiler import build as vta_build
from .environment import get_env


@dataclass
class _Chain:
    root: object  # the last call of the chain (its value leaves the accelerator)
    members: tuple
    data: object  # the int8 input expression
    weight: np.ndarray
    bias: np.ndarray | None
    shift: int
    clip: tuple
    shape: object  # top.ConvShape, or top.DenseShape for a dense chain

    @property
    def kind(self) -> str:
        return "dense" if isinstance(self.shape, top.DenseShape) else "conv2d"


def _const(e):
    from kiln.relay.expr import Constant
    return np.asarray(e.data) if isinstance(e, Constant) else None


def _scalar(e):
    v = _const(e)
    return None if v is None or v.size != 1 else float(v.reshape(()))


def _uses(body) -> dict:
    from kiln.relay.visitor import children, post_order
    count: dict = {}
    for node in post_order(body):
        for c in children(node):
            count[c] = count.get(c, 0) + 1
    return count


def _match(env, call, uses) -> _Chain | None:
    """The chain ending at call (a requantize or the clip after one), or None."""
    from kiln.relay.expr import Call
    name = lambda e: getattr(getattr(e, "op", None), "name", "")  # noqa: E731
    clip, root = (-128, 127), call
    if name(call) == "clip":
        clip = (max(-128, int(call.attrs.a_min)), min(127, int(call.attrs.a_max)))
        call = call.args[0]
        if uses.get(call, 0) != 1:
            return None
    if name(call) != "qnn.requantize" or call.attrs.rounding != "UPWARD" or call.attrs.out_dtype != "int8":
        return None
    req = call
    si, zi, so, zo = (_scalar(a) for a in req.args[1:])
    if None in (si, zi, so, zo) or zi or zo:
        return None
    x, bias, members = req.args[0], None, [req] + ([root] if root is not req else [])
    if name(x) == "add" and uses.get(x, 0) == 1:
        b = _const(x.args[1])
        if b is None or b.dtype != np.int32:
            return None
        bias, members = b.reshape(-1), members + [x]
        x = x.args[0]
    if name(x) == "qnn.dense" and uses.get(x, 0) == 1:
        return _match_dense(env, root, members, x, bias, req, clip, (si, so))
    if name(x) != "qnn.conv2d" or uses.get(x, 0) != 1:
        return None
    conv = x
    w = _const(conv.args[1])
    zx, zw, sx, sw = (_scalar(a) for a in conv.args[2:])
    a = conv.attrs
    data_t = conv.args[0].checked_type
    if w is None or w.dtype != np.int8 or zx or zw or None in (sx, sw) or str(data_t.dtype) != "int8":
        return None
    if a.groups != 1 or tuple(a.dilation) != (1, 1) or a.data_layout != "NCHW" or a.kernel_layout != "OIHW":
        return None
    pad = tuple(a.padding)
    if len(set(pad)) != 1 or a.strides[0] != a.strides[1]:
        return None
    k = _shift_of(si, so, sx, sw)
    if k is None:
        return None
    n, c, h, wd = (int(d) for d in data_t.shape)
    o, _, kh, kw = w.shape
    if c % env.BLOCK_IN or o % env.BLOCK_OUT or n % env.BATCH or (bias is not None and bias.size != o):
        return None
    if not isinstance(root, Call):
        return None
    shape = top.ConvShape(n, c, h, wd, o, kh, kw, int(a.strides[0]), pad[0])
    return _Chain(root, tuple(members + [conv]), conv.args[0], w, bias, int(k), clip, shape)


def _shift_of(si, so, sx, sw):
    """k when the requantize ratio si/so is 2**-k (k >= 0) and si = sx * sw, else None."""
    real = (si / so) if si else 0.0
    k = -math.log2(real) if real > 0 else -1
    if k < 0 or k != int(k) or abs(si - sx * sw) > 1e-12 * abs(si):
        return None
    return int(k)


def _match_dense(env, root, members, dense, bias, req, clip, scales):
    """A ``qnn.dense -> [+ bias] -> requantize -> [clip]`` chain with blocked sizes, or None."""
    from kiln.relay.expr import Call
    w = _const(dense.args[1])
    zx, zw, sx, sw = (_scalar(a) for a in dense.args[2:])
    data_t = dense.args[0].checked_type
    if w is None or w.dtype != np.int8 or w.ndim != 2 or zx or zw or None in (sx, sw) or \
            str(data_t.dtype) != "int8" or len(data_t.shape) != 2 or not isinstance(root, Call):
        return None
    k = _shift_of(*scales, sx, sw)
    m, kk = (int(d) for d in data_t.shape)
    n = w.shape[0]
    if k is None or m % env.BATCH or kk % env.BLOCK_IN or n % env.BLOCK_OUT or \
            (bias is not None and bias.size != n):
        return None
    return _Chain(root, tuple(members + [dense]), dense.args[0], w, bias, k, clip, top.DenseShape(m, kk, n))


class _VTADenseStep:
    def __init__(self, env, chain: _Chain):
        self.chain, self.env = chain, env
        m, k, n = chain.shape.m, chain.shape.k, chain.shape.n
        has_bias = chain.bias is not None
        tn, tk, vt = top.dense_tile(env, m, k, n, bias=has_bias)
        self.tile, self.model_cycles = (tn, tk, vt), None
        tens = top.dense(env, m, k, n, chain.shift, chain.clip, round_half_up=True, bias=has_bias)
        s, args = top.schedule_dense(env, tens, tn, tk, vt)
        self.module = vta_build(s, args, env.target, name="dense", env=env)
        self.weight = top.pack_nk(chain.weight, env.BLOCK_OUT, env.BLOCK_IN)
        if has_bias:
            b = chain.bias.reshape(-1, 1, env.BLOCK_OUT)
            self.bias = np.ascontiguousarray(np.broadcast_to(b, (b.shape[0], env.BATCH, env.BLOCK_OUT)))
        self.out_shape = tuple(int(d.value) for d in args[-1].shape)

    def run(self, x: np.ndarray) -> np.ndarray:
        xp = top.pack_nk(np.ascontiguousarray(x), self.env.BATCH, self.env.BLOCK_IN)
        out = np.empty(self.out_shape, np.int8)
        arrays = [xp, self.weight] + ([self.bias] if self.chain.bias is not None else []) + [out]
        self.module(*arrays)
        self.stats = self.module["dense"].last_stats
        return top.unpack_nk(out)


class _VTAStep:
    def __init__(self, env, chain: _Chain):
        self.chain, self.env = chain, env
        tile, self.model_cycles = search.best(env, chain.shape)
        tens = top.conv2d(env, chain.shape, chain.shift, chain.clip, round_half_up=True, bias=chain.bias is not None)
        s, args = top.schedule_conv2d(env, tens, tile)
        self.tile = tile
        self.module = vta_build(s, args, env.target, name="conv", env=env)
        self.weight = top.pack_oihw(chain.weight, env.BLOCK_OUT, env.BLOCK_IN)
        if chain.bias is not None:
            b = chain.bias.reshape(-1, 1, env.BLOCK_OUT)
            self.bias = np.ascontiguousarray(np.broadcast_to(b, (b.shape[0], env.BATCH, env.BLOCK_OUT)))
        self.out_shape = tuple(int(d.value) for d in args[-1].shape)

    def run(self, x: np.ndarray) -> np.ndarray:
        xp = top.pack_nchw(np.ascontiguousarray(x), self.env.BATCH, self.env.BLOCK_IN)
        out = np.empty(self.out_shape, np.int8)
        arrays = [xp, self.weight] + ([self.bias] if self.chain.bias is not None else []) + [out]
        self.module(*arrays)
        self.stats = self.module["conv"].last_stats
        return top.unpack_nchw(out)


class _CPUStep:
    def __init__(self, nodes: list, inputs: list, outputs: list, target: str):
        import kiln as tvm
        from kiln import relay
        from kiln.contrib import graph_executor
        from kiln.ir.module import IRModule
        from kiln.relay.visitor import ExprMutator

        params = [relay.var(f"in{k}", shape=[int(d) for d in e.checked_type.shape], dtype=str(e.checked_type.dtype))
                  for k, e in enumerate(inputs)]
        mut = ExprMutator()
        mut.memo.update(zip(inputs, params))  # the cut: inputs of the step become parameters
        body = [mut.visit(e) for e in outputs]
        func = relay.Function(params, body[0] if len(body) == 1 else relay.Tuple(body))
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(IRModule.from_expr(func), target=target)
        self.module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        self.inputs, self.outputs = inputs, outputs

    def run(self, values: dict) -> None:
        self.module.set_input(**{f"in{k}": values[e] for k, e in enumerate(self.inputs)})
        self.module.run()
        for k, e in enumerate(self.outputs):
            values[e] = self.module.get_output(k).numpy()


class PackedGraph:
    """The steps of a packed graph; ``run(**inputs)`` returns the outputs as numpy arrays."""

    def __init__(self, params, outputs, steps, chains):
        self.params, self.outputs, self.steps, self.chains = params, outputs, steps, chains

    @property
    def accelerator_steps(self) -> list:
        return [s for kind, s in self.steps if kind == "vta"]

    def set_mode(self, mode: str) -> "PackedGraph":
        """Run the accelerator's steps on the "functional" simulator or the "cycle" model."""
        for step in self.accelerator_steps:
            step.module.set_mode(mode)
        return self

    def run(self, **inputs) -> list:
        values = {p: np.asarray(inputs[p.name_hint]) for p in self.params}
        for kind, step in self.steps:
            if kind == "vta":
                values[step.chain.root] = step.run(values[step.chain.data])
            else:
                step.run(values)
        return [values[o] for o in self.outputs]


def graph_pack(mod, env=None, target: str = "llvm", log=None) -> PackedGraph:
    """Split ``mod["main"]`` (a QNN graph) into accelerator convolutions and CPU functions."""
    from kiln.relay.expr import Call, Constant, Tuple, TupleGetItem, Var
    from kiln.relay.transform import InferType
    from kiln.relay.visitor import children, post_order

    env = env or get_env()
    func = InferType()(mod)["main"]
    uses = _uses(func.body)
    order = [n for n in post_order(func.body) if isinstance(n, (Call, Tuple, TupleGetItem))]
    chains, member = {}, set()
    for node in reversed(order):  # consumers first: a clip takes its requantize into its chain
        ch = _match(env, node, uses) if isinstance(node, Call) and node not in member else None
        if ch is not None and not (set(ch.members) & member):
            member.update(ch.members)
            chains[ch.root] = ch
    outputs = list(func.body.fields) if isinstance(func.body, Tuple) else [func.body]
    steps, pending = [], []

    def flush():
        if not pending:
            return
        inside = set(pending)
        ins, outs = [], []
        for n in pending:
            for c in children(n):
                if c not in inside and not isinstance(c, Constant) and c not in ins and not _is_op(c):
                    ins.append(c)
        for n in pending:
            if n in outputs or any(n in children(m) for m in order if m not in inside):
                outs.append(n)
        t0 = time.perf_counter()
        steps.append(("cpu", _CPUStep(list(pending), ins, outs, target)))
        if log:
            log(f"cpu step: {len(pending)} ops, built in {time.perf_counter() - t0:.1f} s")
        pending.clear()

    for node in order:
        if node in chains:
            flush()
            t0 = time.perf_counter()
            ch = chains[node]
            step = (_VTADenseStep if ch.kind == "dense" else _VTAStep)(env, ch)
            steps.append(("vta", step))
            if log:
                log(f"vta step: {ch.kind} {ch.shape} tile {step.tile}, built in {time.perf_counter() - t0:.1f} s")
        elif node not in member:
            pending.append(node)
    flush()
    for o in outputs:
        if isinstance(o, Var):
            raise CompileError("graph_pack: a graph output is an input variable; nothing to run")
    return PackedGraph(list(func.params), outputs, steps, list(chains.values()))


def _is_op(e) -> bool:
    from kiln.relay.expr import Constant, RelayExpr
    return not isinstance(e, RelayExpr) or isinstance(e, Constant)


def resnet18_qnn(image: int = 224, width: int = 64, seed: int = 0, classes: int = 1000):
    """A ResNet-18 in QNN form with power-of-two scales (activations 2**-4, weights 2**-7) and
    random int8 weights and int32 biases: what ``relay.quantize(weight_scale="power2")`` gives a
    ResNet whose batch norms are folded. Returns an IRModule with input "data" (1, 3, image, image)
    int8 and output the int32 logits of an int8 dense."""
    from kiln import relay
    from kiln.ir.module import IRModule
    from kiln.relay import qnn

    rng = np.random.default_rng(seed)
    sa, sw = 2.0 ** -4, 2.0 ** -7
    C = relay.const

    def conv(x, cin, cout, k, stride, relu):
        fan = cin * k * k
        amp = max(1, int(round(127 * 2.2 / math.sqrt(fan))))
        w = rng.integers(-amp, amp + 1, (cout, cin, k, k)).astype(np.int8)
        y = qnn.op.conv2d(x, C(w), C(0), C(0), C(sa), C(sw), kernel_size=(k, k), channels=cout,
                          strides=(stride, stride), padding=(k // 2, k // 2))
        y = relay.add(y, C(rng.integers(-2000, 2000, (cout, 1, 1)).astype(np.int32)))
        y = qnn.op.requantize(y, C(sa * sw), C(0), C(sa), C(0), out_dtype="int8")
        return relay.clip(y, 0, 127) if relu else y

    def block(x, cin, cout, stride):
        y = conv(conv(x, cin, cout, 3, stride, True), cout, cout, 3, 1, False)
        short = conv(x, cin, cout, 1, stride, False) if stride != 1 or cin != cout else x
        s = qnn.op.add(y, short, C(sa), C(0), C(sa), C(0), C(sa), C(0))
        return relay.clip(s, 0, 127)

    data = relay.var("data", shape=(1, 3, image, image), dtype="int8")
    x = conv(data, 3, width, 7, 2, True)
    x = relay.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1))
    cin = width
    for stage, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
        for b in range(2):
            x = block(x, cin, cout, 2 if stage and not b else 1)
            cin = cout
    x = relay.sum(relay.cast(x, "int32"), axis=(2, 3))  # global pooling, unscaled
    x = qnn.op.requantize(x, C(1.0), C(0), C(64.0), C(0), out_dtype="int8")  # the mean, up to 64/49
    w = rng.integers(-20, 21, (classes, cin)).astype(np.int8)
    logits = qnn.op.dense(x, C(w), C(0), C(0), C(sa), C(sw), units=classes)
    return IRModule.from_expr(relay.Function([data], logits))


def realize_power2(mod):
    """``relay.quantize(weight_scale="power2")`` output (after FakeQuantizationToInteger) in the
    integer form the accelerator runs: each ``dequantize(qnn.conv2d) + float bias`` becomes
    ``qnn.requantize(qnn.conv2d + round(bias / s_acc))`` to the activation scale (a shift: the
    ratio is the power-of-two weight scale when activations share one scale), ReLU of a
    dequantized int8 becomes a clip, an add of dequantized int8 values a ``qnn.add``, and
    ``quantize(dequantize(x))`` at one scale is x. The CPU reference builds this same graph."""
    from kiln import relay
    from kiln.relay import qnn
    from kiln.relay.expr import Call, Constant
    from kiln.relay.transform import InferType
    from kiln.relay.visitor import ExprMutator

    func = InferType()(mod)["main"]
    name = lambda e: getattr(getattr(e, "op", None), "name", "")  # noqa: E731
    C = relay.const

    def deq(e):
        """(int expr, scale) when e is qnn.dequantize(int, scalar scale, zero point 0)."""
        if name(e) == "qnn.dequantize":
            s, z = _scalar(e.args[1]), _scalar(e.args[2])
            if s is not None and z == 0:
                return e.args[0], s
        return None, None

    scales = set()

    class _Scales(ExprMutator):
        def visit_Call(self, call):
            if name(call) == "qnn.quantize" and _scalar(call.args[1]) is not None:
                scales.add(_scalar(call.args[1]))
            return super().visit_Call(call)
    _Scales().visit(func.body)
    if len(scales) != 1:
        raise CompileError(f"realize_power2: activations use {len(scales)} scales; quantize with "
                           "calibrate_mode='global_scale' so one shift requantizes every conv")
    (s_act,) = scales

    def dq(i):
        return qnn.op.dequantize(i, C(np.float32(s_act)), C(0))

    class _Realize(ExprMutator):
        def visit_Call(self, call):
            new = super().visit_Call(call)
            op = name(new)
            if op == "qnn.quantize":
                i, s = deq(new.args[0])
                if i is not None and s == _scalar(new.args[1]) and _is_int8(i):
                    return i
            elif op == "nn.relu":
                i, s = deq(new.args[0])
                if i is not None and _is_int8(i):
                    return dq(relay.clip(i, 0, 127))
            elif op == "add":
                a, b = new.args
                if isinstance(b, Constant) and name(a) == "qnn.dequantize":
                    acc, s_acc = deq(a)
                    if acc is not None and name(acc) == "qnn.conv2d" and b.data.dtype == np.float32:
                        bias = np.rint(b.data / np.float32(s_acc)).astype(np.int32)
                        r = qnn.op.requantize(relay.add(acc, C(bias)), C(np.float32(s_acc)), C(0),
                                              C(np.float32(s_act)), C(0), out_dtype="int8")
                        return dq(r)
                ia, sa_ = deq(a)
                ib, sb_ = deq(b)
                if ia is not None or ib is not None:
                    qa = ia if ia is not None and sa_ == s_act and _is_int8(ia) else \
                        qnn.op.quantize(a, C(np.float32(s_act)), C(0), out_dtype="int8")
                    qb = ib if ib is not None and sb_ == s_act and _is_int8(ib) else \
                        qnn.op.quantize(b, C(np.float32(s_act)), C(0), out_dtype="int8")
                    s = C(np.float32(s_act))
                    return dq(qnn.op.add(qa, qb, s, C(0), s, C(0), s, C(0)))
            return new

    body = _Realize().visit(func.body)
    from kiln.ir.module import IRModule
    return InferType()(IRModule.from_expr(relay.Function(list(func.params), body)))


def _is_int8(e) -> bool:
    from kiln.relay.transform.infer_type import infer
    try:
        return str(infer(e).checked_type.dtype) == "int8"
    except Exception:  # noqa: BLE001 - an expression that does not type: not ours to rewrite
        return False
