"""Static schedule search: an analytical cost model of the pipeline, SRAM pruning, and a sweep
over hardware configurations. Nothing here runs the simulators.

For a conv layer and a ``top.Tile`` the model counts what the schedule in top.py issues:
per output tile and input-channel step, an input tile (with its halo, once per virtual thread,
as each thread keeps a private copy) and a weight tile over the DMA port, one DMA latency per
2-D LOAD, and ``co*h*w*ci*kh*kw`` GEMM blocks; then the reset, the 3-op ALU chain and the
STOREs. With one thread, a step's loads wait for the previous step's GEMMs (same buffers), so
load and compute add; with two or more, the threads alternate, one loading while another
computes, so after the first load each thread-step costs the larger of the two. Tiles that do
not fit an SRAM are pruned before costing (``fits``).
"""

from __future__ import annotations

import itertools
import math

from .top import ConvShape, Tile

GEMM_FILL = 4  # as the cycle model (src/vta/sim.c)
ALU_FILL = 4


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def sram_use(env, shape: ConvShape, tile: Tile) -> dict:
    """Blocks of each SRAM the schedule allocates at once."""
    hin = (tile.h - 1) * shape.stride + shape.kh
    win = (tile.w - 1) * shape.stride + shape.kw
    co_t = tile.co // tile.vthreads
    return {"inp": tile.vthreads * tile.ci * hin * win,
            "wgt": tile.vthreads * co_t * tile.ci * shape.kh * shape.kw,
            "acc": tile.vthreads * 2 * co_t * tile.h * tile.w}


def fits(env, shape: ConvShape, tile: Tile) -> str:
    """'' when the tile fits every SRAM, else the constraint it breaks (one line)."""
    use = sram_use(env, shape, tile)
    for mem, depth in (("inp", env.INP_DEPTH), ("wgt", env.WGT_DEPTH), ("acc", env.ACC_DEPTH)):
        if use[mem] > depth:
            return f"{mem} tile of {use[mem]} blocks exceeds the {depth}-block {mem} SRAM"
    if tile.co % tile.vthreads:
        return f"{tile.co} channel blocks do not split over {tile.vthreads} virtual threads"
    return ""


def space(env, shape: ConvShape, vthreads=(1, 2), max_points: int | None = None) -> list[Tile]:
    """Every tile (divisors of the output rows/cols/channel blocks and input-channel blocks) that fits."""
    ob, ib = shape.o // env.BLOCK_OUT, shape.c // env.BLOCK_IN
    out = []
    for h, w, co, ci, vt in itertools.product(_divisors(shape.oh), _divisors(shape.ow), _divisors(ob),
                                              _divisors(ib), vthreads):
        tile = Tile(h, w, co, ci, vt)
        if not fits(env, shape, tile):
            out.append(tile)
    return out[:max_points] if max_points else out


def cost(env, shape: ConvShape, tile: Tile) -> float:
    """Estimated cycles of the layer with this tile (the cycle model's units)."""
    bw, lat = env.DMA_BYTES_PER_CYCLE, env.DMA_LATENCY
    ob, ib = shape.o // env.BLOCK_OUT, shape.c // env.BLOCK_IN
    tiles = (ob // tile.co) * (shape.oh // tile.h) * (shape.ow // tile.w) * (shape.n // env.BATCH)
    if not tiles:
        return math.inf
    steps = ib // tile.ci
    hin = (tile.h - 1) * shape.stride + shape.kh
    win = (tile.w - 1) * shape.stride + shape.kw
    vt = tile.vthreads
    inp_bytes = vt * tile.ci * hin * win * env.INP_ELEM_BYTES
    wgt_bytes = tile.co * tile.ci * shape.kh * shape.kw * env.WGT_ELEM_BYTES
    # per thread and step: one 2-D LOAD per input-channel block, one for the weights; the load
    # module waits out each one's latency
    load = (inp_bytes + wgt_bytes) / bw + vt * (tile.ci + 1) * lat
    gemm = tile.co * tile.h * tile.w * tile.ci * shape.kh * shape.kw + vt * GEMM_FILL
    if vt == 1:  # the next step's loads overwrite the tiles this step's GEMMs read
        body = steps * (load + gemm)
    else:  # threads alternate: one loads while another computes, after the first load
        lt, gt = load / vt, gemm / vt
        body = lt + (steps * vt - 1) * max(lt, gt) + gt
    blocks = tile.co * tile.h * tile.w
    stores = vt * (1 if tile.w == shape.ow else tile.co // vt)  # whole rows store as one 2-D STORE
    epilogue = blocks * (1 + 3) + vt * (GEMM_FILL + 3 * ALU_FILL) + blocks * env.OUT_ELEM_BYTES / bw + stores * lat
    return tiles * (body + epilogue)


def best(env, shape: ConvShape, tiles=None) -> tuple[Tile, float]:
    """The tile the cost model ranks first."""
    tiles = space(env, shape) if tiles is None else tiles
    if not tiles:
        raise ValueError(f"no tile of {shape} fits configuration {env.model}: the smallest tile (1x1 output, one "
                         f"channel block) needs {sram_use(env, shape, Tile(1, 1, 1, 1))} blocks; grow the SRAMs")
    scored = [(cost(env, shape, t), t) for t in tiles]
    c, t = min(scored, key=lambda x: x[0])
    return t, c


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    def ranks(x):
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va and vb else 0.0


def sweep(base_env, layers, sram_budget_bytes: int, blocks=(4, 5), logs=range(13, 20)):
    """Hardware configurations within an SRAM budget (inp+wgt+acc bytes), ranked by the model's
    whole-model cycles with each layer's best tile. Returns [(cycles, env), ...], best first;
    configurations on which some layer has no valid tile are left out."""
    ranked = []
    for lb, li, lw, la in itertools.product(blocks, logs, logs, logs):
        if (1 << li) + (1 << lw) + (1 << la) > sram_budget_bytes:
            continue
        try:
            env = base_env.replace(LOG_BLOCK_IN=lb, LOG_BLOCK_OUT=lb, LOG_INP_BUFF_SIZE=li,
                                   LOG_WGT_BUFF_SIZE=lw, LOG_ACC_BUFF_SIZE=la)
        except ValueError:
            continue  # an invalid configuration (refused with its constraint)
        total = 0.0
        for shape in layers:
            if shape.c % env.BLOCK_IN or shape.o % env.BLOCK_OUT:
                total = math.inf
                break
            tiles = space(env, shape)
            if not tiles:
                total = math.inf
                break
            total += best(env, shape, tiles)[1]
        if math.isfinite(total):
            ranked.append((total, env))
    ranked.sort(key=lambda x: x[0])
    return ranked
