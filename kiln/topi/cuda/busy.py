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


def more_blocks(ty: list[int], tx: list[int], m: int, n: int, batch: int, want: int):
    """(ty, tx) shrunk until batch * blocks >= want (module doc)."""
    for phase in PHASES:
        while batch * ty[0] * tx[0] < want:
            y_first = ty[2] * ty[3] >= tx[2] * tx[3]  # the larger block side first
            y = _halve(ty, m, phase) if y_first else None
            x = _halve(tx, n, phase) if y is None else None
            y = _halve(ty, m, phase) if y is None and x is None and not y_first else y
            if y is not None:
                ty = y
            elif x is not None:
                tx = x
            else:
                break
    return ty, tx


# Split-K (float32 dense on CUDA): a reduction of at least SPLIT_MIN_K terms whose product has few
# output tiles (an FFN's down projection, N = 768 x K = 3072) is cut into 2, 4 or 8 slices of at
# least SPLIT_MIN_STEPS 32-deep k steps, computed by blocks of their own and summed by a second
# kernel, so the blocks keep 4 x 4 outputs per thread and 128-256 threads instead of shrinking to
# 2 x 4 outputs and 64 threads (BERT's 128 x 768 x 3072 dense: 89 us against cuBLAS's 24 on the
# H200 with weights from memory; GPT-2's 64-row one 111 us against 21).
SPLIT_MIN_K = 2048
SPLIT_MIN_STEPS = 8


def split_and_blocks(ty: list[int], tx: list[int], m: int, n: int, k: int, batch: int, want: int,
                     split: bool = True):
    """(ty, tx, slices): the tiles more_blocks shrinks to for the reduction cut into ``slices``
    (1: not cut; always without ``split``), the fewest slices whose blocks keep the most outputs
    per thread (up to 4 x 4), then the most threads (up to 256)."""
    def score(tiles):
        y, x = tiles
        return min(y[3] * x[3], 16), min(y[2] * x[2], MAX_THREADS)

    if batch * ty[0] * tx[0] >= want:  # blocks enough (large products keep 128 x 128 blocks)
        return ty, tx, 1
    best = (_at_most(*more_blocks(ty, tx, m, n, batch, want), m, n), 1)
    if not split or k < SPLIT_MIN_K or batch != 1:
        return (*best[0], 1)
    for slices in (2, 4, 8):
        if k % (slices * 32) or k // slices < 32 * SPLIT_MIN_STEPS:
            continue
        tiles = _at_most(*more_blocks(ty, tx, m, n, batch * slices, want), m, n)
        if score(tiles) > score(best[0]):
            best = (tiles, slices)
    return (*best[0], best[1])


# Threads per block of shrunk tiles: 8 x 16 of 4 x 4 outputs were as fast as or faster than
# 16 x 16 wherever measured (H200, weights from memory: ViT's 197 x 2304 x 768 35.2 us against
# 55.7, 197 x 3072 x 768 46.3 against 56.9; bench/cuda_matmul.py --transformer)
MAX_THREADS = 128


def _at_most(ty: list[int], tx: list[int], m: int, n: int):
    """(ty, tx) with the threads of the larger block side halved until MAX_THREADS are left."""
    while ty[2] * tx[2] > MAX_THREADS:
        y_first = ty[2] * ty[3] >= tx[2] * tx[3]
        y = _halve(ty, m, ("threads", 1)) if y_first else None
        x = _halve(tx, n, ("threads", 1)) if y is None else None
        if y is not None:
            ty = y
        elif x is not None:
            tx = x
        else:
            break
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
