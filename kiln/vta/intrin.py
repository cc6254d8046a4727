"""The GEMM core as a tensor intrinsic, declared with the same ``te.decl_tensor_intrin`` the CPU
int8 kernels and the microcontroller kernels use.

The pattern is one block: out[BATCH, BLOCK_OUT] += inp[BATCH, BLOCK_IN] . wgt[BLOCK_OUT, BLOCK_IN]^T
in int32. Its statements are ``vta.gemm(mode, acc, inp, wgt)`` calls whose operands are
``buffer.access_ptr`` pointers (so virtual-thread injection can give each thread its own tiles;
mode 0 accumulate, 1 reset, 2 reset then accumulate) that kiln/vta/emit.py turns into micro-ops.
"""

from __future__ import annotations

import functools


def gemm_intrin(env):
    return _gemm(env.BATCH, env.BLOCK_IN, env.BLOCK_OUT, env.inp_dtype, env.wgt_dtype, env.acc_dtype,
                 env.inp_scope, env.wgt_scope, env.acc_scope)


@functools.lru_cache(maxsize=16)
def _gemm(batch, block_in, block_out, inp_dtype, wgt_dtype, acc_dtype, inp_scope, wgt_scope, acc_scope):
    from kiln import te, tir

    inp = te.placeholder((batch, block_in), inp_dtype, name="inp")
    wgt = te.placeholder((block_out, block_in), wgt_dtype, name="wgt")
    k = te.reduce_axis((0, block_in), name="k")
    out = te.compute((batch, block_out), lambda i, j: te.sum(inp[i, k].astype(acc_dtype) * wgt[j, k].astype(acc_dtype),
                                                             axis=k), name="out")
    binds = {t: tir.decl_buffer(t.shape, t.dtype, name=f"{t.name}_buf", offset_factor=int(t.shape[0].value * t.shape[1].value),
                                scope=scope)
             for t, scope in ((inp, inp_scope), (wgt, wgt_scope), (out, acc_scope))}

    def fintrin(ins, outs):
        def call(mode):
            return tir.Evaluate(tir.call_intrin("int32", "vta.gemm", mode, outs[0].access_ptr("rw"),
                                                ins[0].access_ptr("r"), ins[1].access_ptr("r")))
        return call(2), call(1), call(0)

    return te.decl_tensor_intrin(out.op, fintrin, name="vta_gemm", binds=binds)
