"""Enough blocks for an NVIDIA GPU in the untuned float32 dense / batch_matmul tiles (topi/gpu/dense.py).

The shared default is 128 x 128 blocks (16 x 16 threads of 8 x 8 outputs): for a transformer's
128-token products that is 6 to 24 blocks, so 108 to 126 of an H100's 132 multiprocessors idle
(BERT-base float32: 1.08 ms for each 128 x 3072 x 768 dense). On CUDA the blocks shrink, largest
side first, each step halving it (first the outputs per thread down to 4, then the threads down
to 8, then the outputs per thread down to 2) until the product has ``MIN_BLOCKS`` blocks or
nothing is left to shrink: one wave of the target's multiprocessors (``multiprocessors``: those
of the GPU its ``nvidia/...`` tag names, else of this machine's CUDA device 0 when its arch is
the target's, else ``MIN_BLOCKS`` = 132, an H100's or H200's). Other GPU targets keep the shared
default. The shrunk tiles also take deeper k steps (up to 32, about 512 products per thread
between barriers).

``pad_slab``: on CUDA each row of a shared slab is padded to an odd multiple of 8 words plus one
(stride % 8 == 1). A thread's register tile reads its rows (or columns) of the slab at a stride
of the row length times the outputs per thread: for dense's weight slab (rows of 8 k terms, 4
columns per thread) every thread of a half-warp hit the same bank (16-way conflicts); padded,
at most 2 share one. The slab's stores lose their 16-byte alignment (global float4 loads, then
scalar shared stores).
"""

from __future__ import annotations

import functools

MIN_BLOCKS = 132  # a wave of an H100 / H200 (132 multiprocessors): when nothing says otherwise

# multiprocessors of the GPUs kiln's target tags name (kiln/target/target.py, NVIDIA_TAGS)
TAG_MULTIPROCESSORS = {"nvidia/nvidia-h100": 132, "nvidia/nvidia-h200": 132, "nvidia/nvidia-a100": 108,
                       "nvidia/nvidia-a10g": 80, "nvidia/nvidia-l4": 58, "nvidia/nvidia-t4": 40,
                       "nvidia/tesla-v100": 80, "nvidia/geforce-rtx-3090": 82, "nvidia/geforce-rtx-4090": 128}


def min_blocks() -> int:
    """A wave of the current CUDA target (``multiprocessors``), else 0 (no shrinking)."""
    from kiln.target import Target

    target = Target.current(allow_none=True)
    return multiprocessors(target) if target is not None and target.kind == "cuda" else 0


def multiprocessors(target) -> int:
    """The CUDA target's multiprocessor count: its tag's GPU; else CUDA device 0 of this machine
    when its arch is the target's (or the target names none); else ``MIN_BLOCKS``."""
    tag = str(target.attrs.get("tag", "") or "")
    if tag in TAG_MULTIPROCESSORS:
        return TAG_MULTIPROCESSORS[tag]
    return _device_multiprocessors(str(target.attrs.get("arch", "") or ""))


@functools.lru_cache(maxsize=8)
def _device_multiprocessors(arch: str) -> int:
    try:
        from kiln.runtime.devices.cuda import API
        from kiln.runtime.devices.nvrtc import arch_number

        if API.exist(0):
            here = int(str(API.attribute(0, "compute_version")).replace(".", ""))
            if not arch or arch_number(arch) == here:
                return int(API.attribute(0, "multi_processor_count"))
    except Exception:  # noqa: BLE001 - no driver, no cuda-python: the default
        pass
    return MIN_BLOCKS


def _halve(t: list[int], n: int, phase: tuple[str, int]):
    """The axis tiles [blocks, 1, threads, per thread] with the block halved in this phase
    (("inner", 4): outputs per thread down to 4; ("threads", 8); ("inner", 2)), or None."""
    b, v, th, i = t
    what, floor = phase
    if what == "inner" and i > floor and i % 2 == 0:
        i //= 2
    elif what == "threads" and th > floor and th % 2 == 0:
        th //= 2
    else:
        return None
    return [-(-n // (v * th * i)), v, th, i]


PHASES = (("inner", 4), ("threads", 8), ("inner", 2))


def _halve_larger(ty: list[int], tx: list[int], m: int, n: int, phase, other_side: bool = True):
    """(ty, tx) with the larger block side halved in this phase, else the other side (the
    smaller one only where ``other_side``), or None when neither can be."""
    if ty[2] * ty[3] >= tx[2] * tx[3]:
        order = ((True, ty, m), (False, tx, n))
    else:
        order = ((False, tx, n), (True, ty, m))[:2 if other_side else 1]
    for is_y, t, extent in order:
        halved = _halve(t, extent, phase)
        if halved is not None:
            return (halved, tx) if is_y else (ty, halved)
    return None


def more_blocks(ty: list[int], tx: list[int], m: int, n: int, batch: int, want: int):
    """(ty, tx) shrunk until batch * blocks >= want (module doc)."""
    for phase in PHASES:
        while batch * ty[0] * tx[0] < want:
            halved = _halve_larger(ty, tx, m, n, phase)
            if halved is None:
                break
            ty, tx = halved
    return ty, tx


# Split-K (float32 dense on CUDA). A product whose 128 x 128 blocks are fewer than a wave gets
# blocks of 8 x 16 threads with 4 x 4 outputs each (32 x 64) and its reduction cut into the fewest of
# 1, 2, 4 or 8 slices that make SPLIT_WAVES waves of blocks (8 at most, each at least
# SPLIT_MIN_STEPS 32-deep k steps): slice s is product s of a batch (blocks of their own), and a
# second kernel sums the slices with the epilogue. On the H200 with weights from memory
# (bench/cuda_matmul.py --transformer; cuBLAS in brackets) against the tiles shrunk to one wave
# without a split: BERT's 128 x 768 x 3072 87.3 -> 26.3 us (24.0), its QKV 128 x 2304 x 768
# 33.9 -> 21.5 (20.0), GPT-2's 64 x 768 x 3072 104.9 -> 21.1 (20.0), ViT's 197 x 768 x 768
# 25.9 -> 14.6 (15.6) and 197 x 768 x 3072 101.7 -> 45.1 (37.0). SPLIT_MIN_K: the float16
# tensor-core dense splits reductions this long (tensorcore.split_slices).
SPLIT_MIN_K = 2048
SPLIT_WAVES = 4
SPLIT_MIN_STEPS = 3
SPLIT_TILE = ([8, 4], [16, 4])  # threads and outputs per thread along rows and columns


def split_and_blocks(ty: list[int], tx: list[int], m: int, n: int, k: int, batch: int, want: int,
                     split: bool = True):
    """(ty, tx, slices) for a product whose blocks are fewer than ``want``: with ``split`` (dense), a
    shape that fills SPLIT_TILE's blocks and a reduction long enough for 2 slices, those blocks and
    the slices above; else the tiles more_blocks shrinks to (at most MAX_THREADS threads) and 1.
    Blocks enough: unchanged."""
    if batch * ty[0] * tx[0] >= want:  # blocks enough (large products keep 128 x 128 blocks)
        return ty, tx, 1
    (yt, yi), (xt, xi) = SPLIT_TILE
    if split and batch == 1 and m >= yt * yi and n >= xt * xi and k % 32 == 0:
        y, x = [-(-m // (yt * yi)), 1, yt, yi], [-(-n // (xt * xi)), 1, xt, xi]
        blocks = y[0] * x[0]
        slices = 1
        for s in (2, 4, 8):
            if blocks * slices >= SPLIT_WAVES * want or k % (s * 32) or k // s < 32 * SPLIT_MIN_STEPS:
                break
            slices = s
        if slices > 1:
            return y, x, slices
    return (*_at_most(*more_blocks(ty, tx, m, n, batch, want), m, n), 1)


# Threads per block of shrunk tiles: 8 x 16 of 4 x 4 outputs were as fast as or faster than
# 16 x 16 wherever measured (H200, weights from memory: ViT's 197 x 2304 x 768 35.2 us against
# 55.7, 197 x 3072 x 768 46.3 against 56.9; bench/cuda_matmul.py --transformer)
MAX_THREADS = 128


def _at_most(ty: list[int], tx: list[int], m: int, n: int):
    """(ty, tx) with the threads of the larger block side halved until MAX_THREADS are left."""
    while ty[2] * tx[2] > MAX_THREADS:
        halved = _halve_larger(ty, tx, m, n, ("threads", 1), other_side=False)
        if halved is None:
            break
        ty, tx = halved
    return ty, tx


def pad_slab(stage, mm, tensor) -> None:
    """Rows of the shared slab ``stage`` (of ``tensor``, read by the product ``mm``) padded so
    that their stride % 8 == 1, on CUDA, where its rows run along the reduction (module doc):
    slabs whose rows run along the output (matmul's K x N B) are read along them, 16 bytes at a
    time, which the padding would misalign."""
    if min_blocks() and len(stage.op.axis) >= 2 and _rows_along_reduction(mm, tensor):
        stage.storage_align(stage.op.axis[-2], 8, 1)


def _rows_along_reduction(mm, tensor) -> bool:
    from kiln.ir import expr as E
    from kiln.ir.functor import post_order_visit

    k = mm.op.reduce_axis[0].var
    found = []
    post_order_visit(mm.op.body[0], lambda n: found.append(n) if isinstance(n, E.ProducerLoad)
                     and n.producer.op is tensor.op else None)
    return bool(found) and all(n.indices[-1] is k for n in found)
