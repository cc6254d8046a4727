"""Block runs -> 2-D DMA instructions, and micro-op lists -> GEMM/ALU loops.

A copy nest evaluates to runs ``(sram_block, dram_block or None, count)`` in program order
(None: a run of zero padding). ``dma_insns`` merges contiguous runs, folds zero runs into the
row and tile padding of LOAD, and stacks equal rows with a constant DRAM stride into one 2-D
instruction. ``compress_uops`` finds a micro-op kernel repeated under two affine loops.
"""

from __future__ import annotations

import numpy as np

from .isa import LOAD, STORE, Insn

MAX_PAD = 15
MAX_SIZE = (1 << 16) - 1
MAX_ITER = (1 << 14) - 1


def _merge_runs(runs):
    out = []
    for s, d, n in runs:
        if out:
            ps, pd, pn = out[-1]
            if ps + pn == s and ((pd is None and d is None) or (pd is not None and d is not None and pd + pn == d)):
                out[-1] = (ps, pd, pn + n)
                continue
        out.append((s, d, n))
    return out


def _rows(runs):
    """Rows (sram, dram, pad0, size, pad1): a data run with the zero runs touching it."""
    rows, k = [], 0
    while k < len(runs):
        s, d, n = runs[k]
        if d is None:
            nxt = runs[k + 1] if k + 1 < len(runs) else None
            if n <= MAX_PAD and nxt is not None and nxt[1] is not None and s + n == nxt[0]:
                pad0, (s2, d2, n2) = n, nxt
                k += 2
                s, d, n = s2 - pad0, d2, n2
            else:
                for off in range(0, n, MAX_PAD):
                    rows.append([s + off, None, min(MAX_PAD, n - off), 0, 0])
                k += 1
                continue
        else:
            pad0 = 0
            k += 1
        for off in range(0, n, MAX_SIZE):
            rows.append([s + pad0 + off if off else s, d + off, pad0 if not off else 0, min(MAX_SIZE, n - off), 0])
        if k < len(runs) and runs[k][1] is None and runs[k][2] <= MAX_PAD and runs[k][0] == s + pad0 + n \
                and n <= MAX_SIZE:
            rows[-1][4] = runs[k][2]
            k += 1
    return rows


def dma_insns(runs, memory_type: int, seg: int, store: bool) -> list:
    """LOAD (or STORE) instructions doing runs, in order."""
    rows = _rows(_merge_runs(runs))
    out, k = [], 0
    while k < len(rows):
        s, d, p0, n, p1 = rows[k]
        width = p0 + n + p1
        if d is None:  # a zero-only row: padding of the tile above or below, else a fill
            insn = Insn(LOAD, memory_type=memory_type, sram_base=s, dram_seg=seg, y_size=1, x_size=0,
                        x_pad_0=p0, x_pad_1=p1)
            out.append(insn)
            k += 1
            continue
        y, stride, j = 1, n, k + 1
        while j < len(rows) and y < MAX_SIZE:
            s2, d2, q0, n2, q1 = rows[j]
            if d2 is None or (q0, n2, q1) != (p0, n, p1) or s2 != s + y * width:
                break
            step = d2 - d
            if y == 1:
                if step <= 0 or step > MAX_SIZE:
                    break
                stride = step
            elif d2 != d + y * stride:
                break
            y += 1
            j += 1
        insn = Insn(STORE if store else LOAD, memory_type=memory_type, sram_base=s, dram_seg=seg, dram_base=d,
                    y_size=y, x_size=n, x_stride=stride, x_pad_0=p0, x_pad_1=p1)
        out.append(insn)
        k = j
    return _fold_y_pads(out)


def _fold_y_pads(insns):
    """A zero row of a tile's width just before/after a 2-D load becomes its y padding."""
    out = []
    for insn in insns:
        if out and insn.opcode == LOAD and insn["x_size"] and not insn["y_pad_0"]:
            prev = out[-1]
            w = insn["x_pad_0"] + insn["x_size"] + insn["x_pad_1"]
            if prev.opcode == LOAD and not prev["x_size"] and prev["x_pad_0"] + prev["x_pad_1"] == w and \
                    prev["sram_base"] + w == insn["sram_base"] and prev["memory_type"] == insn["memory_type"]:
                # the zero row may itself stack with earlier zero rows of the same width
                pads, base = 1, prev["sram_base"]
                out.pop()
                while out and out[-1].opcode == LOAD and not out[-1]["x_size"] and pads < MAX_PAD and \
                        out[-1]["x_pad_0"] + out[-1]["x_pad_1"] == w and out[-1]["sram_base"] + w == base:
                    base = out.pop()["sram_base"]
                    pads += 1
                insn["y_pad_0"], insn["sram_base"] = pads, base
        elif out and insn.opcode == LOAD and not insn["x_size"]:
            prev = out[-1]
            w = prev["x_pad_0"] + prev["x_size"] + prev["x_pad_1"]
            end = prev["sram_base"] + (prev["y_pad_0"] + prev["y_size"] + prev["y_pad_1"]) * w
            if prev.opcode == LOAD and prev["x_size"] and insn["x_pad_0"] + insn["x_pad_1"] == w and \
                    insn["sram_base"] == end and prev["y_pad_1"] < MAX_PAD and \
                    prev["memory_type"] == insn["memory_type"]:
                prev["y_pad_1"] += 1
                continue
        out.append(insn)
    return out


def compress_uops(uops: np.ndarray, max_kernel: int):
    """(kernel, iter_out, iter_in, factor_out, factor_in) pieces covering uops in order.

    uops is an (n, fields) int array; factors are per-field increments (non-negative). The
    smallest kernel that repeats under two affine loops is chosen; pieces split where loops
    would exceed the 14-bit extents or the kernel the micro-op buffer.
    """
    n = len(uops)
    for c in _divisors(n):
        if c > max_kernel:
            break
        m = n // c
        rows = uops.reshape(m, c, -1)
        delta = rows - rows[:, :1]
        if not (delta == delta[:1]).all():
            continue
        starts = rows[:, 0] - rows[0, 0]
        for b in _divisors(m):
            a = m // b
            grid = starts.reshape(a, b, -1)
            fi = grid[0, 1] if b > 1 else np.zeros_like(starts[0])
            fo = grid[1, 0] if a > 1 else np.zeros_like(starts[0])
            if (fi < 0).any() or (fo < 0).any():
                continue
            expect = np.arange(a)[:, None, None] * fo + np.arange(b)[None, :, None] * fi
            if (grid == expect).all():
                return _split(rows[0], a, b, fo, fi)
    # no pattern: plain kernels of at most max_kernel micro-ops
    zero = np.zeros(uops.shape[1], dtype=uops.dtype)
    return [(uops[k:k + max_kernel], 1, 1, zero, zero) for k in range(0, n, max_kernel)]


def _split(kernel, a, b, fo, fi):
    if b > MAX_ITER:  # fold the inner loop into pieces along itself
        out = []
        for i in range(a):
            for j0 in range(0, b, MAX_ITER):
                out.append((kernel + i * fo + j0 * fi, 1, min(MAX_ITER, b - j0), fo, fi))
        return out
    return [(kernel + i0 * fo, min(MAX_ITER, a - i0), b, fo, fi) for i0 in range(0, a, MAX_ITER)]


def _divisors(n):
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
