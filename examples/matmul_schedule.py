"""A hand-scheduled fp32 matmul: packing, register tiling, vectorize, unroll, parallel.

The same schedule bench/matmul.py measures; here it is built, printed and checked at 256³.
"""

import numpy as np

import kiln as tvm
from kiln import te


def matmul_schedule(M, N, K, mr=4, nr=64, kunroll=4, mblocks=16, dtype="float32"):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    # B packed into column panels of nr, so the inner loop reads it contiguously.
    packedB = te.compute((N // nr, K, nr), lambda jo, k, ji: B[k, jo * nr + ji], name="packedB")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * packedB[j // nr, k, j % nr], axis=k), name="C")

    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], mr, nr)
    # mblocks micro-tiles of rows share one panel of packedB while it is hot in L2.
    ioo, ioi = s[C].split(io, factor=mblocks)
    s[C].reorder(ioo, jo, ioi, ii, ji)
    s[CC].compute_at(s[C], ioi)
    xc, yc = s[CC].op.axis
    (kk,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kk, factor=kunroll)
    s[CC].reorder(ko, ki, xc, yc)
    s[CC].unroll(ki)
    s[CC].unroll(xc)
    s[CC].vectorize(yc)
    s[C].vectorize(ji)
    fused = s[C].fuse(ioo, jo)
    s[C].parallel(fused)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)
    return s, [A, B, C]


if __name__ == "__main__":
    s, args = matmul_schedule(256, 256, 256)
    lines = str(tvm.lower(s, args, name="matmul")).splitlines()
    print("\n".join(lines[:24]) + f"\n    ... ({len(lines) - 24} more lines of loop IR)")
    f = tvm.build(s, args, target="llvm", name="matmul")
    a = np.random.rand(256, 256).astype("float32")
    b = np.random.rand(256, 256).astype("float32")
    c = tvm.nd.empty((256, 256), "float32")
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)
    print("matmul 256³ matches numpy")
