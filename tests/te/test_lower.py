"""What tvm.lower prints: readable loops, no guards in the main body of split tails."""

import kiln as tvm
from kiln import te


def test_lower_prints_loops_and_store():
    n = tvm.convert(1024)
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    text = str(tvm.lower(s, [A, B], simple_mode=True))
    assert "for i in T.serial(1024):" in text
    assert "B[i] = A[i] + T.float32(1.0)" in text


def test_split_tail_is_partitioned_and_main_body_vectorized():
    A = te.placeholder((100,), name="A")
    B = te.compute((100,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(xi)
    text = str(tvm.lower(s, [A, B]))
    main, tail = text.split("for i_inner")
    assert "for i_outer in T.serial(6):" in main
    assert "B[T.Ramp(i_outer * 16, 1, 16)] = A[T.Ramp(i_outer * 16, 1, 16)]" in main
    # The 4-element tail runs exactly its elements: no per-element bounds check anywhere.
    assert "in T.serial(4):" in tail and "likely" not in text


def test_split_fuse_index_math_simplifies():
    A = te.placeholder((32, 32), name="A")
    B = te.compute((32, 32), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    fused = s[B].fuse(*B.op.axis)
    o, i = s[B].split(fused, factor=32)
    text = str(tvm.lower(s, [A, B]))
    # (o*32 + i) // 32 and % 32 fold back to o and i
    assert "B[o" not in text or "//" not in text
    assert "//" not in text and "%" not in text


def test_a_stage_at_a_tile_of_fused_rows_produces_only_the_tile():
    # B walks a 7x7 image as one run of 49 pixels in tiles of 3; A, computed per tile, is read
    # at y * 7 + x. Each root axis alone spans whole rows, the index they make spans the tile.
    import numpy as np

    A0 = te.placeholder((49,), name="A0")
    A = te.compute((49,), lambda p: A0[p] * 2.0, name="A")
    B = te.compute((7, 7), lambda y, x: A[y * 7 + x] + 1.0, name="B")
    s = te.create_schedule(B.op)
    tile, _ = s[B].split(s[B].fuse(*B.op.axis), factor=3)
    s[A].compute_at(s[B], tile)
    text = str(tvm.lower(s, [A0, B], simple_mode=True))
    assert "T.allocate([3]" in text and "//" not in text and "%" not in text
    f = tvm.build(s, [A0, B], target="llvm")
    a = np.random.default_rng(0).random(49).astype("float32")
    b = tvm.nd.empty((7, 7), "float32")
    f(tvm.nd.array(a), b)
    np.testing.assert_allclose(b.numpy().ravel(), a * 2 + 1, rtol=1e-6)
