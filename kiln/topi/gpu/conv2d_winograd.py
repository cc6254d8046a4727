"""conv2d NCHW by Winograd F(2x2, 3x3) on GPUs (3x3 kernels, stride 1, no dilation, groups 1).

Four kernels in one function, each a stage bound to its own work-items:

    U[e, k, c] = (G g[k, c] G^T)[e]           kernel transform, a work-item per (k, c)
    V[e, c, p] = (B^T d[c, tile p] B)[e]      input transform, a work-item per (c, tile)
    M[e, k, p] = sum_c U[e, k, c] V[e, c, p]  16 matrix products: topi.gpu's tiled matmul
    out[n, k, y, x] = (A^T M[., k, p] A)[y % 2, x % 2]   inverse transform (+ the epilogue)

The products do 16 multiply-adds per 2 x 2 outputs and input channel where the direct kernel
does 36. The 16 cases of each transform are a Select on the unrolled index, which folds to a
handful of additions per case. The matmul takes the dense knobs (``tile_y`` over output
channels, ``tile_x`` over tiles, ``tile_k`` over input channels).
"""

from __future__ import annotations

from kiln import te

from ..nn.conv2d import conv2d_shape
from ..nn.pad import pad
from ..utils import const_shape, find_stage
from ..x86.conv2d_winograd import AT, BT, G, _select, _terms, applies
from .common import as_list, bind_flat, inline_injective
from .dense import config_for as matmul_config, schedule_tiled

TAG = "conv2d_winograd_gpu"


def conv2d_nchw_winograd(data, kernel, strides, padding, dilation, out_dtype=None, cfg=None):
    """Same result as topi.nn.conv2d_nchw for a 3x3, stride-1 conv (OIHW kernel)."""
    p = conv2d_shape("conv2d_winograd", const_shape(data), const_shape(kernel), strides, padding, dilation, 1)
    if not applies(p):
        raise ValueError("conv2d_nchw_winograd: needs a 3x3 kernel, stride 1, no dilation, groups 1")
    out_dtype = out_dtype or str(data.dtype)
    n, c, h, w = p.batch, p.in_channel, p.in_height, p.in_width
    k = p.out_channel
    th, tw = -(-p.out_height // 2), -(-p.out_width // 2)
    tiles = n * th * tw
    padded = pad(data, (0, 0, p.pad_top, p.pad_left), (0, 0, 2 * th + 2 - h - p.pad_top, 2 * tw + 2 - w - p.pad_left),
                 name="data_pad")

    def fu(e, kk, cc):
        g = [[kernel[kk, cc, i, j] for j in range(3)] for i in range(3)]
        cases = []
        for e1 in range(4):
            rows = [_terms(G[e1], [g[i][j] for i in range(3)]) for j in range(3)]
            for e2 in range(4):
                cases.append(_terms(G[e2], rows))
        return _select(e, cases)

    def fv(e, cc, t):
        b, r = t // (th * tw), t % (th * tw)
        y, x = (r // tw) * 2, (r % tw) * 2
        d = [[padded[b, cc, y + i, x + j] for j in range(4)] for i in range(4)]
        cases = []
        for e1 in range(4):
            rows = [_terms(BT[e1], [d[i][j] for i in range(4)]) for j in range(4)]
            for e2 in range(4):
                cases.append(_terms(BT[e2], rows))
        return _select(e, cases)

    u = te.compute((16, k, c), fu, name="winograd_kernel", tag="winograd_kernel")
    v = te.compute((16, c, tiles), fv, name="winograd_input", tag="winograd_input")
    rc = te.reduce_axis((0, c), name="rc")
    m = te.compute((16, k, tiles), lambda e, kk, t: te.sum(u[e, kk, rc].astype(out_dtype) * v[e, rc, t].astype(out_dtype),
                                                          axis=rc),
                   name="winograd_product", tag=TAG, attrs={"gpu_config": matmul_config(k, tiles, c, cfg)})

    def fout(b, kk, y, x):
        t = b * (th * tw) + (y // 2) * tw + x // 2
        cases = []
        for a in range(2):
            for c2 in range(2):
                cases.append(_terms([AT[a][e1] * AT[c2][e2] for e1 in range(4) for e2 in range(4)],
                                    [m[e, kk, t] for e in range(16)]))
        return _select((y % 2) * 2 + x % 2, cases)

    return te.compute((n, k, p.out_height, p.out_width), fout, name="conv2d_winograd", tag="injective,winograd_output")


def schedule_conv2d_nchw_winograd(outs, cfg=None):
    """The four kernels above; the elementwise ops after the conv join the inverse transform."""
    outs = as_list(outs)
    out = outs[0]
    m = _find(out)
    u, v = m.op.input_tensors
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)  # padding into the input transform, the inverse into the epilogue
    for stage in (u, v):  # one work-item per (k, c) / (c, tile), the 16 cases unrolled inside
        st = s[stage]
        e, i, j = st.op.axis
        st.reorder(i, j, e)
        fused = st.fuse(i, j)
        bind_flat_axis(st, fused, _extent(stage, 1) * _extent(stage, 2))
        st.unroll(e)
    conf = matmul_config(_extent(m, 1), _extent(m, 2), _extent(u, 2), cfg) if cfg is not None else m.op.attrs["gpu_config"]
    schedule_tiled(s, m, m, conf)
    bind_flat(s, out)
    return s


def _extent(t, axis: int) -> int:
    return int(getattr(t.shape[axis], "value", t.shape[axis]))


def bind_flat_axis(st, fused, total: int) -> None:
    from .common import _divisor_near, block, max_threads, thread

    bx, tx = st.split(fused, factor=_divisor_near(total, max_threads()))
    st.bind(bx, block("x"))
    st.bind(tx, thread("x"))


def _find(out):
    return find_stage(out, lambda op: getattr(op, "tag", "") == TAG, "Winograd product")
