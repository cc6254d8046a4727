"""x86 conv2d on channel-blocked NCHW{b}c data against numpy."""

import numpy as np
import pytest

from kiln import te, topi
from kiln.topi import testing
from kiln.topi.x86.conv2d_nchwc import config_for_nchwc, flat_tasks, out_block, prepack_kernel_nchwc
from kiln.topi.nn.conv2d import conv2d_shape


def to_blocked(x, b):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _run(runner, c, o, hw, k, stride, pad, ib, cfg=None, packed=False, plain_output=False, epilogue=False):
    a, wt = runner.rand(1, c, hw, hw), runner.rand(o, c, k, k)
    bn = config_for_nchwc(a.shape, wt.shape, stride, pad, 1, cfg)["oc_bn"]
    kernel = prepack_kernel_nchwc(wt, ib or 1, bn) if packed else wt
    data = to_blocked(a, ib) if ib else a
    A = te.placeholder(data.shape, name="data")
    W = te.placeholder(kernel.shape, name="kernel")
    out = topi.x86.conv2d_NCHWc(A, W, stride, pad, 1, "float32", cfg=cfg, out_channels=o, plain_output=plain_output)
    args, inputs = [A, W], [data, kernel]
    ref = testing.conv2d_nchw_python(a, wt, stride, pad)
    if epilogue:  # bias + residual + relu, fused into the tile's store
        bias, res = runner.rand(o), runner.rand(*out.shape)
        B = te.placeholder((o // bn, 1, 1, bn) if not plain_output else (o, 1, 1), name="bias")
        R = te.placeholder(res.shape, name="residual")
        out = topi.nn.relu(topi.add(topi.add(out, B), R))
        args += [B, R]
        inputs += [bias.reshape(B.shape) if plain_output else bias.reshape(o // bn, bn)[:, None, None, :], res]
        res_nchw = res if plain_output else res.transpose(0, 1, 4, 2, 3).reshape(ref.shape)
        ref = np.maximum(ref + bias.reshape(1, o, 1, 1) + res_nchw, 0)
    got = runner.run(topi.x86.schedule_conv2d_NCHWc, out, args, inputs)
    np.testing.assert_allclose(got, ref if plain_output else to_blocked(ref, bn), rtol=1e-4, atol=1e-4)
    return bn


@pytest.mark.parametrize("c,o,hw,k,stride,pad,ib", [
    (16, 32, 14, 3, 1, 1, 16),   # blocked in and out
    (3, 32, 20, 3, 2, 1, 0),     # an RGB image read as plain NCHW
    (3, 16, 23, 7, 2, 3, 0),     # ResNet's 7x7/2 stem, odd size
    (24, 48, 9, 1, 1, 0, 8),     # 24 channels come in blocks of 8
    (32, 24, 8, 1, 1, 0, 16),    # 24 output channels: the block drops to 8
    (64, 64, 7, 3, 1, 1, 16),
    (32, 64, 10, 3, 2, 1, 8),
])
@pytest.mark.parametrize("packed", [False, True])
def test_conv2d_nchwc_matches_numpy(runner, c, o, hw, k, stride, pad, ib, packed):
    _run(runner, c, o, hw, k, stride, pad, ib, packed=packed)


def test_knobs_set_the_output_block_and_tile(runner):
    bn = _run(runner, 32, 64, 10, 3, 1, 1, 16, cfg={"oc_bn": 32, "tile_ow": 5, "ic_unroll": 4}, packed=True)
    assert bn == 32


@pytest.mark.parametrize("plain_output", [False, True])
def test_fused_epilogue(runner, plain_output):
    _run(runner, 16, 32, 8, 3, 1, 1, 16, packed=True, plain_output=plain_output, epilogue=True)


# Register tiles over several output blocks (the AVX2 defaults), in both loop orders, with a
# tail tile, a fused epilogue, and a plain NCHW output (which keeps one block per tile).
@pytest.mark.parametrize("c,o,hw,k,stride,pad,ib,cfg", [
    (16, 48, 14, 1, 1, 0, 8, {"oc_bn": 8, "oc_chunks": 3, "tile_ow": 4}),   # pixel-major, tail of 2
    (16, 64, 9, 3, 1, 1, 8, {"oc_bn": 8, "oc_chunks": 4, "tile_ow": 2}),    # block-major, tail of 1
    (3, 32, 20, 3, 2, 1, 0, {"oc_bn": 8, "oc_chunks": 2, "tile_ow": 6}),    # plain RGB input
    (3, 32, 23, 7, 2, 3, 0, {"oc_bn": 16, "oc_chunks": 2, "tile_ow": 7}),   # the 7x7/2 stem's full-width tile, tail of 5
    (32, 64, 7, 3, 2, 1, 16, {"oc_bn": 16, "oc_chunks": 2, "tile_ow": 3}),
])
@pytest.mark.parametrize("epilogue", [False, True])
def test_tiles_over_several_blocks(runner, c, o, hw, k, stride, pad, ib, cfg, epilogue):
    _run(runner, c, o, hw, k, stride, pad, ib, cfg=cfg, packed=True, epilogue=epilogue)


# A 1x1 conv at stride 1 reads input pixel q for output pixel q, so a task may walk the whole
# image as one run: 7-pixel rows in tiles of 3 end in a 1-pixel tile each, a run of 49 once.
@pytest.mark.parametrize("c,o,hw,ib,cfg,epilogue", [
    (64, 128, 7, 8, {"oc_bn": 8, "oc_chunks": 2, "tile_ow": 3}, False),
    (64, 128, 7, 8, {"oc_bn": 8, "oc_chunks": 2, "tile_ow": 3}, True),
    (32, 64, 5, 16, {"oc_bn": 8, "oc_chunks": 1, "tile_ow": 4}, True),
    (3, 64, 7, 0, {"oc_bn": 8, "oc_chunks": 1, "tile_ow": 3}, False),   # plain RGB input
])
def test_one_run_of_pixels_per_task(runner, c, o, hw, ib, cfg, epilogue):
    _run(runner, c, o, hw, 1, 1, 0, ib, cfg=cfg, packed=True, epilogue=epilogue)


def test_a_run_of_pixels_has_one_tail_tile():
    import kiln

    A = te.placeholder((1, 8, 7, 7, 8), name="data")
    W = te.placeholder((128, 64, 1, 1), name="kernel")
    out = topi.x86.conv2d_NCHWc(A, W, 1, 0, 1, "float32", cfg={"oc_bn": 8, "oc_chunks": 2, "tile_ow": 3})
    text = str(kiln.lower(topi.x86.schedule_conv2d_NCHWc(out), [A, W, out], simple_mode=True))
    # 8 tasks of 2 blocks, each 16 whole tiles of 3 pixels and one of 1; no tile of varying size.
    assert "T.parallel(8)" in text and "T.serial(16)" in text and "T.min(" not in text


@pytest.mark.parametrize("shape,cfg,flat", [
    ((64, 128, 7, 1, 1, 0), {"oc_bn": 8, "oc_chunks": 2, "tile_ow": 3}, True),
    ((64, 128, 7, 1, 1, 0), {"oc_bn": 8, "oc_chunks": 4, "tile_ow": 3}, False),  # 4 tasks: rows
    ((64, 128, 7, 1, 1, 0), {"oc_bn": 8, "oc_chunks": 2, "tile_ow": 7}, False),  # no tail to save
    ((64, 128, 14, 1, 1, 0), {"oc_bn": 8, "oc_chunks": 2, "tile_ow": 3}, False),  # 15 of 14: too little
])
def test_which_convs_walk_one_run(shape, cfg, flat):
    c, o, hw, k, stride, pad = shape
    p = conv2d_shape("t", (1, c, hw, hw), (o, c, k, k), stride, pad, 1, 1)
    assert flat_tasks(p, config_for_nchwc((1, c, hw, hw), (o, c, k, k), stride, pad, 1, cfg)) is flat


def test_several_blocks_with_plain_output(runner):
    _run(runner, 16, 32, 8, 3, 1, 1, 16, cfg={"oc_bn": 8, "oc_chunks": 2, "tile_ow": 3}, packed=True,
         plain_output=True, epilogue=True)


def test_oc_chunks_that_do_not_divide_the_blocks_fall_back_to_one():
    conf = config_for_nchwc((1, 16, 8, 8), (24, 16, 1, 1), 1, 0, 1, {"oc_bn": 8, "oc_chunks": 2})
    assert (conf["oc_bn"], conf["oc_chunks"]) == (8, 1)


def test_out_block_is_a_dividing_power_of_two():
    assert [out_block(c, 16) for c in (16, 24, 32, 96, 160, 12, 6, 3)] == [16, 8, 16, 16, 16, 4, 0, 0]
    assert out_block(160, 32) == 32 and out_block(320, 64) == 64 and out_block(48, 32) == 16


def test_a_block_that_divides_nothing_is_refused():
    A = te.placeholder((1, 3, 8, 8), name="data")
    W = te.placeholder((6, 3, 3, 3), name="kernel")
    with pytest.raises(ValueError, match="no channel block divides the 6 output channels"):
        topi.x86.conv2d_NCHWc(A, W, 1, 1, 1, "float32")


# Channel passes (ic_pass, the default where a task's weights outgrow the caches on CPUs that
# run 512-bit FMAs whole): a task sums its whole output block over passes of input channels,
# rows inside each pass; with a tail tile, several blocks per tile, stride 2, 1x1 and a fused
# epilogue.
@pytest.mark.parametrize("c,o,hw,k,stride,pad,ib,cfg", [
    (64, 32, 7, 3, 1, 1, 16, {"oc_bn": 16, "tile_ow": 7, "ic_pass": 32}),
    (64, 64, 9, 3, 2, 1, 16, {"oc_bn": 16, "oc_chunks": 2, "tile_ow": 3, "ic_pass": 16}),
    (48, 32, 7, 1, 1, 0, 16, {"oc_bn": 16, "tile_ow": 4, "ic_pass": 32}),
    (32, 64, 6, 3, 1, 1, 8, {"oc_bn": 32, "tile_ow": 6, "ic_pass": 16}),
])
@pytest.mark.parametrize("epilogue", [False, True])
def test_channel_passes(runner, c, o, hw, k, stride, pad, ib, cfg, epilogue):
    _run(runner, c, o, hw, k, stride, pad, ib, cfg=cfg, packed=True, epilogue=epilogue)


def test_a_channel_pass_keeps_its_weights_for_every_row():
    import kiln

    A = te.placeholder((1, 4, 7, 7, 16), name="data")
    W = te.placeholder((64, 64, 3, 3), name="kernel")
    out = topi.x86.conv2d_NCHWc(A, W, 1, 1, 1, "float32",
                                cfg={"oc_bn": 16, "tile_ow": 7, "ic_pass": 32, "pass_rows": 7})
    text = str(kiln.lower(topi.x86.schedule_conv2d_NCHWc(out), [A, W, out], simple_mode=True))
    # one task per output block (all 7 rows); 2 passes of 2 input blocks, the 7 rows inside each pass
    assert "T.parallel(4)" in text
    passes, rows = text.index("for rco_outer in T.serial(2)"), text.index("in T.serial(7)", text.index("rco_outer"))
    assert passes < rows < text.index("for rco_inner in T.serial(2)")


# Rows per task (pass_rows): the default splits the rows where the blocks alone give few tasks;
# groups that divide the rows, a one-row tail (7 in 2s), a longer tail (9 in 4s), several blocks
# per tile and stride 2, each with the fused epilogue.
@pytest.mark.parametrize("c,o,hw,k,stride,pad,ib,cfg", [
    (64, 32, 7, 3, 1, 1, 16, {"oc_bn": 16, "tile_ow": 7, "ic_pass": 32}),
    (32, 32, 7, 3, 1, 1, 16, {"oc_bn": 16, "tile_ow": 7, "ic_pass": 16, "pass_rows": 2}),
    (48, 32, 9, 1, 1, 0, 16, {"oc_bn": 16, "tile_ow": 5, "ic_pass": 32, "pass_rows": 4}),
    (64, 64, 9, 3, 2, 1, 16, {"oc_bn": 16, "oc_chunks": 2, "tile_ow": 3, "ic_pass": 16, "pass_rows": 2}),
])
def test_channel_passes_over_row_groups(runner, c, o, hw, k, stride, pad, ib, cfg):
    _run(runner, c, o, hw, k, stride, pad, ib, cfg=cfg, packed=True, epilogue=True)


def test_channel_pass_tasks_split_rows_when_blocks_are_few():
    import kiln
    from kiln.topi.x86.conv2d_nchwc import PASS_TASKS, pass_rows

    # ResNet's 512->512 3x3 at 7x7 in blocks of 32: 16 blocks x 4 groups of 2 rows (the last 1)
    assert pass_rows(7, 16) == 2 and 16 * 4 >= PASS_TASKS
    assert pass_rows(14, 8) == 1 and pass_rows(7, 64) == 7 and pass_rows(9, 4) == 1
    A = te.placeholder((1, 16, 7, 7, 32), name="data")
    W = te.placeholder((512, 512, 3, 3), name="kernel")
    out = topi.x86.conv2d_NCHWc(A, W, 1, 1, 1, "float32", cfg={"oc_bn": 32, "tile_ow": 7, "ic_pass": 32})
    text = str(kiln.lower(topi.x86.schedule_conv2d_NCHWc(out), [A, W, out], simple_mode=True))
    assert "T.parallel(64)" in text


# Rows outside the channel blocks (rows_outer): the same (block, row) tasks in the other order;
# several blocks per tile, stride 2, a tail tile, 3x3 with padding, each with the fused epilogue.
@pytest.mark.parametrize("c,o,hw,k,stride,pad,ib,cfg", [
    (32, 64, 14, 1, 2, 0, 16, {"oc_bn": 16, "oc_chunks": 2, "tile_ow": 7, "rows_outer": 1}),
    (32, 48, 9, 3, 1, 1, 16, {"oc_bn": 16, "tile_ow": 4, "rows_outer": 1}),
    (16, 32, 8, 1, 1, 0, 16, {"oc_bn": 32, "tile_ow": 8, "rows_outer": 1}),
])
def test_rows_outside_the_blocks(runner, c, o, hw, k, stride, pad, ib, cfg):
    _run(runner, c, o, hw, k, stride, pad, ib, cfg=cfg, packed=True, epilogue=True)


def test_rows_outside_the_blocks_order_the_tasks():
    import kiln

    A = te.placeholder((1, 2, 6, 6, 16), name="data")
    W = te.placeholder((64, 32, 1, 1), name="kernel")
    texts = []
    for rows in (0, 1):
        out = topi.x86.conv2d_NCHWc(A, W, 1, 0, 1, "float32", cfg={"oc_bn": 16, "tile_ow": 6, "rows_outer": rows})
        texts.append(str(kiln.lower(topi.x86.schedule_conv2d_NCHWc(out), [A, W, out], simple_mode=True)))
    # 4 blocks x 6 rows either way; a task's input row (96 floats apart) is task % 6 (blocks
    # outside) or task // 4 (rows outside)
    assert all("T.parallel(24)" in t for t in texts)
    assert "fused % 6 * 96" in texts[0] and "fused // 4 * 96" in texts[1]


def test_which_convs_take_rows_outside_the_blocks():
    from kiln.topi.x86.conv2d_nchwc import rows_outer

    def shape(c, o, hw, k, stride):
        return conv2d_shape("conv2d", (1, c, hw, hw), (o, c, k, k), stride, k // 2, 1, 1)

    # ResNet-50 at 56x56: 3.2 MB of input, 64-512 KB of weights (and 128->128 3x3/2: 1.6 MB, 576 KB)
    assert rows_outer(shape(256, 64, 56, 1, 1)) and rows_outer(shape(256, 512, 56, 1, 2))
    assert rows_outer(shape(128, 128, 56, 3, 2))
    # from 512 KB of input: 64 channels at 56x56 (800 KB)
    assert rows_outer(shape(64, 256, 56, 1, 1)) and rows_outer(shape(64, 64, 56, 1, 1))
    # weights as large as the input or larger, or a small input: blocks outside
    assert not rows_outer(shape(1024, 512, 14, 1, 1)) and not rows_outer(shape(512, 1024, 28, 1, 2))
    assert not rows_outer(shape(64, 256, 28, 1, 1)) and not rows_outer(shape(512, 512, 7, 3, 1))


# A 1x1 conv's input block of 32 unrolled (the full-width AVX-512 default for 1x1 convs), with
# the fused epilogue, in the row schedule and over flat pixels.
@pytest.mark.parametrize("c,o,hw,cfg", [
    (64, 32, 6, {"oc_bn": 32, "tile_ow": 6, "ic_unroll": 32}),
    (64, 64, 5, {"oc_bn": 16, "oc_chunks": 2, "tile_ow": 4, "ic_unroll": 32}),
])
def test_unrolled_input_block(runner, c, o, hw, cfg):
    _run(runner, c, o, hw, 1, 1, 0, 32, cfg=cfg, packed=True, epilogue=True)


@pytest.mark.parametrize("cpu,unroll", [("sapphirerapids", 32), ("skylake-avx512", 32), ("znver4", 1), ("znver3", 1)])
def test_which_cpus_unroll_a_1x1_convs_input_block(cpu, unroll):
    from kiln.target import Target

    with Target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}"):
        assert config_for_nchwc((1, 1024, 14, 14), (256, 1024, 1, 1))["ic_unroll"] == unroll
        assert config_for_nchwc((1, 256, 14, 14), (256, 256, 3, 3), 1, 1)["ic_unroll"] == 1
        assert config_for_nchwc((1, 128, 14, 14), (32, 128, 1, 1))["ic_unroll"] == 1  # narrow: not worth its code


# Software prefetches of weights (the full-width default): in channel passes a task over all rows
# asks for the next pass's, a task over a group of rows for its share of the next blocks'.
# Prefetches change no result; with several blocks per tile, stride 2, a tail of rows, 1x1.
@pytest.mark.parametrize("c,o,hw,k,stride,pad,ib,cfg", [
    (64, 32, 7, 3, 1, 1, 16, {"oc_bn": 16, "tile_ow": 7, "ic_pass": 32, "pass_rows": 7}),
    (64, 64, 7, 3, 1, 1, 16, {"oc_bn": 16, "tile_ow": 4, "ic_pass": 16, "pass_rows": 2}),
    (64, 64, 9, 3, 2, 1, 16, {"oc_bn": 16, "oc_chunks": 2, "tile_ow": 3, "ic_pass": 16, "pass_rows": 2}),
    (48, 32, 9, 1, 1, 0, 16, {"oc_bn": 16, "tile_ow": 5, "ic_pass": 32, "pass_rows": 4}),
    # the row schedule: a (block group, row) task asks for its share of the next group's weights
    (32, 64, 9, 3, 2, 1, 16, {"oc_bn": 16, "oc_chunks": 2, "tile_ow": 3}),
    (64, 48, 7, 1, 1, 0, 32, {"oc_bn": 16, "tile_ow": 4, "ic_unroll": 32}),
    (32, 64, 2, 3, 2, 1, 16, {"oc_bn": 16, "tile_ow": 1}),  # an output of one row: one group
])
def test_weight_prefetches(runner, c, o, hw, k, stride, pad, ib, cfg):
    _run(runner, c, o, hw, k, stride, pad, ib, cfg={**cfg, "prefetch": 1}, packed=True, epilogue=True)


def test_weight_prefetches_stay_inside_the_weights():
    import re

    import kiln

    for rows in (7, 2):
        A = te.placeholder((1, 4, 7, 7, 16), name="data")
        W = te.placeholder((4, 4, 3, 3, 16, 16), name="kernel")  # pre-packed: 36864 elements
        out = topi.x86.conv2d_NCHWc(A, W, 1, 1, 1, "float32", out_channels=64,
                                    cfg={"oc_bn": 16, "tile_ow": 7, "ic_pass": 16, "pass_rows": rows, "prefetch": 1})
        text = str(kiln.lower(topi.x86.schedule_conv2d_NCHWc(out), [A, W, out], simple_mode=True))
        # all rows: a tap's 16 lines of the next pass over 7 rows, 3 a row; groups of 2 rows: 576
        # lines of the next block / 4 groups over 72 tap iterations, 2 each; the pass or block
        # clamped to the last one
        lines = [re.sub(r"\by_\d+\b", "y", line) for line in text.splitlines() if '"tir.prefetch"' in line]
        assert len(set(lines)) == (3 if rows == 7 else 2)  # (a row loop split in two holds them twice)
        clamp = "T.min(rco_outer + 1, 3)" if rows == 7 else "T.min(i0_i1_fused_i2_outer_fused // 4 + 1, 3)"
        assert all(clamp in line for line in lines)


def test_which_convs_prefetch_weights():
    from kiln.target import Target

    for cpu, want in (("sapphirerapids", 1), ("znver4", 0), ("znver3", 0)):
        with Target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}"):
            assert config_for_nchwc((1, 512, 7, 7), (512, 512, 3, 3), 1, 1)["prefetch"] == want
            assert config_for_nchwc((1, 1024, 14, 14), (256, 1024, 1, 1))["prefetch"] == want


# Taps that read only padding for every output pixel are left out (DeepLabV3's ASPP: 3x3 convs
# dilated 12/24/36 on 33x33 maps): rows/columns dropped on both sides, on one side (asymmetric
# padding, the first live tap inside the image), none, and with stride 2.
@pytest.mark.parametrize("c,o,hw,dilation,stride,pad", [
    (16, 32, 9, 12, 1, 12),            # only the centre tap is live: a 1x1 conv
    (16, 32, 9, 6, 1, 6),              # every tap live somewhere
    (16, 16, 7, 4, 2, (1, 9, 8, 0)),   # top/left taps dropped, the first live one inside the image
    (16, 16, 8, 5, 1, (10, 0, 0, 10)),
    (16, 16, 33, 24, 1, 24),           # ASPP rate 24: per width tile, tap columns in the padding skipped
    (16, 16, 13, 4, 2, (4, 3, 4, 5)),  # strided, asymmetric, a last tile cut short
])
def test_taps_that_read_only_padding(runner, c, o, hw, dilation, stride, pad):
    from kiln.topi.x86.conv2d_nchwc import live_taps

    a, wt = runner.rand(1, c, hw, hw), runner.rand(o, c, 3, 3)
    A = te.placeholder((1, c // 16, hw, hw, 16), name="data")
    W = te.placeholder(wt.shape, name="kernel")
    out = topi.x86.conv2d_NCHWc(A, W, stride, pad, dilation, "float32", out_channels=o)
    bn = int(out.shape[4])
    got = runner.run(topi.x86.schedule_conv2d_NCHWc, out, [A, W], [to_blocked(a, 16), wt])
    ref = testing.conv2d_nchw_python(a, wt, stride, pad, dilation=dilation)
    np.testing.assert_allclose(got, to_blocked(ref, bn), rtol=1e-4, atol=1e-4)
    if hw == 9 and dilation == 12:
        p = conv2d_shape("t", (1, c, hw, hw), (o, c, 3, 3), stride, pad, dilation, 1)
        assert live_taps(p) == ((1, 1), (1, 1))
