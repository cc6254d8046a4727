"""The static schedule search: the cost model against the cycle model, SRAM pruning, the sweep."""

import numpy as np
import pytest

from kiln import vta
from kiln.errors import CompileError
from kiln.vta import search, top


def _cycles(env, shape, tile, x, w):
    s, args = top.schedule_conv2d(env, top.conv2d(env, shape, shift=8), tile)
    f = vta.build(s, args, env.target, name="conv", env=env, mode="cycle")
    out = np.zeros(tuple(int(d.value) for d in args[2].shape), np.int8)
    f(x, w, out)
    return f["conv"].last_stats["cycles"]


def test_cost_model_ranks_like_cycle_model():
    env = vta.get_env()
    shape = top.ConvShape(1, 32, 8, 8, 32, 3, 3, 1, 1)
    tiles = [t for t in search.space(env, shape) if t.w == 8 and t.h in (2, 4, 8)]
    assert len(tiles) == 18  # 3 heights x 2 x 2 x 2, less co=1 split over 2 threads
    rng = np.random.default_rng(0)
    x = top.pack_nchw(rng.integers(-128, 128, (1, 32, 8, 8)).astype(np.int8), 1, 16)
    w = top.pack_oihw(rng.integers(-128, 128, (32, 32, 3, 3)).astype(np.int8), 16, 16)
    measured = [_cycles(env, shape, t, x, w) for t in tiles]
    model = [search.cost(env, shape, t) for t in tiles]
    assert search.spearman(model, measured) >= 0.9
    pick = tiles[int(np.argmin(model))]
    assert measured[tiles.index(pick)] <= 1.10 * min(measured)


def test_pruned_tiles_do_not_build_and_kept_ones_do():
    env = vta.get_env().replace(LOG_ACC_BUFF_SIZE=13)  # 128 accumulator blocks
    shape = top.ConvShape(1, 16, 8, 8, 32, 3, 3, 1, 1)
    kept = search.space(env, shape)
    big = top.Tile(8, 8, 2, 1, 1)  # 2 x 128 accumulator blocks
    assert big not in kept and "acc tile of 256 blocks exceeds the 128-block acc SRAM" == search.fits(env, shape, big)
    with pytest.raises(CompileError, match="acc blocks"):
        s, args = top.schedule_conv2d(env, top.conv2d(env, shape, 8), big)
        vta.build(s, args, env.target, env=env)
    largest = max(kept, key=lambda t: t.h * t.w * t.co)
    s, args = top.schedule_conv2d(env, top.conv2d(env, shape, 8), largest)
    vta.build(s, args, env.target, env=env)


def test_spearman():
    assert search.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert search.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert search.spearman([1, 2, 2, 3], [1, 2, 2, 3]) == pytest.approx(1.0)


def test_sweep_ranks_configurations_within_budget():
    env = vta.get_env()
    layers = [top.ConvShape(1, 64, 14, 14, 64, 3, 3, 1, 1), top.ConvShape(1, 128, 7, 7, 128, 3, 3, 1, 1)]
    ranked = search.sweep(env, layers, 256 * 1024, blocks=(4, 5), logs=range(14, 18))
    assert ranked and all(a[0] <= b[0] for a, b in zip(ranked, ranked[1:]))
    for cycles, cfg in ranked:
        assert cfg.INP_BUFF_SIZE + cfg.WGT_BUFF_SIZE + cfg.ACC_BUFF_SIZE <= 256 * 1024
    # a larger SRAM budget can only help the best configuration
    more = search.sweep(env, layers, 1024 * 1024, blocks=(4, 5), logs=range(14, 19))
    assert more[0][0] <= ranked[0][0]


def test_sram_too_small_for_minimum_tile_refused():
    env = vta.get_env().replace(LOG_WGT_BUFF_SIZE=11)  # 8 weight blocks; a 3x3 conv needs 9 at least
    shape = top.ConvShape(1, 16, 8, 8, 16, 3, 3, 1, 1)
    assert search.space(env, shape) == []
    with pytest.raises(ValueError, match=r"no tile of .* fits configuration .*'wgt': 9") as info:
        search.best(env, shape)
    assert "\n" not in str(info.value)
