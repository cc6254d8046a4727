"""A "patchify" convolution on CUDA as a dense product (a ViT's 16 x 16 stride-16 patch embedding).

A convolution whose kernel is its stride (no padding, no dilation, no groups) reads every input
pixel once: it is the GEMM ``C[f, q] = sum_r W[f, r] * P[q, r]`` with f the output channel, q the
output pixel (n, y, x), r = (c, ky, kx) in OIHW's order, W the kernel as stored (F x R) and P the
non-overlapping patches (Q x R), gathered inside the dense's shared-slab fetch (never stored).
The float32 dense tiles of topi/gpu/dense.py compute it (ragged Q = 196 padded inside the fetch);
a second kernel writes C as NCHW (batch 1: C is the output's layout already) with the epilogue
(bias). ViT-B/16's is 768 x 196 x 768; the direct conv schedule took 1.49 ms for it on the H200
(its 16 x 16 windows are a reduction of 768 terms per output that the direct tiles do not
share), the product's tiles about as long as a dense layer of the same size.
"""

from __future__ import annotations

from kiln import te

from ..utils import const_int, find_stage, has_stage

MIN_WINDOW = 4  # kernels of fewer elements (1x1, 2x2 stride 2) stay direct convolutions


def use_patch_gemm(data, kernel, strides, padding, dilation, groups) -> bool:
    """CUDA, a float32 NCHW conv of groups 1 whose stride is its kernel size, no padding or dilation."""
    from kiln.target import Target

    target = Target.current(allow_none=True)
    if target is None or target.kind != "cuda" or groups != 1 or len(data.shape) != 4 or len(kernel.shape) != 4:
        return False
    if str(data.dtype) != "float32" or str(kernel.dtype) != "float32":
        return False
    try:
        kh, kw = (const_int(d) for d in kernel.shape[2:])
        for d in list(data.shape) + list(kernel.shape):
            const_int(d)
    except (TypeError, ValueError):
        return False
    pair = lambda v: tuple(v) if isinstance(v, (list, tuple)) else (v, v)  # noqa: E731
    pads = tuple(padding) if isinstance(padding, (list, tuple)) else (padding,)
    return (pair(strides) == (kh, kw) and all(int(p) == 0 for p in pads) and pair(dilation) == (1, 1)
            and kh * kw >= MIN_WINDOW)


def conv2d_patches(data, kernel, strides, out_dtype=None):
    """The patchify conv as topi.gpu.dense of the kernel (F x R) and the gathered patches (Q x R),
    then the NCHW view of the product (module doc)."""
    from ..gpu.dense import dense

    n, c, h, w = (const_int(d) for d in data.shape)
    f, _, kh, kw = (const_int(d) for d in kernel.shape)
    oh, ow = (h - kh) // kh + 1, (w - kw) // kw + 1
    q, r = n * oh * ow, c * kh * kw
    window = kh * kw
    weights = te.compute((f, r), lambda i, j: kernel[i, j // window, (j // kw) % kh, j % kw],
                         name="patch_weights", tag="injective")
    patches = te.compute((q, r), lambda p, j: data[p // (oh * ow), j // window, (p // ow) % oh * kh + (j // kw) % kh,
                                                   p % ow * kw + j % kw], name="patches", tag="injective")
    product = dense(weights, patches, None, out_dtype or str(data.dtype))
    out = te.compute((n, f, oh, ow), lambda b, i, y, x: product[i, (b * oh + y) * ow + x], name="conv2d_patches",
                     tag="injective")
    out.op.attrs["patch_gemm"] = True
    return out


def is_patch_gemm(out) -> bool:
    return has_stage(out, lambda op: bool(getattr(op, "attrs", {}).get("patch_gemm")))


def schedule_conv2d_patches(outs):
    """The product with its dense tiles in a kernel of its own, the NCHW output (and its
    epilogue) a flat kernel of 256 threads a block (fewer where the target allows fewer)."""
    from ..gpu.common import as_list, flat_kernel, inline_injective
    from ..gpu.dense import schedule_tiled

    outs = as_list(outs)
    out = outs[0]
    mm = find_stage(out, lambda op: getattr(op, "tag", "") == "dense" and bool(op.reduce_axis), "patch product")
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)
    schedule_tiled(s, mm, mm, mm.op.attrs["gpu_config"], shared=True)
    for o in outs:
        flat_kernel(s, o)
    return s
