"""bfloat16 conv2d on Intel AMX (``tdpbf16ps``): tiles of 16 pixels x 16 channels in tile registers.

AMX multiplies tile registers: ``tdpbf16ps C, A, B`` adds to C (M rows x 16 float32) the product
of A (M rows x K bfloat16) and B, stored as K/2 rows of 16 *pairs* (the channel-pair layout
``conv2d_bf16.prepack_kernel_nchwc_bf16`` gives the weight: ``(O/bn, C/ib, KH, KW, ib/2, bn, 2)``,
so B is one tile load with a row stride of ``bn`` pairs). With NCHW16c data one pixel's 16
input channels are one 32-byte A row, M output pixels of a row are M A rows (stride: the conv's
stride in pixels), and C's rows are the output pixels' 16-channel pieces of the NCHW{bn}c output.

A run is M = 16 consecutive virtual pixels of a stride-1 conv (``Runs``: the output computed
over the padded input's width, so a run crosses rows and a tap is one offset), or M pixels of
one output row of a strided conv. Each step (input block, KH, KW) loads two runs' A tiles and
two 16-channel pieces' B tiles into four C tiles (each load feeds two ``tdpbf16ps``); float32
results are stored into the output and the fused epilogue runs over it afterwards. A task is
(image, output block, a group of run pairs) and loads the tile configuration (per-thread state)
once; the kernel asks Linux for the AMX state on entry (kiln/runtime/amx.py explains why; one
system call per kernel call). The int8 kernel (amx_int8.py) keeps amx_tiles.conv_tiles' one run
x two pieces per row task.

Tile registers: C = 0-3 (run t, piece j: 2t + j); A = 4, 5; B = 6, 7.
"""

from __future__ import annotations

import dataclasses

from kiln import te, tir
from kiln.ir import expr as E
from kiln.ir.dtype import dtype as _dt
from kiln.ir.stmt import BufferStore, Evaluate
from kiln.runtime.amx import ARCH_REQ_XCOMP_PERM, SYS_ARCH_PRCTL, XFEATURE_XTILEDATA

from ..nn.pad import pad
from ..utils import const_int

from .amx_tiles import _addr, _amx, _i8, row_tile

TAG = "conv2d_NCHWc_amx_bf16"


def applies(data_dtype, kernel_dtype, ib: int, bn: int, target=None) -> bool:
    """bfloat16 NCHW16c or NCHW32c data (an A row: 16 or 32 channels, 64 bytes at most), output
    blocks of 16k channels, and a CPU LLVM gives AMX-BF16."""
    from kiln.target.cpu_facts import cpu_facts

    return (str(data_dtype) == "bfloat16" and str(kernel_dtype) == "bfloat16" and ib in (16, 32)
            and bn % 16 == 0 and "amx-bf16" in cpu_facts(target).features)


def amx_block(data_dtype, kernel_dtype, out_channels: int, bn: int, target=None) -> int:
    """The output block a 16-bit conv takes where the CPU multiplies that type natively: 32
    channels where they divide, else ``bn``. bfloat16 on AMX: the next conv's A rows are then 64
    bytes, K = 32 per ``tdpbf16ps`` (blocks of 16 halve K: ResNet's 64->64 3x3 at 56x56 ran 1.3x
    slower). float16 with AVX512-FP16: one zmm holds 32 halves, so a block of 16 used half of
    every vector (64->64 3x3 at 56x56 and 128->128 at 28x28: 0.98 ms with blocks of 16, 0.55-0.60
    ms with blocks of 32; one core, CPU time)."""
    from kiln.target.cpu_facts import cpu_facts

    if out_channels % 32:
        return bn
    if applies(data_dtype, kernel_dtype, 32, 32, target):
        return 32
    if str(data_dtype) == str(kernel_dtype) == "float16" and "avx512fp16" in cpu_facts(target).features:
        return 32
    return bn


def conv2d_nchwc_amx(data, kernel, p, bn: int, plain_output: bool = False, row: int | None = None,
                     out_dtype: str = "float32", fused: tuple | None = None):
    """float32 NCHW{bn}c conv of bfloat16 NCHW16c ``data`` and a pair-packed 7-dim ``kernel``;
    ``out_dtype`` "bfloat16": the float32 sums rounded once, in the kernel (``amx_conv_tiles``).

    ``row``: elements of an A row when it spans more than one pixel's ``ib`` (the plain-input
    path's overlapping rows); the kernel's pair dimension is then ``row / 2``.

    ``fused``: (Epilogue, its extra input tensors): returns the kernel's bfloat16 output itself,
    the epilogue applied (``conv2d_amx_fused``)."""
    n, chunks, _, _, ib = (const_int(d) for d in data.shape)
    k_row = row or ib
    runs = Runs.of(p, const_int(data.shape[3]) if row else None, (row or ib) // ib - 1)
    if row:  # the plain path padded its NHWC4 copy already; rows past it only feed discarded pixels
        padded = data if not runs.extra_rows else pad(data, (0, 0, 0, 0, 0), (0, 0, runs.extra_rows, 0, 0),
                                                      name="data_pad")
    else:
        padded = pad(data, (0, 0, p.pad_top, p.pad_left, 0),
                     (0, 0, p.pad_bottom + runs.extra_rows, p.pad_right, 0), name="data_pad")
    hp, wp = const_int(padded.shape[2]), const_int(padded.shape[3])
    ocb = p.out_channel // bn
    if str(out_dtype) not in ("float32", "bfloat16"):
        raise ValueError(f"conv2d_NCHWc on AMX: out_dtype {out_dtype!r}; the bfloat16 products sum in float32 "
                         "(out_dtype 'float32', or 'bfloat16' for the sums rounded once)")
    rounded = str(out_dtype) == "bfloat16" or fused is not None
    shape = (n, ocb, p.out_height, p.out_width, bn) if rounded else (n, ocb, runs.pixels, bn)
    epilogue, extra = fused if fused is not None else (Epilogue() if rounded else None, [])

    def body(ins, outs):
        return amx_conv_tiles(*ins, *outs, runs=runs, n=n, chunks=chunks, hp=hp, wp=wp, ib=ib, k_row=k_row,
                              ocb=ocb, kh=p.kernel_h, kw=p.kernel_w, bn=bn, dilation=(p.dilation_h, p.dilation_w),
                              epilogue=epilogue)

    conv = te.extern(shape, [padded, kernel, *extra], body, name="conv2d_NCHWc_amx",
                     dtype="bfloat16" if rounded else "float32",
                     tag=TAG, attrs={"workload": p, "config": {"oc_bn": bn, "tile_ow": runs.m}})
    if fused is not None:
        return conv

    def at(b_, c, y_, x_, k):
        return conv[b_, c, y_, x_, k] if rounded else conv[b_, c, y_ * runs.width + x_, k]

    if plain_output:
        return te.compute((n, p.out_channel, p.out_height, p.out_width),
                          lambda b_, c, y_, x_: at(b_, c // bn, y_, x_, c % bn),
                          name="conv2d_nchw", tag="injective,conv2d_store")
    return te.compute((n, ocb, p.out_height, p.out_width, bn), lambda b_, c, y_, x_, k: at(b_, c, y_, x_, k),
                      name="conv2d_NCHWc", tag="injective,conv2d_store")


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """What the kernel does to the float32 sums of a bfloat16 output: add ``bias`` (a (1, O/bn,
    1, 1, bn) buffer) and ``residual`` (a buffer shaped as the output), both widened to float32
    (exact), apply ``relu``, and round to bfloat16 once. The unfused ops ToMixedPrecision writes
    round after the conv and after each addition (three roundings); this is closer to float32's
    result and costs a third of the vector work per output (each rounding is seven instructions,
    and the epilogue bounds 1x1 convs with few input channels). Bias and residual are the
    kernel's extra inputs, in that order."""
    bias: bool = False
    residual: bool = False
    relu: bool = False


@dataclasses.dataclass(frozen=True)
class Runs:
    """How a conv's output pixels are cut into runs of ``m`` A-tile rows.

    ``flat`` (stride 1): output pixel (y, x) is virtual pixel y * WP + x of the padded input's
    width WP, and tap (ry, rx) of virtual pixel v reads padded pixel v + ry * dh * WP + rx * dw:
    consecutive virtual pixels read consecutive input pixels, so a run is any 16 of them, across
    rows (the WP - OW virtual pixels at each row's end are computed and never read). A 7x7 image
    is then 63 virtual pixels in four tiles of 16 instead of seven tiles of 7 rows.
    Otherwise (strided): a run is ``m`` pixels of one output row (the widest divisor of the row
    <= 16), A rows ``stride`` pixels apart.

    The kernel's output is (N, O/bn, ``pixels``, bn): ``pixels`` = runs x m, runs rounded up to
    an even count (two A tiles per step); ``width`` is the row pitch in it (WP or OW).
    ``extra_rows``: zero rows added under the padded input so the last runs read inside it."""
    flat: bool
    m: int
    runs: int
    width: int
    per_row: int
    stride: tuple
    extra_rows: int
    out_hw: tuple

    @property
    def pixels(self) -> int:
        return self.runs * self.m

    @staticmethod
    def of(p, padded_width: int | None = None, span: int = 0) -> "Runs":
        """``padded_width``: the input's width where it is padded already; ``span``: pixels an A
        row reads beyond its first (the plain path's rows of 8 pixels: 7)."""
        wp = padded_width or p.in_width + p.pad_left + p.pad_right
        hp = p.in_height + p.pad_top + p.pad_bottom
        oh, ow, sh, sw = p.out_height, p.out_width, p.stride_h, p.stride_w
        if (sh, sw) == (1, 1):
            width = wp
            virtual = (oh - 1) * width + ow
            runs = -(-virtual // 16)
            runs += runs % 2
            # reads up to virtual pixel runs*16 - 1 plus the last tap; rows of WP hold them
            last = runs * 16 - 1 + (p.kernel_h - 1) * p.dilation_h * wp + (p.kernel_w - 1) * p.dilation_w + span
            extra = max(0, -(-(last + 1) // wp) - hp)
            return Runs(True, 16, runs, width, 0, (1, 1), extra, (oh, ow))
        m = row_tile(ow)
        per_row = ow // m
        runs = oh * per_row
        extra = 0
        if runs % 2:
            runs += 1  # one more run: row oh, pixels 0..m-1 (discarded)
            extra = max(0, oh * sh + (p.kernel_h - 1) * p.dilation_h + 1 - hp)
        return Runs(False, m, runs, ow, per_row, (sh, sw), extra, (oh, ow))


def _epilogue_value(ep: Epilogue, sums, bias, residual, bias_at, out_at):
    """The output vector of 16 float32 sums: plus bias and residual (widened: exact), relu, then
    rounded to bfloat16 once."""
    f32 = _dt("float32x16")
    v = sums
    if bias is not None:
        v = v + E.cast(E.BufferLoad(_flat(bias), (_ramp16(bias_at),), _dt("bfloat16x16")), f32)
    if residual is not None:
        v = v + E.cast(E.BufferLoad(_flat(residual), (_ramp16(out_at),), _dt("bfloat16x16")), f32)
    if ep.relu:
        zero = E.Broadcast(E.const(0.0, "float32"), 16, f32)
        v = tir.Select(v < zero, zero, v, f32)
    return E.cast(v, _dt("bfloat16x16"))


def _flat(buf):
    from kiln.tir import decl_buffer

    size = 1
    for d in buf.shape:
        size *= const_int(d)
    return decl_buffer((size,), buf.dtype, buf.name, data=buf.data)


def _ramp16(base):
    """The 16 consecutive indices from ``base`` (a vector access)."""
    base = tir.convert(base) if not isinstance(base, E.PrimExpr) else base
    return E.Ramp(base, E.const(1, base.dtype), 16, base.dtype.with_lanes(16))


TASK_TILES = 64  # tdpbf16ps per task at least, where the tasks stay >= TASKS (one tile config load each)
TASKS = 64


def amx_conv_tiles(x, w, *rest, runs: Runs, n, chunks, hp, wp, ib, k_row, ocb, kh, kw, bn, dilation,
                   epilogue: Epilogue | None = None):
    """The kernel body: padded bfloat16 data ``x`` (N, chunks, HP, WP, ib), pair-packed weights
    ``w`` (O/bn, chunks, KH, KW, k_row/2, bn, 2), then the epilogue's bias and residual buffers
    where it has them, and the output ``y``: float32 sums (N, O/bn, pixels, bn) without
    ``epilogue``, else bfloat16 (N, O/bn, OH, OW, bn).

    With an epilogue the four C tiles are stored into a 4 KB float32 buffer of the task (in L1)
    and the epilogue runs from there, 16 channels per vector, writing only the output's pixels:
    the float32 sums never reach memory (a 64->256 1x1 conv at 56x56 wrote 3.2 MB of them, which
    a separate epilogue kernel read back) and bias, residual and relu cost no pass of their own.

    Tiles: C 0-3 (two runs x two 16-channel pieces), A 4-5 (the two runs' input rows), B 6-7
    (the two pieces' weights): each A and B load feeds two ``tdpbf16ps``. A task is (image,
    output block, a group of run pairs); it loads the tile configuration once."""
    dh, dw = dilation
    sh, sw = runs.stride
    m = runs.m
    pieces = bn // 16
    nb = min(2, pieces)  # B tiles (16-channel pieces) per step
    pairs = runs.runs // 2
    steps = chunks * kh * kw
    per_task = max(1, -(-TASK_TILES // (4 * steps)))  # run pairs per task
    per_task = min(per_task, max(1, pairs * n * ocb // TASKS), pairs)
    groups = -(-pairs // per_task)
    ib_ = tir.ir_builder.create()
    ib_.emit(Evaluate(tir.call_extern("int64", "syscall", E.const(SYS_ARCH_PRCTL, "int64"),
                                      E.const(ARCH_REQ_XCOMP_PERM, "int64"), E.const(XFEATURE_XTILEDATA, "int64"))))
    rest = list(rest)
    y = rest.pop()
    bias = rest.pop(0) if epilogue is not None and epilogue.bias else None
    residual = rest.pop(0) if epilogue is not None and epilogue.residual else None
    xv, wv, yv = ib_.buffer_ptr(x), ib_.buffer_ptr(w), ib_.buffer_ptr(y)
    row_bytes = k_row * 2
    a_stride = E.const(sw * ib * 2, "int64")
    with ib_.for_range(0, n * ocb * groups, name="task", kind="parallel") as task:
        cfg = ib_.allocate("uint8", (64,), name="tilecfg", scope="local")
        for i in range(64):
            cfg[i] = E.const(0, "uint8")
        cfg[0] = E.const(1, "uint8")  # palette 1
        tiles = [(m, 64)] * 4 + [(m, row_bytes)] * 2 + [(row_bytes // 4, 64)] * 2  # (rows, bytes per row)
        for t, (rows, colsb) in enumerate(tiles):
            cfg[16 + 2 * t] = E.const(colsb & 255, "uint8")
            cfg[17 + 2 * t] = E.const(colsb >> 8, "uint8")
            cfg[48 + t] = E.const(rows, "uint8")
        ib_.emit(_amx("ldtilecfg", _addr(cfg[0])))
        if epilogue is not None:
            sums = ib_.allocate("float32", (2 * m * 16 * nb,), name="sums", scope="local")
        b = task // (ocb * groups)
        oc = task // groups % ocb
        grp = task % groups
        with ib_.for_range(0, per_task, name="pi") as pi:
            pair = grp * per_task + pi
            with ib_.if_scope(pair < pairs):
                def a_base(q):  # padded pixel of run q's first A row (tap 0, 0)
                    if runs.flat:
                        return q * 16
                    return (q // runs.per_row * sh) * wp + q % runs.per_row * (m * sw)
                bases = [a_base(pair * 2 + t) for t in range(2)]
                for g in range(0, pieces, nb):  # C tiles for channels 16g .. 16(g + nb)
                    for t in range(2):
                        for j in range(nb):
                            ib_.emit(_amx("tilezero", _i8(2 * t + j)))
                    with ib_.for_range(0, chunks, name="rco") as rco:
                        with ib_.for_range(0, kh, name="ry") as ry:
                            with ib_.for_range(0, kw, name="rx") as rx:
                                tap = ry * dh * wp + rx * dw
                                plane = (b * chunks + rco) * hp * wp
                                for t in range(2):
                                    ib_.emit(_amx("tileloadd64", _i8(4 + t), _addr(xv[(plane + bases[t] + tap) * ib]),
                                                  a_stride))
                                w_off = (((oc * chunks + rco) * kh + ry) * kw + rx) * (k_row * bn)
                                for j in range(nb):  # 16 channels x 4 bytes per B row
                                    ib_.emit(_amx("tileloadd64", _i8(6 + j), _addr(wv[w_off + 32 * (g + j)]),
                                                  E.const(bn * 4, "int64")))
                                for t in range(2):
                                    for j in range(nb):
                                        ib_.emit(_amx("tdpbf16ps", _i8(2 * t + j), _i8(4 + t), _i8(6 + j)))
                    if epilogue is not None:
                        for t in range(2):
                            for j in range(nb):
                                ib_.emit(_amx("tilestored64", _i8(2 * t + j), _addr(sums[(t * m * nb + j) * 16]),
                                              E.const(nb * 64, "int64")))
                        oh_, ow_ = runs.out_hw
                        with ib_.for_range(0, 2 * m, name="px") as px:
                            if runs.flat and runs.width != ow_:  # junk pixels at each row's end
                                v_ = pair * 32 + px
                                yy, xx = v_ // runs.width, v_ % runs.width
                                valid, pix = tir.all(yy < oh_, xx < ow_), yy * ow_ + xx
                            else:  # the runs' pixels are the output's, in order: no division
                                pix = pair * 2 * m + px
                                valid = pix < oh_ * ow_
                            with ib_.if_scope(valid):
                                out = ((b * ocb + oc) * oh_ * ow_ + pix) * bn + 16 * g
                                for j in range(nb):
                                    s_ = E.BufferLoad(sums.asobject(), (_ramp16((px * nb + j) * 16),), _dt("float32x16"))
                                    val = _epilogue_value(epilogue, s_, bias, residual, oc * bn + 16 * (g + j),
                                                          out + 16 * j)
                                    ib_.emit(BufferStore(yv._flat_view(), val, (_ramp16(out + 16 * j),)))
                        continue
                    for t in range(2):
                        y_off = ((b * ocb + oc) * runs.pixels + (pair * 2 + t) * m) * bn
                        for j in range(nb):
                            ib_.emit(_amx("tilestored64", _i8(2 * t + j), _addr(yv[y_off + 16 * (g + j)]),
                                          E.const(bn * 4, "int64")))
        ib_.emit(_amx("tilerelease"))
    return ib_.get()


def schedule_conv2d_nchwc_amx(s, conv, out):
    """The AMX kernel at root; the padding a parallel pass; ``out`` (the store with any fused
    epilogue inlined) parallel over its outer axes, vectorized over the channel block."""
    from ..generic.default import schedule_stage

    _schedule_inputs(s, conv)
    schedule_stage(s, out)


def _schedule_inputs(s, conv):
    """The kernel's padded input (and im2col rows) one parallel pass; a weight packed in the
    graph (not pre-packed) another."""
    padded, kernel = conv.op.input_tensors[:2]
    if "pad" in getattr(padded.op, "tag", ""):
        _inline_upstream(s, padded)
        axes = s[padded].op.axis
        s[padded].parallel(s[padded].fuse(axes[0], axes[1], axes[2]))
        s[padded].vectorize(axes[-1])
    if "kernel_pack" in getattr(kernel.op, "tag", ""):
        _inline_upstream(s, kernel)
        axes = s[kernel].op.axis
        s[kernel].parallel(s[kernel].fuse(axes[0], axes[1], axes[2]))


def _inline_upstream(s, t):
    """Inline the elementwise stages that feed ``t`` (padding, layout views) into it."""
    for u in t.op.input_tensors:
        if isinstance(u.op, te.ComputeOp) and "injective" in u.op.tag or "pad" in getattr(u.op, "tag", ""):
            _inline_upstream(s, u)
            s[u].compute_inline()


# -- few input channels (an RGB image): rows of (kernel column, channel) -----------------------

def plain_applies(data_dtype, kernel_dtype, channels: int, kernel_w: int, dilation_w: int, bn: int,
                  target=None) -> bool:
    """A plain NCHW bfloat16 input of at most 4 channels whose kernel row (4 x KW elements) fits
    one 32-element A row."""
    return (applies(data_dtype, kernel_dtype, 32, bn, target) and channels <= 4 and 4 * kernel_w <= 32
            and dilation_w == 1)


def conv2d_plain_amx(data, kernel_vec, p, bn: int, plain_output: bool = False, out_dtype: str = "float32",
                     fused: tuple | None = None):
    """float32 NCHW{bn}c conv of a plain NCHW bfloat16 ``data`` with few channels (C <= 4,
    4 x KW <= 32: an RGB image's 7x7 conv).

    A row of 16 channels would be mostly zeros for 3 channels. Instead the input is stored as
    padded NHWC4 (4 channels per pixel, zero-filled) and an output pixel's A row is the 32
    elements from its first input pixel on: the KW pixels x 4 channels its kernel row reads
    (and zeros times zero weights beyond). Rows of neighbouring pixels overlap: the tile load's
    row stride is the conv's stride x 4 elements. The conv is then the AMX kernel's with a KH x 1
    kernel over "channels" (kernel column, channel); ``kernel_vec`` (O/bn, C, KH, KW, 1, bn; or
    OIHW) is regrouped so, zero in the fill.
    """
    from ..nn.conv2d import conv2d_shape

    n, c, h, w = (const_int(d) for d in data.shape)
    kh, kw = p.kernel_h, p.kernel_w
    hp, wp = h + p.pad_top + p.pad_bottom, w + p.pad_left + p.pad_right
    wp += max(0, (p.out_width - 1) * p.stride_w + 8 - wp)  # the last row's 32 elements stay inside
    zero = tir.const(0.0, "bfloat16")

    def fpix(b, _, y, x, ch):
        inside = tir.all(ch < c, y >= p.pad_top, y < p.pad_top + h, x >= p.pad_left, x < p.pad_left + w)
        return tir.if_then_else(inside, data[b, tir.min(ch, c - 1), y - p.pad_top, x - p.pad_left], zero)

    pixels = te.compute((n, 1, hp, wp, 4), fpix, name="data_nhwc4", tag="injective,pad")
    if len(kernel_vec.shape) == 6:
        def fk(o, _, ry, __, kp, b, t):
            k = kp * 2 + t
            ok = tir.all(k % 4 < c, k // 4 < kw)
            return tir.if_then_else(ok, kernel_vec[o, tir.min(k % 4, c - 1), ry, tir.min(k // 4, kw - 1), 0, b], zero)
    else:  # OIHW
        def fk(o, _, ry, __, kp, b, t):
            k = kp * 2 + t
            ok = tir.all(k % 4 < c, k // 4 < kw)
            return tir.if_then_else(ok, kernel_vec[o * bn + b, tir.min(k % 4, c - 1), ry, tir.min(k // 4, kw - 1)], zero)
    kernel = te.compute((p.out_channel // bn, 1, kh, 1, 16, bn, 2), fk, name="kernel_rows", tag="injective,kernel_pack")
    rows = conv2d_shape("conv2d_NCHWc_amx", (n, 4, hp, wp), (p.out_channel, 4, kh, 1),
                        (p.stride_h, p.stride_w), 0, (p.dilation_h, 1), 1)
    rows = dataclasses.replace(rows, out_width=p.out_width)
    return conv2d_nchwc_amx(pixels, kernel, rows, bn, plain_output, row=32, out_dtype=out_dtype, fused=fused)


# -- conv2d + bias [+ residual] [+ relu] in one kernel (relay's nn.contrib_conv2d_bias_NCHWc) ----

def conv2d_amx_fused(data, kernel, bias, residual=None, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                     relu: bool = False):
    """bfloat16 NCHW{bn}c output of ``round(relu(conv + bias + residual))``, summed in float32 and
    rounded once (``Epilogue``), computed from the kernel's tiles while they are in L1.

    ``data``: bfloat16 NCHW{ib}c (ib 16 or 32), or plain NCHW with at most 4 channels (an RGB
    image); ``kernel``: pair-packed (O/bn, C/ib, KH, KW, ib/2, bn, 2), or for plain data
    (O/bn, C, KH, KW, 1, bn); ``bias`` (1, O/bn, 1, 1, bn); ``residual`` shaped as the output."""
    from ..nn.conv2d import conv2d_shape

    dshape = tuple(const_int(d) for d in data.shape)
    kshape = tuple(const_int(d) for d in kernel.shape)
    bn = kshape[5]
    plain = len(dshape) == 4
    channels = dshape[1] if plain else dshape[1] * dshape[4]
    p = conv2d_shape("conv2d_NCHWc", (dshape[0], channels, dshape[2], dshape[3]),
                     (kshape[0] * bn, channels, kshape[2], kshape[3]), strides, padding, dilation, 1)
    epilogue = Epilogue(bias=True, residual=residual is not None, relu=bool(relu))
    fused = (epilogue, [bias] + ([residual] if residual is not None else []))
    if plain:
        return conv2d_plain_amx(data, kernel, p, bn, fused=fused)
    return conv2d_nchwc_amx(data, kernel, p, bn, fused=fused)


def schedule_conv2d_amx_fused(outs):
    """The fused kernel at root, its padding one parallel pass (``schedule_conv2d_nchwc_amx``)."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    if outs[0].op.tag != TAG:
        raise ValueError(f"schedule_conv2d_amx_fused: output {outs[0].op.name} is not the fused AMX kernel")
    _schedule_inputs(s, outs[0])
    return s
