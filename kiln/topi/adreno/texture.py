"""Packing NCHW tensors into texture layouts (NCHW4c activations, OIHW4o weights), and their schedule.

An operator for Adreno reads its data and weights through images: a *pack* stage copies the
NCHW activation into an NCHW4c tensor in scope ``global.texture`` (zero channels pad C up to a
multiple of 4) and the OIHW weight into OIHW4o in ``global.texture-weight``; the operator's
compute then reads an NCHW-shaped *view* of the packed tensor, which the schedule inlines, so
every read becomes a ``read_imagef`` (kiln/codegen/opencl_texture.py). Pack stages carry the
tag ``PACK_TAG`` (never inlined) and their scope in ``op.attrs["texture_scope"]``;
``schedule_packs`` gives each its own kernel: one work-item per texel, the 4 lanes as a float4.
"""

from __future__ import annotations

from kiln import te
from kiln import tir

from ..gpu.common import block, max_threads, thread
from ..utils import const_int

PACK_TAG = "adreno_texture_pack"


def _dims(t) -> list[int]:
    return [const_int(d) for d in t.shape]


def _blocks(c: int) -> int:
    return (c + 3) // 4


def pack(t, axis: int, scope: str, name: str):
    """t with dimension ``axis`` split into blocks of 4 moved innermost (zeros past its end)."""
    dims = _dims(t)
    c = dims[axis]
    shape = dims[:axis] + [_blocks(c)] + dims[axis + 1:] + [4]

    def value(*i):
        *outer, k = i
        ch = outer[axis] * 4 + k
        idx = list(outer)
        if c % 4 == 0:
            idx[axis] = ch
            return t(*idx)
        # Clamped index: the load stays in bounds whichever side the select evaluates.
        idx[axis] = te.min(ch, c - 1)
        return tir.Select(ch < c, t(*idx), tir.const(0, t.dtype))

    out = te.compute(tuple(shape), value, name=name, tag=PACK_TAG)
    out.op.attrs["texture_scope"] = scope
    return out


def unpack_view(packed, axis: int, channels: int, name: str):
    """The plain-layout tensor a packed one holds (an injective stage the schedule inlines)."""
    dims = _dims(packed)[:-1]
    shape = dims[:axis] + [channels] + dims[axis + 1:]

    def value(*i):
        idx = list(i)
        c = idx[axis]
        idx[axis] = c // 4
        return packed(*idx, c % 4)

    return te.compute(tuple(shape), value, name=name, tag="injective")


def textures_enabled() -> bool:
    """False under PassContext(config={"relay.backend.adreno_textures": False}): the same kernels on
    buffers (bench/adreno_texture.py compares the two)."""
    from kiln.transform import PassContext

    return bool(PassContext.current().config.get("relay.backend.adreno_textures", True))


def _fits(t, axis: int, scope: str) -> bool:
    """Whether t packed along ``axis`` fits an image of the target's -texture_spatial_limit;
    if not, the operator reads t from its buffer and a warning says so."""
    import warnings

    from kiln.errors import CompileError
    from kiln.target import Target
    from kiln.tir.transform.texture import DEFAULT_LIMIT, texture_layout

    target = Target.current(allow_none=True)
    limit = (getattr(target, "attrs", None) or {}).get("texture_spatial_limit") or DEFAULT_LIMIT
    dims = _dims(t)
    shape = dims[:axis] + [_blocks(dims[axis])] + dims[axis + 1:] + [4]
    try:
        texture_layout(shape, str(t.dtype), scope, t.name, limit)
    except CompileError as err:
        warnings.warn(f"topi.adreno: {err}; {t.name} is read from its buffer instead", stacklevel=3)
        return False
    return True


def pack_activation(data, name: str = "data"):
    """NCHW -> NCHW4c in ``global.texture``; returns (packed, NCHW view of it), or (None, data)
    with textures disabled or when it fits no image (a warning says so)."""
    if not textures_enabled() or not _fits(data, 1, "global.texture"):
        return None, data
    packed = pack(data, 1, "global.texture", f"{name}_tex")
    return packed, unpack_view(packed, 1, _dims(data)[1], f"{name}_tex_view")


def pack_weight(kernel, name: str = "kernel"):
    """OIHW -> OIHW4o in ``global.texture-weight``; returns (packed, OIHW view of it), or
    (None, kernel) as pack_activation."""
    if not textures_enabled() or not _fits(kernel, 0, "global.texture-weight"):
        return None, kernel
    packed = pack(kernel, 0, "global.texture-weight", f"{name}_tex")
    return packed, unpack_view(packed, 0, _dims(kernel)[0], f"{name}_tex_view")


def schedule_packs(s) -> None:
    """Each pack stage: its texture scope, its own kernel, one work-item per texel (float4 lanes)."""
    for st in list(s.stages):
        if PACK_TAG not in getattr(st.op, "tag", ""):
            continue
        if st.attach.value != "root":
            st.compute_root()
        st.set_scope(st.op.attrs["texture_scope"])
        *outer, lane = st.op.axis
        fused = outer[0]
        for ax in outer[1:]:
            fused = st.fuse(fused, ax)
        total = 1
        for ax in outer:
            total *= const_int(ax.dom.extent)
        threads = _divisor(total, min(max_threads(), 64))
        bx, tx = st.split(fused, factor=threads)
        st.bind(bx, block("x"))
        st.bind(tx, thread("x"))
        st.vectorize(lane)


def _divisor(total: int, limit: int) -> int:
    for d in range(min(total, limit), 0, -1):
        if total % d == 0:
            return d
    return 1
