"""What the CPU target offers a schedule, from LLVM (``kiln.target.cpu_facts``): vector lanes,
vector registers, and the register tile a GEMM-like kernel can keep in them.

Every x86 / arm_cpu default tile derives from these, for the current target (``with
Target(...)``) or, with none active, this machine.
"""

from __future__ import annotations


def facts(target=None):
    """``kiln.target.cpu_facts.CPUFacts`` of ``target`` (default: the current one, else the host)."""
    from kiln.target.cpu_facts import cpu_facts

    return cpu_facts(target)


def vector_lanes(dtype_bits: int = 32, target=None) -> int:
    """Lanes of one vector register for floats of ``dtype_bits`` (1 without SIMD)."""
    return facts(target).lanes({16: "float16", 32: "float32", 64: "float64"}.get(dtype_bits, f"int{dtype_bits}"))


def vector_registers(target=None) -> int:
    """Architectural vector registers: 32 with AVX-512 or AArch64, 16 with AVX2/SSE or ARMv7 NEON."""
    return facts(target).vector_registers


def tile_fits(rows: int, vectors: int, registers: int) -> bool:
    """Whether a rows x vectors tile of accumulators, plus one row of ``vectors`` loaded
    operands and one broadcast, fits the vector registers (beyond that LLVM spills every step)."""
    return rows * vectors + vectors + 1 <= registers


def accumulator_rows(vectors: int, registers: int, spare: int = 8) -> int:
    """Rows of ``vectors`` accumulators a register tile can take. With 16 registers, all that
    ``tile_fits`` (AVX2 code: 14 pixels of one vector ran 1x1 convs 1.45x faster than 8); with
    32, ``spare`` more stay free as well (AVX-512: 12 rows of two vectors beat 14)."""
    fit = (registers - vectors - 1) // vectors
    if registers >= 32:
        fit = min(fit, (registers - spare) // vectors)
    return max(1, fit)


def pixel_major(pixels: int, chunks: int, vectors: int, window: bool = False) -> bool:
    """Whether a tile of ``pixels`` x ``chunks`` blocks of ``vectors`` vectors runs pixel-major
    (one broadcast live, with all the blocks' kernel vectors) rather than block-major (one
    block's vectors live, with all the tile's broadcasts): whichever keeps fewer live.

    ``window``: the innermost reduction steps over kernel taps (a plain, one-channel-per-step
    input): LLVM unrolls the taps and keeps each broadcast for the taps that read the same pixel
    again, so the tile's broadcasts are live in either order and block-major always is cheaper
    (pixel-major 6 x 2 spilled in ResNet's 7x7 stem on AVX2, 1.28x slower than 4 x 2)."""
    return not window and chunks * vectors + 1 <= pixels + vectors


def tile_operands(pixels: int, chunks: int, vectors: int, window: bool = False) -> int:
    """Registers such a tile's operands take besides its accumulators, in its cheaper order."""
    return pixels + vectors if window else min(chunks * vectors + 1, pixels + vectors)
