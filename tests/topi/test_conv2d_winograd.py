"""x86 Winograd F(2x2, 3x3) conv2d on NCHW{b}c data against numpy's direct convolution."""

import numpy as np
import pytest

from kiln import te, topi
from kiln.topi import testing
from kiln.topi.nn.conv2d import conv2d_shape
from kiln.topi.x86.conv2d_winograd import applies, prepack_kernel_winograd


def to_blocked(x, b):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _run(runner, c, k, hw, ib, bn, pad=1, packed=True, tile_p=None, epilogue=False, rows_outer=None, prefetch=None):
    a, wt = runner.rand(1, c, hw, hw), runner.rand(k, c, 3, 3)
    kernel = prepack_kernel_winograd(wt, ib, bn) if packed else wt
    A = te.placeholder((1, c // ib, hw, hw, ib), name="data")
    W = te.placeholder(kernel.shape, name="kernel")
    cfg = {"oc_bn": bn, **({"tile_p": tile_p} if tile_p else {}),
           **({"rows_outer": rows_outer} if rows_outer is not None else {}),
           **({"prefetch": prefetch} if prefetch is not None else {})}
    out = topi.x86.conv2d_winograd_NCHWc(A, W, pad, "float32", cfg=cfg, out_channels=k)
    args, inputs = [A, W], [to_blocked(a, ib), kernel]
    ref = testing.conv2d_nchw_python(a, wt, 1, pad)
    if epilogue:
        bias = runner.rand(k)
        B = te.placeholder((k // bn, 1, 1, bn), name="bias")
        out = topi.nn.relu(topi.add(out, B))
        args.append(B)
        inputs.append(bias.reshape(k // bn, bn)[:, None, None, :])
        ref = np.maximum(ref + bias.reshape(1, k, 1, 1), 0)
    got = runner.run(topi.x86.schedule_conv2d_winograd_NCHWc, out, args, inputs)
    # Winograd reassociates the sums: compare relative to the output's magnitude.
    np.testing.assert_allclose(got, to_blocked(ref, bn), rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("c,k,hw,ib,bn", [
    (16, 16, 6, 16, 16),
    (16, 32, 7, 8, 32),     # odd size: the last tile row and column are cropped
    (32, 16, 9, 16, 16),
    (64, 64, 14, 16, 32),
    (24, 8, 5, 8, 8),
])
def test_winograd_matches_the_direct_convolution(runner, c, k, hw, ib, bn):
    _run(runner, c, k, hw, ib, bn)


def test_kernel_transformed_in_the_kernel_equals_the_prepacked_one(runner):
    _run(runner, 16, 32, 7, 8, 32, packed=False)


@pytest.mark.parametrize("tile_p", [2, 3, 5])  # 3 leaves a tail of tiles in every row of 5
def test_tile_p_with_and_without_a_tail(runner, tile_p):
    _run(runner, 32, 16, 9, 16, 16, tile_p=tile_p)


def test_padding_zero_and_a_fused_epilogue(runner):
    _run(runner, 16, 16, 8, 16, 16, pad=0)
    _run(runner, 16, 32, 8, 16, 32, epilogue=True)


def test_only_3x3_stride_1_convolutions():
    assert applies(conv2d_shape("c", (1, 16, 8, 8), (16, 16, 3, 3), 1, 1, 1, 1))
    assert not applies(conv2d_shape("c", (1, 16, 8, 8), (16, 16, 3, 3), 2, 1, 1, 1))
    assert not applies(conv2d_shape("c", (1, 16, 8, 8), (16, 16, 1, 1), 1, 0, 1, 1))
    A = te.placeholder((1, 1, 8, 8, 16), name="data")
    W = te.placeholder((16, 16, 5, 5), name="kernel")
    with pytest.raises(ValueError, match="3x3 kernel, stride 1"):
        topi.x86.conv2d_winograd_NCHWc(A, W, 2, "float32")


def test_input_transform_tasks_split_the_tiles_when_blocks_are_few(runner):
    import kiln
    from kiln.topi.x86.conv2d_winograd import transform_groups

    # ResNet's 64@56 in blocks of 16: 4 blocks x 16 groups of 49 tiles (784 = 28 x 28 tiles)
    assert transform_groups(784, 4, 64) == 16 and transform_groups(196, 8, 64) == 14
    assert transform_groups(49, 8, 64) == 7 and transform_groups(784, 64, 64) == 1 and transform_groups(9, 2, 64) == 1
    A = te.placeholder((1, 4, 56, 56, 16), name="data")
    W = te.placeholder((4, 16, 4, 16, 16), name="kernel")  # prepacked: no kernel transform loop
    out = topi.x86.conv2d_winograd_NCHWc(A, W, 1, "float32", cfg={"oc_bn": 16}, out_channels=64)
    text = str(kiln.lower(topi.x86.schedule_conv2d_winograd_NCHWc(out), [A, W, out], simple_mode=True))
    transform = text.index("T.parallel(", text.index("winograd_input = T.allocate"))
    assert text.startswith("T.parallel(64)", transform)  # was 4: one task per channel block
    # the split is exact for a tile count with no divisor in range (5x5 -> 9 tiles, one group) and
    # for one split unevenly into rows (14x14 -> 49 tiles, 7 groups of 7) against numpy
    _run(runner, 16, 32, 5, 16, 16, epilogue=True)
    _run(runner, 32, 32, 14, 16, 16, epilogue=True)


# The output loop's tasks with tile rows outside the output blocks (rows_outer): a tail of
# tiles, cropped odd sizes and the fused epilogue; which convs take it on full-width AVX-512.
@pytest.mark.parametrize("c,k,hw,ib,bn,tile_p", [(32, 48, 9, 16, 16, 3), (16, 32, 7, 8, 32, None)])
def test_tile_rows_outside_the_blocks(runner, c, k, hw, ib, bn, tile_p):
    _run(runner, c, k, hw, ib, bn, tile_p=tile_p, epilogue=True, rows_outer=1)


def test_which_convs_take_tile_rows_outside_the_blocks():
    from kiln.target import Target
    from kiln.topi.x86.conv2d_winograd import default_config

    def shape(c, hw):
        return conv2d_shape("c", (1, c, hw, hw), (c, c, 3, 3), 1, 1, 1, 1)

    with Target("llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids"):
        # ResNet's 64@56 (V 3.2 MB, U 256 KB) and 128@28 (1.6 MB, 1 MB); not 256@14 (U 4 MB)
        assert [default_config(shape(c, hw))["rows_outer"] for c, hw in ((64, 56), (128, 28), (256, 14))] == [1, 1, 0]
        assert default_config(shape(256, 14))["prefetch"] == 1
    for cpu in ("znver3", "znver4"):  # AMD and AVX2 code keep blocks outside
        with Target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}"):
            assert not default_config(shape(64, 56)).get("rows_outer") and not default_config(shape(256, 14)).get("prefetch")


# Prefetches of the next output block's U (full-width default): no result
# changes, with a tail of tiles, odd sizes, the last block clamped to itself.
@pytest.mark.parametrize("c,k,hw,ib,bn,tile_p", [(32, 48, 9, 16, 16, 3), (64, 96, 14, 32, 32, None)])
@pytest.mark.parametrize("rows_outer", [0, 1])  # with rows outside: all of the next block's U per task
def test_prefetching_the_next_blocks_weights(runner, c, k, hw, ib, bn, tile_p, rows_outer):
    import kiln

    _run(runner, c, k, hw, ib, bn, tile_p=tile_p, epilogue=True, rows_outer=rows_outer, prefetch=1)
    A = te.placeholder((1, c // ib, hw, hw, ib), name="data")
    W = te.placeholder((k // bn, 16, c // ib, ib, bn), name="kernel")
    out = topi.x86.conv2d_winograd_NCHWc(A, W, 1, "float32", out_channels=k,
                                         cfg={"oc_bn": bn, "rows_outer": rows_outer, "prefetch": 1})
    text = str(kiln.lower(topi.x86.schedule_conv2d_winograd_NCHWc(out), [A, W, out], simple_mode=True))
    lines = [line for line in text.splitlines() if '"tir.prefetch"' in line]
    assert lines and all(f"+ 1, {k // bn - 1})" in line for line in lines)  # the next block, clamped
