"""CPU int8 kernels for qnn.conv2d / qnn.dense: the ``conv -> (bias) -> requantize`` chain as one op.

On a CPU with an 8-bit dot product (x86 AVX2 and up: kiln/topi/x86/conv2d_int8.py), a chain

    qnn.requantize(nn.bias_add(qnn.conv2d(x, w, zx, 0, ...), b), si, 0, so, zo)   (or add / no bias)

with a constant weight (per-channel symmetric: kernel zero point 0), u8 data and a groups-1 NCHW
conv becomes ``nn.contrib_conv2d_int8(x_blocked, w_packed, bias, q, shift)``:

- the weight is packed at build time for the kernel's tile (kiln/topi/int8_pack.py);
- the data's zero point moves into the bias at build time: ``sum (x - zx) w = sum x w - zx sum w``
  (``bias = b - zx * sum w`` per output channel), and padding uses ``zx`` (real zero);
- requantize's multiplier per channel is the fixed point ``(q, shift)`` of qnn.requantize, applied
  in the kernel's epilogue with the output zero point and the dtype's clamp (``FLOAT32`` rounding:
  a float32 multiplier per channel, onnxruntime's arithmetic; the shift input is then unused).

Data enters in ``NCHW[ib]c`` and the result leaves in ``NCHW[L]c``; ``layout_transform``s around
the op go back to NCHW for other consumers, and a transform pair between two int8 convs cancels.
On x86 without VNNI, a conv whose weights only partly fit ``vpmaddubsw`` becomes
``nn.contrib_conv2d_int8_mixed`` (per output block the fitting 4-channel units on ``vpmaddubsw``,
the others on ``vpmaddwd``; ``relay.qnn.int8_mixed``). qnn.dense chains become
``nn.contrib_dense_int8`` (plain (M, K) data, (M, N) result), or on an AMX
host with >= 16 rows the AMX conv over the rows as a 1 x M image (``_Rewrite.dense_amx``).
TFLite's two-rounding rescale of convolutions (two qnn.requantize, ``_gemm_first``) fuses as
rounding ``GEMM``. Everything else (grouped convs, non-zero kernel zero points, TFLITE rounding) is
left to CanonicalizeOps. The integers are those of the canonical path, bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..expr import Call, Constant, Tuple, TupleGetItem, const
from ..op import nn as fnn
from ..op import nn_norm as fnorm
from ..op import nn_pool as fpool
from ..op import tensor as ft
from ..op import transform as ftf
from ..op.registry import OpDef, OpPattern, RelCtx
from ..ty import TensorType
from ..transform.infer_type import infer
from ..visitor import ExprMutator, ExprVisitor
from .fixed_point import dtype_range, float32_multiplier, requantize_float32
from .op import core as qcore
from .op import elemwise as qelem
from .op import nn as qnn_nn
from .op.core import multiplier
from .op.params import value_of
from . import qlinear_add as _qlinear_add

_CONV_ATTRS = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "pad_value": 0, "out_zp": 0,
               "out_dtype": "uint8", "rounding": "UPWARD", "tier": "vnni", "channels": 0, "float_clamp": True}
_DENSE_ATTRS = {"units": 0, "out_zp": 0, "out_dtype": "uint8", "rounding": "UPWARD", "tier": "vnni",
                "float_clamp": True}


# -- the ops -------------------------------------------------------------------------------------

def _conv_rel(ctx: RelCtx):
    d = ctx.ndim(0, 5, "NCHW[ib]c uint8")
    w = ctx.tensor(1)
    a = ctx.attrs
    n, _, h, wd, _ = (int(v) for v in d.shape)
    kh, kw = (3, 3) if a.tier == "wino16" else (int(w.shape[2]), int(w.shape[3]))
    lanes = int(w.shape[-2])
    pt, pl, pb, pr = a.padding
    oh = (h + pt + pb - (kh - 1) * a.dilation[0] - 1) // a.strides[0] + 1
    ow = (wd + pl + pr - (kw - 1) * a.dilation[1] - 1) // a.strides[1] + 1
    return TensorType((n, int(w.shape[0]), oh, ow, lanes), a.out_dtype)


def _lanes_of(w_shape, tier) -> int:
    return int(w_shape[-2])


def _unpack_conv_weight(w, tier):
    """Packed -> OIHW int64 (the inverse of int8_pack.pack_conv_weight / the Winograd packing)."""
    if tier == "wino16":
        from kiln.topi.x86.conv2d_int8_winograd import unpack_weight
        return unpack_weight(w)
    w = np.asarray(w, np.int64)
    if tier == "pmaddwd":  # (.., icq, 2, L, 2) -> (.., icq, L, 4)
        w = w.swapaxes(-3, -2).reshape(w.shape[:-3] + (w.shape[-2], 4))
    occ, cc, kh, kw, icq, lanes, _ = w.shape
    return w.transpose(0, 5, 1, 4, 6, 2, 3).reshape(occ * lanes, cc * icq * 4, kh, kw)


def _requant_np(acc, bias, q, s, a, axis):
    x = acc + np.expand_dims(bias, tuple(i for i in range(acc.ndim) if i != axis)).astype(np.int64) \
        if acc.ndim > 1 else acc + bias
    shape = [1] * acc.ndim
    shape[axis] = -1
    q, s = q.reshape(shape), s.reshape(shape)
    lo, hi = dtype_range(a.out_dtype)
    rounding = a.rounding.replace("_SPLIT", "")  # the same integers, computed otherwise by the kernel
    if rounding == "FLOAT32":
        return np.clip(requantize_float32(x, q) + a.out_zp, lo, hi).astype(a.out_dtype)
    if rounding == "GEMM":  # TFLite's two roundings half up (x86/conv2d_int8.requantize_epilogue)
        high = np.right_shift(x * q + (1 << 30), 31)
        k = s - 31
        return np.clip(np.right_shift(high + np.right_shift(np.left_shift(1, k), 1), k) + a.out_zp,
                       lo, hi).astype(a.out_dtype)
    p = x * q + np.left_shift(np.int64(1), s - 1)
    if rounding == "TONEAREST":
        p = p - (x < 0)
    return np.clip(np.right_shift(p, s) + a.out_zp, lo, hi).astype(a.out_dtype)


def _blocked_conv_ref(a, x, oihw, lanes: int, bias, q, s):
    """The requantized NCHW[lanes]c result of u8 NCHW[ib]c data ``x`` x OIHW int64 weights ``oihw``."""
    n, cc, h, wd, ib = x.shape
    plain = x.transpose(0, 1, 4, 2, 3).reshape(n, cc * ib, h, wd).astype(np.int64)
    pt, pl, pb, pr = a.padding
    plain = np.pad(plain, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=a.pad_value)
    acc = fnn.conv2d_nchw_ref(plain, oihw, a.strides, (0, 0, 0, 0), a.dilation, 1)
    out = _requant_np(np.asarray(acc, np.int64), bias, q, s, a, 1)
    o = out.shape[1]
    return np.ascontiguousarray(out.reshape(n, o // lanes, lanes, *out.shape[2:]).transpose(0, 1, 3, 4, 2))


def _conv_ref(a, x, w, bias, q, s):
    return _blocked_conv_ref(a, x, _unpack_conv_weight(w, a.tier), _lanes_of(w.shape, a.tier), bias, q, s)


CONV2D_INT8 = OpDef("nn.contrib_conv2d_int8", ("data", "weight", "bias", "multiplier", "shift"), dict(_CONV_ATTRS),
                    _conv_rel, OpPattern.OUT_ELEMWISE_FUSABLE, _conv_ref,
                    doc="u8 NCHW[ib]c conv x packed s8 weights, requantized per channel (qnn/cpu_int8.py)")


def _mixed_rel(ctx: RelCtx):
    d = ctx.ndim(0, 5, "NCHW[ib]c uint8")
    w = ctx.tensor(1)
    a = ctx.attrs
    n, _, h, wd, _ = (int(v) for v in d.shape)
    kh, kw = a.kernel_size
    pt, pl, pb, pr = a.padding
    oh = (h + pt + pb - (kh - 1) * a.dilation[0] - 1) // a.strides[0] + 1
    ow = (wd + pl + pr - (kw - 1) * a.dilation[1] - 1) // a.strides[1] + 1
    return TensorType((n, int(w.shape[0]), oh, ow, int(w.shape[2])), a.out_dtype)


def _mixed_ref(a, x, w, w16, table, bias, q, s):
    from kiln.topi.int8_pack import unpack_mixed_conv_weight

    _, cc, _, _, ib = x.shape
    kh, kw = a.kernel_size
    lanes = w.shape[2]
    oihw = unpack_mixed_conv_weight(w, w16, table[..., :4], (w.shape[0] * lanes, cc * ib, kh, kw), ib)
    return _blocked_conv_ref(a, x, oihw.astype(np.int64), lanes, bias, q, s)


# AVX2 / AVX-512BW without VNNI, weights of which only some units fit vpmaddubsw
# (x86/conv2d_int8.py conv2d_int8_mixed_acc; int8_pack.plan_mixed_conv_weight)
CONV2D_INT8_MIXED = OpDef("nn.contrib_conv2d_int8_mixed",
                          ("data", "weight", "weight16", "table", "bias", "multiplier", "shift"),
                          dict(_CONV_ATTRS, tier="mixed", kernel_size=(1, 1)), _mixed_rel,
                          OpPattern.OUT_ELEMWISE_FUSABLE, _mixed_ref,
                          doc="u8 NCHW[ib]c conv: per output block the units that fit vpmaddubsw on it, the "
                              "others on vpmaddwd (int16), requantized per channel (qnn/cpu_int8.py)")


def _depthwise_rel(ctx: RelCtx):
    d = ctx.ndim(0, 5, "NCHW[b]c uint8")
    w = ctx.tensor(1)
    a = ctx.attrs
    n, cc, h, wd, b = (int(v) for v in d.shape)
    kh, kw = int(w.shape[1]), int(w.shape[2])
    pt, pl, pb, pr = a.padding
    oh = (h + pt + pb - (kh - 1) * a.dilation[0] - 1) // a.strides[0] + 1
    ow = (wd + pl + pr - (kw - 1) * a.dilation[1] - 1) // a.strides[1] + 1
    return TensorType((n, cc, oh, ow, b), a.out_dtype)


def _depthwise_ref(a, x, w, bias, q, s):
    n, cc, h, wd, b = x.shape
    plain = x.transpose(0, 1, 4, 2, 3).reshape(n, cc * b, h, wd).astype(np.int64)
    pt, pl, pb, pr = a.padding
    plain = np.pad(plain, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=a.pad_value)
    oihw = np.asarray(w, np.int64).transpose(0, 3, 1, 2).reshape(cc * b, 1, w.shape[1], w.shape[2])
    acc = fnn.conv2d_nchw_ref(plain, oihw, a.strides, (0, 0, 0, 0), a.dilation, cc * b)
    out = _requant_np(np.asarray(acc, np.int64), bias, q, s, a, 1)
    return np.ascontiguousarray(out.reshape(n, cc, b, *out.shape[2:]).transpose(0, 1, 3, 4, 2))


DEPTHWISE_INT8 = OpDef("nn.contrib_depthwise_conv2d_int8", ("data", "weight", "bias", "multiplier", "shift"),
                       {k: v for k, v in _CONV_ATTRS.items() if k != "tier"}, _depthwise_rel,
                       OpPattern.OUT_ELEMWISE_FUSABLE, _depthwise_ref,
                       doc="u8 NCHW[b]c depthwise conv x s8 (C/b, KH, KW, b) weights, requantized per channel")


def _dense_rel(ctx: RelCtx):
    d = ctx.ndim(0, 2, "(M, K) uint8")
    return TensorType((int(d.shape[0]), ctx.attrs.units), ctx.attrs.out_dtype)


def _unpack_dense_weight(w, tier):
    w = np.asarray(w, np.int64)
    if tier == "pmaddwd":  # (N/L, K/4, 2, L, 2) -> (N/L, K/4, L, 4)
        w = w.swapaxes(-3, -2).reshape(w.shape[:-3] + (w.shape[-2], 4))
    nc, kq, lanes, _ = w.shape
    return w.transpose(0, 2, 1, 3).reshape(nc * lanes, kq * 4)


def _dense_ref(a, x, w, bias, q, s):
    full = _unpack_dense_weight(w, a.tier)
    acc = x.astype(np.int64) @ full.T
    units = a.units
    return _requant_np(acc[:, :units], bias[:units], q[:units], s[:units], a, 1)


DENSE_INT8 = OpDef("nn.contrib_dense_int8", ("data", "weight", "bias", "multiplier", "shift"), dict(_DENSE_ATTRS),
                   _dense_rel, OpPattern.OUT_ELEMWISE_FUSABLE, _dense_ref,
                   doc="u8 (M, K) x packed s8 weights, requantized per output (qnn/cpu_int8.py)")



def _bmm_rel(ctx: RelCtx):
    x, y = ctx.ndim(0, 3, "(B, M, K) uint8"), ctx.ndim(1, 3, "(B, K, N) or (B, N, K)")
    n = int(y.shape[1] if ctx.attrs.transpose_b else y.shape[2])
    return TensorType((int(x.shape[0]), int(x.shape[1]), n), "int32")


def _bmm_ref(a, x, y):
    yy = y.astype(np.int64) - a.shift
    yy = yy.transpose(0, 2, 1) if a.transpose_b else yy
    return np.matmul(x.astype(np.int64), yy).astype(np.int32)


BATCH_MATMUL_INT8 = OpDef("nn.contrib_batch_matmul_int8", ("x", "y"), {"transpose_b": True, "shift": 0, "lanes": 16},
                          _bmm_rel,
                          OpPattern.OUT_ELEMWISE_FUSABLE, _bmm_ref,
                          doc="int32 sum_k x[b, m, k] (y[b, k, n] - shift): u8 x s8 on vpdpbusd, y packed per call")

OPS = [CONV2D_INT8, CONV2D_INT8_MIXED, DEPTHWISE_INT8, DENSE_INT8, BATCH_MATMUL_INT8]


# -- the rewrite ---------------------------------------------------------------------------------

def x86_plan(target):
    """(tier, widest lanes, AMX) for an x86 llvm target with an 8-bit dot product, else None.
    ``PassContext(config={"relay.qnn.int8_amx": False})`` keeps AMX hosts on VNNI."""
    from kiln.transform import PassContext

    if target is None or target.kind.name != "llvm":
        return None
    from ..backend.family import target_family
    family = target_family(target)
    if family == "arm_cpu":
        from kiln.topi.arm_cpu.int8_intrin import int8_tier as arm_tier
        tier = arm_tier(target)
        return None if tier is None else tier + (False,)
    if family != "x86":
        return None
    from kiln.target.cpu_facts import cpu_facts
    from kiln.topi.x86.conv2d_int8 import int8_tier
    tier = int8_tier(target)
    if tier is None:
        return None
    amx = "amx-int8" in cpu_facts(target).features and \
        PassContext.current().config.get("relay.qnn.int8_amx", True)
    return tier + (amx,)


AMX_MIN_CHANNELS = 64  # input channels from which a conv runs on AMX tiles (see _Rewrite.conv)
AMX_MIN_DENSE_INPUTS = 128  # and a dense (_Rewrite.dense_amx)


class _Rewrite(ExprMutator):
    def __init__(self, plan):
        super().__init__()
        self.tier, self.lanes, self.amx = plan
        self.blocked: dict = {}  # id(NCHW view of an int8 conv) -> (the blocked call, its block)
        self.views: dict = {}    # (id(x), ib) -> x as NCHW[ib]c, shared by its consumers
        self.keep: list = []     # the keys' nodes stay alive, so their ids stay unique
        self.first = None        # the int32 first step of the requantize being fused (_gemm_first)

    def visit_Function(self, f):
        if f.attrs.get("Primitive"):
            return f
        return super().visit_Function(f)

    def visit_Call(self, call):
        new = super().visit_Call(call)
        if new.op in (qelem.ADD, qelem.SUBTRACT, qelem.MUL):
            return self.blocked_binary(new)
        if new.op is qnn_nn.BATCH_MATMUL:
            return self.batch_matmul(new)
        if new.op is fpool.MAX_POOL2D and new.attrs.layout == "NCHW":
            return self.blocked_pool(new)
        if new.op in (ft.ADD, ft.SUBTRACT, ft.MULTIPLY, ft.MAXIMUM, ft.MINIMUM, ftf.CAST, qcore.QUANTIZE,
                      qcore.DEQUANTIZE):
            return self.blocked_elemwise(new)
        if new.op is not qcore.REQUANTIZE:
            return new
        first = _gemm_first(new)
        if first is not None and np.size(value_of(new.args[1])) > 1 and new.attrs.axis != first.attrs.axis:
            return new
        chain = _match(new if first is None else first)
        if chain is None:
            return self.blocked_elemwise(new)
        mm, bias = chain
        self.first = first
        try:
            if mm.op is qnn_nn.CONV2D:
                return self.conv(mm, bias, new)
            return self.dense(mm, bias, new)
        except _Skip:
            return new

    def data_ok(self, dtype: str) -> bool:
        """x86 multiplies u8 data (qnn.Legalize makes it so), sdot s8; NEON widens either."""
        return dtype == {"sdot": "int8", "neon": dtype if dtype in ("int8", "uint8") else ""}.get(self.tier, "uint8")

    def _record(self, blocked, block: int):
        """The NCHW view of ``blocked`` (NCHW{block}c), remembered for blocked consumers."""
        plain = ftf.layout_transform(blocked, f"NCHW{block}c", "NCHW")
        self.blocked[id(plain)] = (blocked, block)
        return plain

    def to_block(self, x, block: int):
        got = self.blocked.get(id(x))
        if got is not None and got[1] == block:
            return got[0]
        key = (id(x), block)
        if key not in self.views:
            self.keep.append(x)
            self.views[key] = ftf.layout_transform(x, "NCHW", f"NCHW{block}c")
        return self.views[key]

    def blocked_binary(self, call):
        """A qnn add/subtract/mul of an int8 conv's result stays blocked (fused into its kernel)."""
        a, b = call.args[:2]
        known = [self.blocked.get(id(v)) for v in (a, b)]
        if not any(known) or any(value_of(p) is None or value_of(p).size != 1 for p in call.args[2:]):
            return call
        shapes = [tuple(int(d) for d in infer(v).checked_type.shape) for v in (a, b)]
        block = next(k for k in known if k)[1]
        if shapes[0] != shapes[1] or len(shapes[0]) != 4 or shapes[0][1] % block:
            return call
        out = Call(call.op, [self.to_block(a, block), self.to_block(b, block), *call.args[2:]], call.attrs)
        return self._record(out, block)

    def blocked_elemwise(self, call):
        """An elementwise op of an int8 kernel's result and scalar constants (or another blocked
        result of its shape and block), or a qnn.requantize of it with scalar parameters, stays
        blocked, so it fuses into the kernel: TFLite's activation clamps, its ADD (shifts, three
        requantizes, an add: frontend/tflite/qnn_elementwise.py) and the int8 -> uint8 shift that
        qnn.Legalize puts before the next conv (``cast(x + 128)``) then cost no pass of their own
        and no layout_transform pair around them."""
        got = self.blocked.get(id(call.args[0]))
        if got is None:
            return call
        blocked, block = got
        args = [blocked]
        shape = infer(call.args[0]).checked_type.shape
        for a in call.args[1:]:
            other = self.blocked.get(id(a))
            if other is not None and other[1] == block and infer(a).checked_type.shape == shape:
                args.append(other[0])
            elif isinstance(a, Constant) and a.data.size == 1 and a.data.ndim <= len(shape):
                args.append(a)
            else:
                return call
        return self._record(Call(call.op, args, call.attrs), block)

    def visit_TupleGetItem(self, t):
        value = self.visit(t.tuple_value)
        if isinstance(value, Call) and value.op is fnorm.BATCH_NORM and t.index == 0:
            got = self.blocked_batch_norm(value)
            if got is not None:
                return got
        return t if value is t.tuple_value else TupleGetItem(value, t.index)

    def blocked_batch_norm(self, bn):
        """``batch_norm(dequantize(int8 kernel's result))[0]`` stays blocked: a QDQ model whose batch
        norms were not folded into the convs before quantization (onnxruntime's quant_pre_process
        leaves them on some versions) has ``DQ -> BatchNormalization -> Q`` after every conv; in
        NCHW it costs two layout_transforms and a pass of its own per conv. The per-channel scale
        and shift are SimplifyInference's (``x * scale + shift``, the same float operations on every
        element), laid out as ``(1, C/b, 1, 1, b)``, so the result is the plain path's bit for bit."""
        data, gamma, beta, mean, var = bn.args
        got = self.blocked.get(id(data))
        shape = infer(data).checked_type.shape
        if got is None or len(shape) != 4 or bn.attrs.axis % 4 != 1:
            return None
        blocked, block = got
        channels = int(shape[1])
        if channels % block:
            return None
        a = bn.attrs
        inv_std = ft.rsqrt(ft.add(var, const(a.epsilon, infer(data).checked_type.dtype)))
        scale = ft.multiply(inv_std, gamma) if a.scale else inv_std
        shift = ft.negative(ft.multiply(mean, scale))
        if a.center:
            shift = ft.add(shift, beta)
        per_block = (1, channels // block, 1, 1, block)
        out = ft.add(ft.multiply(blocked, ftf.reshape(scale, per_block)), ftf.reshape(shift, per_block))
        return self._record(out, block)

    def blocked_pool(self, call):
        got = self.blocked.get(id(call.args[0]))
        if got is None:
            return call
        blocked, block = got
        return self._record(Call(call.op, [blocked], call.attrs.with_changes(layout=f"NCHW{block}c")), block)

    def _tier_for(self, w_cin_axis_major: np.ndarray) -> str:
        from kiln.topi.int8_pack import pairs_fit_int16
        if self.tier in ("vnni", "sdot", "neon"):
            return self.tier
        return "pmaddubsw" if pairs_fit_int16(w_cin_axis_major, 1) else "pmaddwd"

    def conv(self, mm, bias, rq):
        from kiln.topi.int8_pack import pack_conv_weight, pad_channels, plan_mixed_conv_weight
        from kiln.topi.x86.conv2d_int8 import block_for

        a = mm.attrs
        x, w, zx = mm.args[0], mm.args[1].data, value_of(mm.args[2])
        if a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or not self.data_ok(_dtype(x)):
            raise _Skip
        if a.groups > 1 and a.groups == w.shape[0] and w.shape[1] == 1:
            return self.depthwise(mm, bias, rq)
        if a.groups != 1:
            raise _Skip
        o = w.shape[0]
        lanes = block_for(o, self.lanes)
        if not lanes:
            raise _Skip
        w4 = pad_channels(w, 1, 4)
        cin = w4.shape[1]
        ib = block_for(cin, self.lanes)
        tier = self._tier_for(w4)
        # AMX from 64 input channels: measured here (one core), 512->512 3x3 at 7x7 took 0.25 ms
        # on tiles and 1.9 ms with vpdpbusd, 256->64 1x1 at 56x56 0.13 / 0.27 ms; 64-channel
        # inputs ran faster with vpdpbusd (64->64 3x3: 0.53 / 0.46 ms) while the tiles' int32
        # sums went through memory, and slower since the kernel requantizes them from L1 (64->64
        # 3x3 at 56x56 0.09 ms on tiles, 64->256 1x1 0.35 / 0.41 ms; ResNet-50 8.9 -> 8.0 ms).
        if self.amx and block_for(o, 64) % 16 == 0 and block_for(cin, 64) >= 16 and cin >= AMX_MIN_CHANNELS:
            from kiln.topi.x86.amx_int8 import applies
            if applies(block_for(cin, 64), block_for(o, 64)):
                tier, ib, lanes = "amx", block_for(cin, 64), block_for(o, 64)
        if tier in ("pmaddwd", "pmaddubsw") and self._winograd(w4, a):
            tier = "wino16"
        wsum = w.astype(np.int64).sum(axis=(1, 2, 3))
        total, q, s, attrs = self._epilogue(rq, bias, wsum, int(zx.ravel()[0]), o, w[0].size)
        data = self.blocked_input(x, cin, ib, int(zx.ravel()[0]))
        if tier == "wino16":
            from kiln.topi.x86.conv2d_int8_winograd import pack_weight
            packed = pack_weight(w4, ib, lanes)
        elif tier == "pmaddwd" and self._mixed_ok() and (parts := plan_mixed_conv_weight(w4, ib, lanes)):
            from kiln.topi.x86.conv2d_int8 import mixed_table
            table = mixed_table(parts[2], infer(data).checked_type.shape, w4.shape[2:], a.strides, a.padding,
                                a.dilation)
            return self._record(CONV2D_INT8_MIXED(
                data, const(parts[0]), const(parts[1]), const(table), const(total), const(q), const(s),
                strides=tuple(a.strides), padding=tuple(a.padding), dilation=tuple(a.dilation),
                pad_value=int(zx.ravel()[0]), channels=o, kernel_size=tuple(int(k) for k in w4.shape[2:]), **attrs),
                lanes)
        else:
            packed = pack_conv_weight(w4, ib, lanes, tier == "pmaddwd")
        out = CONV2D_INT8(data, const(packed), const(total), const(q), const(s), strides=tuple(a.strides),
                          padding=tuple(a.padding), dilation=tuple(a.dilation), pad_value=int(zx.ravel()[0]),
                          tier=tier, channels=o, **attrs)
        return self._record(out, lanes)

    @staticmethod
    def _mixed_ok() -> bool:
        """``PassContext(config={"relay.qnn.int8_mixed": False})`` keeps weights that do not all fit
        vpmaddubsw wholly on the 16-bit tier (x86 without VNNI)."""
        from kiln.transform import PassContext

        return bool(PassContext.current().config.get("relay.qnn.int8_mixed", True))

    @staticmethod
    def _winograd(w4, a) -> bool:
        """x86 without VNNI: 3x3 stride-1 convs by exact 16-bit Winograd (x86/conv2d_int8_winograd.py),
        2.25x fewer products; ``PassContext(config={"relay.qnn.int8_winograd": False})`` keeps
        them direct."""
        from kiln.topi.x86.conv2d_int8_winograd import applies
        from kiln.transform import PassContext

        return PassContext.current().config.get("relay.qnn.int8_winograd", True) and \
            applies(w4.shape[2:], a.strides, a.dilation, w4.shape[1])

    def depthwise(self, mm, bias, rq):
        from kiln.topi.x86.conv2d_int8 import block_for

        a = mm.attrs
        x, w, zx = mm.args[0], mm.args[1].data, int(value_of(mm.args[2]).ravel()[0])
        c = w.shape[0]
        got = self.blocked.get(id(x))
        block = got[1] if got is not None and c % got[1] == 0 else block_for(c, self.lanes)
        if not block or int(infer(x).checked_type.shape[1]) != c:
            raise _Skip
        wsum = w.astype(np.int64).sum(axis=(1, 2, 3))
        total, q, s, attrs = self._epilogue(rq, bias, wsum, zx, c, w[0].size)
        kh, kw = w.shape[2:]
        packed = np.ascontiguousarray(w.reshape(c // block, block, kh, kw).transpose(0, 2, 3, 1))
        out = DEPTHWISE_INT8(self.to_block(x, block), const(packed), const(total), const(q), const(s),
                             strides=tuple(a.strides), padding=tuple(a.padding), dilation=tuple(a.dilation),
                             pad_value=zx, channels=c, **attrs)
        return self._record(out, block)

    def blocked_input(self, x, cin, ib, zx):
        """``x`` as NCHW[ib]c (channels padded to ``cin``); reuses a blocked producer."""
        c = int(infer(x).checked_type.shape[1])
        if cin == c:
            return self.to_block(x, ib)
        key = (id(x), ib, "padded")
        if key not in self.views:
            self.keep.append(x)
            y = fnn.pad(x, ((0, 0), (0, cin - c), (0, 0), (0, 0)), pad_value=float(zx))
            self.views[key] = ftf.layout_transform(y, "NCHW", f"NCHW{ib}c")
        return self.views[key]

    def dense(self, mm, bias, rq):
        from kiln.topi.int8_pack import pack_dense_weight, pad_channels
        from kiln.topi.x86.conv2d_int8 import block_for

        x, w, zx = mm.args[0], mm.args[1].data, value_of(mm.args[2])
        if not self.data_ok(_dtype(x)) or len(infer(x).checked_type.shape) != 2:
            raise _Skip
        n = w.shape[0]
        amx = self.dense_amx(x, w, int(zx.ravel()[0]), bias, rq)
        if amx is not None:
            return amx
        lanes = block_for(n, self.lanes) or min(self.lanes, 16)
        w4 = pad_channels(pad_channels(w, 1, 4), 0, lanes)
        tier = self._tier_for(w4)
        wsum = w.astype(np.int64).sum(axis=1)
        total, q, s, attrs = self._epilogue(rq, bias, wsum, int(zx.ravel()[0]), n, w.shape[1])
        pad_n = w4.shape[0] - n
        total, q, s = (np.pad(v, (0, pad_n)) for v in (total, q, s))
        s = np.where(s == 0, 31, s)
        k = int(infer(x).checked_type.shape[1])
        if w4.shape[1] != k:
            x = fnn.pad(x, ((0, 0), (0, w4.shape[1] - k)), pad_value=0.0)
        packed = pack_dense_weight(w4, lanes, tier == "pmaddwd")
        return DENSE_INT8(x, const(packed), const(total), const(q), const(s), units=n, tier=tier, **attrs)

    def batch_matmul(self, call):
        """qnn.batch_matmul of two run-time tensors on x86 VNNI (topi/x86/batch_matmul_int8.py):
        ``sum (x - zx)(y - zy) = sum x y' - zy' sum x - zx sum y' + K zx zy'`` with ``y' = y - shift``
        (a u8 ``y`` shifted to s8 by 128, ``zy' = zy - shift``); the int32 result is the canonical
        path's. Elsewhere (no VNNI, transpose_a, non-constant zero points) CanonicalizeOps lowers it."""
        x, y, zx, zy = call.args[:4]
        vzx, vzy = value_of(zx), value_of(zy)
        if self.tier != "vnni" or call.attrs.transpose_a or vzx is None or vzy is None or vzx.size != 1 or \
                vzy.size != 1 or _dtype(x) != "uint8" or _dtype(y) not in ("uint8", "int8"):
            return call
        tb = bool(call.attrs.transpose_b)
        xs, ys = (tuple(int(d) for d in infer(v).checked_type.shape) for v in (x, y))
        n = ys[1] if tb else ys[2]
        if n % self.lanes:
            return call
        from ..op import reduce as fred
        from ..op import tensor as ft

        k = xs[2]
        shift = 128 if _dtype(y) == "uint8" else 0
        izx, izy = int(vzx.ravel()[0]), int(vzy.ravel()[0]) - shift
        out = BATCH_MATMUL_INT8(x, y, transpose_b=tb, shift=shift, lanes=self.lanes)
        if izy:
            xsum = fred.sum(ftf.cast(x, "int32"), axis=2, keepdims=True)
            out = ft.subtract(out, ft.multiply(xsum, const(np.int32(izy))))
        if izx:
            ysum = fred.sum(ftf.cast(y, "int32"), axis=2 if tb else 1, keepdims=True)
            ysum = ftf.transpose(ysum, (0, 2, 1)) if tb else ysum
            out = ft.subtract(out, ft.multiply(ysum, const(np.int32(izx))))
        const_term = k * izx * izy + k * izx * shift  # the -zx * (-K * shift) of sum y' and K zx zy'
        if const_term:
            out = ft.add(out, const(np.int32(const_term)))
        return out

    def dense_amx(self, x, w, zx: int, bias, rq):
        """A dense of >= 16 rows, >= 128 inputs and 16k outputs on an AMX host: the AMX conv's
        tile loop (x86/amx_tiles.py) as a 1x1 conv over a 1 x M image. The rows become pixels:
        (M, K) -> NHWC (1, 1, M, K) -> NCHW[ib]c, the result NCHW[bn]c -> (M, N); None elsewhere."""
        from kiln.topi.int8_pack import pack_conv_weight, pad_channels
        from kiln.topi.x86.conv2d_int8 import block_for

        rows, k = (int(d) for d in infer(x).checked_type.shape)
        n = w.shape[0]
        if not self.amx or rows < 16 or n % 16 or k < AMX_MIN_DENSE_INPUTS:
            return None
        w4 = pad_channels(w, 1, 4)
        ib, bn = block_for(w4.shape[1], 64), block_for(n, 64)
        from kiln.topi.x86.amx_int8 import applies
        if ib < 16 or bn % 16 or not applies(ib, bn):
            return None
        wsum = w.astype(np.int64).sum(axis=1)
        total, q, s, attrs = self._epilogue(rq, bias, wsum, zx, n, k)
        if w4.shape[1] != k:
            x = fnn.pad(x, ((0, 0), (0, w4.shape[1] - k)), pad_value=0.0)
        data = ftf.layout_transform(ftf.reshape(x, (1, 1, rows, w4.shape[1])), "NHWC", f"NCHW{ib}c")
        packed = pack_conv_weight(w4.reshape(n, -1, 1, 1), ib, bn)
        out = CONV2D_INT8(data, const(packed), const(total), const(q), const(s), pad_value=zx, tier="amx",
                          channels=n, **attrs)
        return ftf.reshape(ftf.layout_transform(out, f"NCHW{bn}c", "NHWC"), (rows, n))

    def _epilogue(self, rq, bias, wsum, zx: int, channels: int, reduction: int):
        """(bias with the data zero point folded in, q, shift, attrs) of the requantize.
        ``reduction``: the products summed per output (bounds the accumulator for FLOAT32)."""
        from kiln.topi.int8_pack import requant_params

        _, si, zi, so, zo = rq.args
        ra = rq.attrs
        rounding = ra.rounding if self.first is None else "GEMM"
        if rounding not in ("UPWARD", "TONEAREST", "FLOAT32", "GEMM") or ra.out_dtype not in ("uint8", "int8"):
            raise _Skip
        vals = [value_of(v) for v in (si, zi, so, zo)]
        if any(v is None for v in vals) or np.any(vals[1]) or vals[3].size != 1:
            raise _Skip
        if rounding == "FLOAT32":  # float32 multipliers; the shift input is unused
            m = np.ascontiguousarray(np.broadcast_to(float32_multiplier(vals[0], vals[2]), (channels,)))
            params = (m.astype(np.float32), np.zeros(channels, np.int64))
        elif rounding == "GEMM":
            params = _gemm_params(self.first, multiplier(vals[0], vals[2]), channels)
        else:
            params = requant_params(np.broadcast_to(multiplier(vals[0], vals[2]), (channels,)))
        if params is None:
            raise _Skip
        b = np.zeros(channels, np.int64) if bias is None else np.broadcast_to(bias.astype(np.int64).ravel(), (channels,))
        total = b - zx * wsum
        if np.any(np.abs(total) >= 1 << 31):
            raise _Skip
        small = reduction * 255 * 128 + int(np.abs(total).max(initial=0)) < 1 << 30  # |acc + bias| < 2**30
        if rounding == "GEMM" and not small:
            raise _Skip  # the first step's result and the second's sum must fit int32
        if rounding in ("UPWARD", "TONEAREST") and small and np.all(params[1] >= 31) and np.all(params[1] <= 61):
            rounding += "_SPLIT"  # the same integers with a 32-bit second shift (requantize_epilogue)
        attrs = dict(out_zp=int(vals[3].ravel()[0]), out_dtype=ra.out_dtype, rounding=rounding)
        if ra.rounding == "FLOAT32":  # |float32(acc + bias) * m| < 2**30: no float clamp needed
            bound = (reduction * 255 * 128 + float(np.abs(total).max(initial=0))) * float(params[0].max(initial=0))
            attrs["float_clamp"] = bool(bound >= 2.0 ** 30)
        return total.astype(np.int32), params[0], params[1], attrs


def _gemm_first(rq):
    """The first step of TFLite's two-rounding conv rescale under ``rq`` (the second), or None.

    The TFLite importer writes it (frontend/tflite/quantize.py, rounding ``GEMM``) as two
    qnn.requantize: ``high = round_half_up(acc * q / 2**31)`` to int32 (zero points 0), then
    ``round_half_up(high / 2**k)`` with the output zero point; fused, the kernel epilogue
    computes both (``_gemm_params``)."""
    inner = rq.args[0]
    if not isinstance(inner, Call) or inner.op is not qcore.REQUANTIZE:
        return None
    ia, oa = inner.attrs, rq.attrs
    if ia.rounding != "UPWARD" or oa.rounding != "UPWARD" or ia.out_dtype != "int32":
        return None
    zeros = [value_of(v) for v in (inner.args[2], inner.args[4], rq.args[2])]
    if any(z is None or np.any(z) for z in zeros):
        return None
    return inner


def _gemm_params(first, second, channels: int):
    """(q, 31 + k) of a two-step rescale whose first multiplier is ``q * 2**-31`` (q in
    [2**30, 2**31), as TFLite's) and second ``2**-k`` (0 <= k <= 30), per channel; else None."""
    from .fixed_point import quantize_multiplier

    r1 = value_of(first.args[1]), value_of(first.args[3])
    if r1[0] is None or r1[1] is None:
        return None
    real1 = np.broadcast_to(multiplier(*r1), (channels,)).astype(np.float64)
    real2 = np.broadcast_to(np.asarray(second, np.float64), (channels,))
    q, e = quantize_multiplier(real1)
    mant, exp = np.frexp(real2)
    k = 1 - exp
    if np.any(e != 0) or np.any(q.astype(np.float64) * 2.0 ** -31 != real1) or np.any(mant != 0.5) or \
            np.any(k < 0) or np.any(k > 30):
        return None
    return q.astype(np.int64), (31 + k).astype(np.int64)


class _Skip(Exception):
    """The chain does not fit the int8 kernels: leave it to CanonicalizeOps."""


def _dtype(e) -> str:
    return str(infer(e).checked_type.dtype)


def _match(rq):
    """(qnn.conv2d/qnn.dense call, constant bias array or None) under ``rq``, or None."""
    src = rq.args[0]
    bias = None
    if isinstance(src, Call) and getattr(src.op, "name", "") in ("nn.bias_add", "add"):
        lhs, rhs = src.args
        if not isinstance(rhs, Constant) or str(rhs.data.dtype) != "int32":
            return None
        if src.op.name == "nn.bias_add" and src.attrs.axis not in (1, -1):
            return None
        bias, src = rhs.data, lhs
    if not isinstance(src, Call) or src.op not in (qnn_nn.CONV2D, qnn_nn.DENSE):
        return None
    x, w, zx, zw = src.args[:4]
    if not isinstance(w, Constant) or str(w.data.dtype) != "int8":
        return None
    vzx, vzw = value_of(zx), value_of(zw)
    if vzx is None or vzw is None or vzx.size != 1 or np.any(vzw):
        return None
    channels = w.data.shape[0]
    axis = rq.attrs.axis
    if bias is not None:
        if bias.size not in (1, channels) or (src.op is qnn_nn.CONV2D and bias.size == channels
                                              and bias.ndim > 1 and bias.shape[-1] != 1 and bias.ndim != 1):
            return None
    if value_of(rq.args[1]) is not None and value_of(rq.args[1]).size > 1:
        want = 1 if src.op is qnn_nn.CONV2D else -1
        if axis not in (want, want % (4 if src.op is qnn_nn.CONV2D else 2)):
            return None
    return src, bias


def _cancel_pairs(func):
    """layout_transform(layout_transform(y, A, B), B, A) -> y (between two int8 convs)."""
    class C(ExprMutator):
        def visit_Call(self, call):
            new = super().visit_Call(call)
            if new.op is not ftf.LAYOUT_TRANSFORM:
                return new
            inner = new.args[0]
            if isinstance(inner, Call) and inner.op is ftf.LAYOUT_TRANSFORM and \
                    inner.attrs.src_layout == new.attrs.dst_layout and inner.attrs.dst_layout == new.attrs.src_layout:
                return inner.args[0]
            return new
    return C().visit(func)


class _Uses(ExprVisitor):
    """What reads each expression: ``readers[e]`` = [(reader, index)]: calls with the argument's
    index, and every other node that holds it (a tuple field, a let's value, an if's branch,
    index -1), so that a reader that is not a call is seen and keeps its input's channel order
    (a Concat reads its inputs through a Tuple)."""

    def __init__(self):
        super().__init__()
        self.readers: dict = {}

    def _read(self, reader, parts, index=None):
        for k, a in enumerate(parts):
            self.readers.setdefault(a, []).append((reader, k if index is None else index))

    def visit_Call(self, call):
        self._read(call, call.args)
        super().visit_Call(call)

    def visit_Tuple(self, t):
        self._read(t, t.fields, -1)
        super().visit_Tuple(t)

    def visit_TupleGetItem(self, t):
        self._read(t, [t.tuple_value], -1)
        super().visit_TupleGetItem(t)

    def visit_Let(self, let):
        self._read(let, [let.value, let.body], -1)
        super().visit_Let(let)

    def visit_If(self, node):
        self._read(node, [node.cond, node.true_branch, node.false_branch], -1)
        super().visit_If(node)


def _per_channel(v, channels: int):
    """A constant's array when it holds one value per channel (else None: a scalar, kept)."""
    arr = value_of(v)
    return arr if arr is not None and arr.size == channels and arr.size > 1 else None


def _channel_blind(call) -> bool:
    """Whether ``call`` treats every channel alike and keeps them where they are (its output's
    channels may be permuted with its inputs'): a qnn add/subtract/mul with scalar parameters,
    an NCHW max pool, clip, relu."""
    if call.op in (qelem.ADD, qelem.SUBTRACT, qelem.MUL):
        return all(np.size(value_of(a)) == 1 for a in call.args[2:])
    if call.op is fpool.MAX_POOL2D:
        return call.attrs.layout == "NCHW"
    return call.op in (ft.CLIP, fnn.RELU)


def _channel_groups(func, uses):
    """Sets of tensors that share one channel order: int8 conv outputs (the producer chains of
    ``_match``) joined by channel-blind ops, every reader of each a channel-blind op of the set or
    a groups=1 qnn.conv2d reading it as data, none the function's result. Yields (producer
    requantizes, reader convs) per set."""
    outputs = {func.body}
    if isinstance(func.body, Tuple):
        outputs.update(func.body.fields)
    seen: set = set()
    for start in list(uses.readers):
        if start in seen or not _producer_chain(start, uses):
            continue
        producers, readers, stack, ok = [], [], [start], True
        members = {start}
        while stack and ok:
            t = stack.pop()
            if t in outputs:
                ok = False
                break
            if _producer_chain(t, uses):
                producers.append(t)
            elif not (isinstance(t, Call) and _channel_blind(t)):
                ok = False
                break
            else:
                for a in t.args[:2] if t.op in (qelem.ADD, qelem.SUBTRACT, qelem.MUL) else t.args[:1]:
                    if a not in members:
                        members.add(a)
                        stack.append(a)
            for call, k in uses.readers.get(t, []):
                if not isinstance(call, Call):  # a tuple field (Concat), a let, an if: keeps the order
                    ok = False
                    break
                if call.op is qnn_nn.CONV2D and k == 0 and _nchw_conv(call) and isinstance(call.args[1], Constant):
                    if call not in readers:
                        readers.append(call)
                elif _channel_blind(call) and k < 2:
                    if call not in members:
                        members.add(call)
                        stack.append(call)
                else:
                    ok = False
                    break
        seen.update(members)
        if ok and readers:
            yield producers, readers


def _producer_chain(t, uses) -> bool:
    """Whether ``t`` is a qnn.requantize of a groups=1 int8 conv (``_match``) whose conv and bias
    add have no other reader, so their output channels may be reordered."""
    if not isinstance(t, Call) or t.op is not qcore.REQUANTIZE:
        return False
    chain = _match(t)
    return chain is not None and chain[0].op is qnn_nn.CONV2D and _nchw_conv(chain[0]) and \
        all(len(uses.readers.get(x, [])) == 1 for x in {chain[0], t.args[0]})


def _nchw_conv(call) -> bool:
    """A groups=1 conv over NCHW data with OIHW weights (the layout whose axes are permuted)."""
    a = call.attrs
    return a.groups == 1 and a.data_layout == "NCHW" and a.kernel_layout == "OIHW" and \
        a.out_layout in ("", "NCHW", None)


def _readers_rows_first(groups):
    """``groups`` ordered so that a group whose reader conv produces another group comes after
    that group: the reader's output order (its weight rows) is known when its input order (its
    columns) is chosen. Data flows from a group to the groups its readers produce: no cycles."""
    made_by = {_match(p)[0]: k for k, (producers, _) in enumerate(groups) for p in producers}
    done, out = set(), []

    def visit(k):
        if k in done:
            return
        done.add(k)
        for r in groups[k][1]:
            if r in made_by:
                visit(made_by[r])
        out.append(groups[k])
    for k in range(len(groups)):
        visit(k)
    return out


def permute_for_vpmaddubsw(func, lanes: int):
    """``func`` with the channels of int8 conv outputs that only int8 convs read (directly or
    through channel-blind ops: a residual add, max pool, clip; ``_channel_groups``) stored in the
    order that lets more of the readers' 4-channel units fit ``vpmaddubsw`` (x86 without VNNI;
    ``int8_pack.channel_order_for_pairs`` over all the readers of a group). The producers'
    weight rows, bias and per-channel scales and the readers' weight columns take the same order,
    so every integer is the same and only the intermediate tensors' channels are stored
    permuted. ResNet-50 QDQ (worst output block's fitting units): the 1x1 expansion after each
    3x3 conv 64->256 2 -> 4 of 16, 128->512 7 -> 17 of 32, 256->1024 22 -> 36 of 64; the residual
    streams' readers (1x1 reductions, projections) 5-10% fewer vector instructions. Readers on
    the 16-bit Winograd kernel (3x3 stride 1) have no vpmaddubsw units and are not weighed."""
    from kiln.topi.int8_pack import channel_order_for_pairs, pad_channels
    from kiln.topi.x86.conv2d_int8 import block_for

    uses = _Uses()
    uses.visit(func)
    rows: dict = {}    # conv -> order of its output channels (weight rows, bias, scales)
    cols: dict = {}    # conv -> order of its input channels (weight columns)
    args: dict = {}    # requantize / bias add -> {arg index: order}
    groups = list(_channel_groups(func, uses))
    for producers, readers in _readers_rows_first(groups):
        weights = []
        for r in readers:
            w = r.args[1].data
            w = w[rows[r]] if r in rows else w
            block = block_for(w.shape[0], lanes)
            if w.shape[1] % 4 or not block:
                weights = None
                break
            if not _Rewrite._winograd(pad_channels(w, 1, 4), r.attrs):
                weights.append((w, block))
        channels = readers[0].args[1].data.shape[1]
        if not weights or any(_match(p)[0].args[1].data.shape[0] != channels for p in producers):
            continue
        order = channel_order_for_pairs([w for w, _ in weights], [b for _, b in weights])
        if order is None:  # none cheaper (channel_order_for_pairs compares the readers' mixed_cost)
            continue
        for r in readers:
            cols[r] = order
        for rq in producers:
            mm = _match(rq)[0]
            rows[mm] = order
            args[rq] = {i: order for i in (1, 2) if _per_channel(rq.args[i], channels) is not None}
            if rq.args[0] is not mm:  # the bias add between them
                args[rq.args[0]] = {1: order} if np.size(value_of(rq.args[0].args[1])) == channels else {}
    if not rows:
        return func

    class _Apply(ExprMutator):
        def visit_Call(self, call):
            new = super().visit_Call(call)
            change = dict(args.get(call, {}))
            if call in rows or call in cols:
                w = call.args[1].data
                w = w[rows[call]] if call in rows else w
                w = w[:, cols[call]] if call in cols else w
                new_args = list(new.args)
                new_args[1] = const(np.ascontiguousarray(w))
                if call in rows:
                    change.update({i: rows[call] for i in (3, 5)
                                   if _per_channel(call.args[i], w.shape[0]) is not None})
                new = Call(new.op, new_args, new.attrs, new.type_args)
            if not change:
                return new
            new_args = list(new.args)
            for i, order in change.items():
                arr = value_of(call.args[i])
                new_args[i] = const(np.ascontiguousarray(arr.reshape(-1)[order].reshape(arr.shape)))
            return Call(new.op, new_args, new.attrs, new.type_args)
    return _Apply().visit(func)


def use_int8_kernels(func, target):
    """``func`` with its qnn conv/dense + requantize chains on the target's int8 kernels."""
    from kiln.transform import PassContext

    if not PassContext.current().config.get("relay.qnn.int8_kernels", True):
        return func
    plan = x86_plan(target)
    if plan is None:
        return func
    if plan[0] == "pmaddubsw" and PassContext.current().config.get("relay.qnn.int8_permute", True):
        func = permute_for_vpmaddubsw(infer(func), plan[1])
    return _cancel_pairs(infer(_Rewrite(plan).visit(infer(func))))


__all__ = ["use_int8_kernels", "CONV2D_INT8", "CONV2D_INT8_MIXED", "DENSE_INT8", "OPS", "x86_plan"]


# -- computes and schedules (read by relay/backend/op_impl.py) ---------------------------------------

def _conv_compute(a, x, t, ctx):
    from kiln.topi.utils import knob
    from kiln.topi.x86 import conv2d_int8 as k

    data, w, bias, q, s = x
    lo, hi = dtype_range(a.out_dtype)
    if a.tier == "wino16":
        from kiln.topi.x86.conv2d_int8_winograd import conv2d_int8_winograd_acc
        oh, ow = _out_hw(a, data)
        acc = conv2d_int8_winograd_acc(data, w, tuple(a.padding), a.pad_value, (oh, ow))
    elif a.tier == "amx":  # requantized in the kernel, from each tile group's sums in L1
        from kiln.topi.x86.amx_int8 import conv2d_int8_amx
        padded = k.padded_input(data, tuple(a.padding), a.pad_value)
        kh, kw = int(w.shape[2]), int(w.shape[3])
        oh = (int(padded.shape[2]) - (kh - 1) * a.dilation[0] - 1) // a.strides[0] + 1
        ow = (int(padded.shape[3]) - (kw - 1) * a.dilation[1] - 1) // a.strides[1] + 1
        return conv2d_int8_amx(padded, w, bias, q, s, (oh, ow), tuple(a.strides), tuple(a.dilation),
                               dict(out_zp=a.out_zp, lo=lo, hi=hi, out_dtype=a.out_dtype, rounding=a.rounding,
                                    float_clamp=a.float_clamp))
    else:
        acc = k.conv2d_int8_acc(data, w, tuple(a.strides), tuple(a.padding), tuple(a.dilation), a.pad_value,
                                a.tier, tile_ow=knob(ctx.cfg, "tile_ow", None), oc_chunks=knob(ctx.cfg, "oc_chunks", None))
    return k.requantize_epilogue(acc, bias, q, s, a.out_zp, lo, hi, a.out_dtype, a.rounding,
                                 float_clamp=a.float_clamp)


def _mixed_compute(a, x, t, ctx):
    from kiln.topi.utils import knob
    from kiln.topi.x86 import conv2d_int8 as k

    data, w, w16, table, bias, q, s = x
    lo, hi = dtype_range(a.out_dtype)
    acc = k.conv2d_int8_mixed_acc(data, w, w16, table, tuple(a.kernel_size), tuple(a.strides), tuple(a.padding),
                                  tuple(a.dilation), a.pad_value, tile_ow=knob(ctx.cfg, "tile_ow", None),
                                  oc_chunks=knob(ctx.cfg, "oc_chunks", None))
    return k.requantize_epilogue(acc, bias, q, s, a.out_zp, lo, hi, a.out_dtype, a.rounding,
                                 float_clamp=a.float_clamp)


def _bmm_compute(a, x, t, ctx):
    from kiln.topi.x86 import batch_matmul_int8 as bmm

    from kiln.topi.utils import knob

    xx, yy = x
    packed = bmm.pack_rhs(yy, a.transpose_b, a.lanes, a.shift)
    return bmm.batch_matmul_int8_acc(xx, packed, tile_m=knob(ctx.cfg, "tile_m", None))


def _out_hw(a, data):
    pt, pl, pb, pr = a.padding
    h, w = (int(d) for d in data.shape[2:4])
    return (h + pt + pb - 2 * a.dilation[0] - 1) // a.strides[0] + 1, (w + pl + pr - 2 * a.dilation[1] - 1) // a.strides[1] + 1


def _depthwise_compute(a, x, t, ctx):
    from kiln.topi.utils import knob
    from kiln.topi.x86 import conv2d_int8 as k

    data, w, bias, q, s = x
    acc = k.depthwise_int8_acc(data, w, tuple(a.strides), tuple(a.padding), tuple(a.dilation), a.pad_value,
                               tile_ow=knob(ctx.cfg, "tile_ow", None))
    lo, hi = dtype_range(a.out_dtype)
    return k.requantize_epilogue(acc, bias, q, s, a.out_zp, lo, hi, a.out_dtype, a.rounding,
                                 float_clamp=a.float_clamp)


def _dense_compute(a, x, t, ctx):
    from kiln.topi.utils import knob
    from kiln.topi.x86 import conv2d_int8 as k

    data, w, bias, q, s = x
    acc = k.dense_int8_acc(data, w, a.tier, tile_m=knob(ctx.cfg, "tile_m", None))
    lanes = int(acc.shape[-1])
    lo, hi = dtype_range(a.out_dtype)
    return k.requantize_epilogue(acc, bias, q, s, a.out_zp, lo, hi, a.out_dtype, a.rounding,
                                 out_shape=(int(data.shape[0]), a.units), float_clamp=a.float_clamp,
                                 index=lambda i, j: ((i, j // lanes, j % lanes), j))


# -- tuning: the ops' autotvm workloads (relay/backend/dispatch.py) and computes (autotvm/templates)

TEMPLATES = {"nn.contrib_conv2d_int8": "conv2d_int8", "nn.contrib_conv2d_int8_mixed": "conv2d_int8_mixed",
             "nn.contrib_depthwise_conv2d_int8": "depthwise_conv2d_int8",
             "nn.contrib_dense_int8": "dense_int8", "nn.contrib_batch_matmul_int8": "batch_matmul_int8"}


def workload_attrs(op_name: str, attrs) -> tuple:
    """The attributes of an int8 op in a workload: (name, value) pairs, in the op's attr order."""
    op = {o.name: o for o in OPS}[op_name]
    return tuple((k, _plain(attrs[k])) for k in op.attrs)


def _plain(v):
    return tuple(_plain(x) for x in v) if isinstance(v, (list, tuple)) else v


def compute_from_workload(op_name: str, inputs, attr_pairs, cfg):
    """The op's TE output for an autotvm template: ``inputs`` placeholders, attrs from the workload."""
    op = {o.name: o for o in OPS}[op_name]
    a = op.make_attrs({k: (tuple(v) if isinstance(v, list) else v) for k, v in attr_pairs})

    class _Ctx:
        pass
    ctx = _Ctx()
    ctx.cfg = cfg
    fn = COMPUTES[op_name][0]
    return fn(a, list(inputs), None, ctx)


def _schedules():
    from kiln.topi.x86 import amx_int8
    from kiln.topi.x86 import conv2d_int8 as k
    from kiln.topi.x86 import batch_matmul_int8 as bmm
    from kiln.topi.x86 import conv2d_int8_winograd as wino
    return {"conv2d_int8": {"x86": k.schedule_conv2d_int8, "arm_cpu": k.schedule_conv2d_int8},
            "conv2d_int8_winograd": {"x86": wino.schedule_conv2d_int8_winograd},
            "conv2d_int8_mixed": {"x86": k.schedule_conv2d_int8_mixed},
            "batch_matmul_int8": {"x86": bmm.schedule_batch_matmul_int8},
            "conv2d_int8_amx": {"x86": amx_int8.schedule_conv2d_int8_amx},
            "dense_int8": {"x86": k.schedule_dense_int8, "arm_cpu": k.schedule_dense_int8},
            "depthwise_int8": {"x86": k.schedule_depthwise_int8, "arm_cpu": k.schedule_depthwise_int8}}


# op name -> (compute, schedule key); SCHEDULES() -> schedule key -> {family: schedule}
def _conv_schedule_key(a) -> str:
    return {"amx": "conv2d_int8_amx", "wino16": "conv2d_int8_winograd"}.get(a.tier, "conv2d_int8")


COMPUTES = {CONV2D_INT8.name: (_conv_compute, _conv_schedule_key), DENSE_INT8.name: (_dense_compute, "dense_int8"),
            CONV2D_INT8_MIXED.name: (_mixed_compute, "conv2d_int8_mixed"),
            DEPTHWISE_INT8.name: (_depthwise_compute, "depthwise_int8")}
COMPUTES[BATCH_MATMUL_INT8.name] = (_bmm_compute, "batch_matmul_int8")
COMPUTES.update(_qlinear_add.COMPUTES)  # qnn.add's FLOAT32 form: any target (injective schedule)
SCHEDULES = _schedules
