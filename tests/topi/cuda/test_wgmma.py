"""Hopper's warpgroup tensor cores (wgmma), mbarriers and bulk copies (sm_90a): dense_wgmma compiles to
PTX with wgmma and assembles to an sm_90a cubin wherever NVRTC is installed (no GPU needed);
other archs are refused with a one-line error; the gpu-marked test runs it against numpy."""

from __future__ import annotations

import base64

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.codegen import cuda as cg
from kiln.codegen.cuda_wgmma import MBARRIER
from kiln.errors import CompileError
from kiln.topi.cuda import wgmma

pytestmark = pytest.mark.skipif(not cg.have_nvrtc(),
                                reason="needs NVRTC: pip install -e '.[cuda]' (cuda-bindings, nvidia-cuda-nvrtc)")

TARGET = "cuda -arch=sm_90a -max_shared_memory_per_block=232448"


def build(m, n, k, conf=None, target=TARGET):
    a = te.placeholder((m, k), "float16", name="A")
    w = te.placeholder((n, k), "float16", name="W")
    with tvm.target.Target(target):
        c = wgmma.dense_wgmma(a, w, conf)
        s = wgmma.schedule_dense_wgmma([c])
        return tvm.build(s, [a, w, c], target=target, name="dense_wgmma")


@pytest.mark.parametrize("conf", [None, {"warpgroups": 1, "n": 64, "bk": 32, "stages": 2}, {"copy_order": "rows"}],
                         ids=["default", "small", "rows"])
def test_dense_compiles_to_wgmma_and_assembles(conf):
    f = build(256, 256, 256, conf)
    code = f.metadata["device_code"]
    ptx, n = code["ptx"], {**wgmma.DEFAULT, **(conf or {})}["n"]
    assert code["arch"] == "sm_90a" and ".target sm_90a" in ptx
    assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16" in ptx
    for op in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned",
               "fence.proxy.async.shared::cta", "cp.async.cg.shared.global"):
        assert op in ptx, op
    assert base64.b64decode(code["cubin"])[:4] == b"\x7fELF"  # ptxas (inside NVRTC) accepted it for sm_90a


def test_bulk_tensor_copies_feed_swizzled_tiles_and_assemble():
    """copy "tma": one thread copies each slab with cp.async.bulk.tensor (completing on the slot's
    mbarrier), wgmma reads the 128-byte swizzled tiles (descriptor layout 1), the slabs are
    1024-byte aligned in dynamic shared memory, and the kernel entry tells the runtime how to
    encode the two tensor maps it takes after its buffers."""
    m, n, k = 256, 512, 512
    f = build(m, n, k, {"n": 256, "copy": "tma"})
    code = f.metadata["device_code"]
    ptx = code["ptx"]
    for op in ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
               "mbarrier.init.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64",
               "mbarrier.try_wait.parity.shared::cta.b64", "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"):
        assert op in ptx, op
    assert "cp.async.cg" not in ptx and "cp.async.commit_group" not in ptx
    assert base64.b64decode(code["cubin"])[:4] == b"\x7fELF"
    (entry,) = code["kernels"]
    assert entry["tensor_maps"] == [
        {"param": 0, "elem_bytes": 2, "dims": [k, m], "row_bytes": 2 * k, "box": [64, 128], "swizzle": 128},
        {"param": 1, "elem_bytes": 2, "dims": [k, n], "row_bytes": 2 * k, "box": [64, 256], "swizzle": 128}]
    # 4 slots of a 128 x 64 A slab and a 256 x 64 W slab, the barriers, and the 1024 bytes of alignment slack
    assert entry["shared_bytes"] == 4 * (128 + 256) * 64 * 2 + 1024 + 1024
    src = [mod for mod in f.imported_modules if mod.type_key == "cuda"][0].get_source()
    assert "kiln_tma_arrive(kiln_tma_bar, ((rk_outer + 2) % 4), 49152)" in src  # 2 ahead: wgmma lags 1
    assert "kiln_wgmma_desc(a + 16 * k, 16, 1024, 1)" in src
    with pytest.raises(ValueError, match="bk=32"):
        build(m, n, k, {"copy": "tma", "bk": 32})
    with pytest.raises(ValueError, match="K at least 128 and stages at least 2; got K=64"):
        build(m, n, 64, {"copy": "tma"})


def test_products_overlap_the_next_tile_where_the_pipeline_has_slots():
    """4 stages: each step leaves its wgmma group running (wait_group 1) and the tiles are fetched
    two steps ahead (cp.async.wait_group 1), so a slot is refilled only after the products that
    read it were waited for; 2 stages: every group is waited for at once."""
    src = [m for m in build(256, 256, 512).imported_modules if m.type_key == "cuda"][0].get_source()
    assert 'wgmma.wait_group.sync.aligned 1;' in src and 'cp.async.wait_group 1;' in src
    assert src.count("cp.async.commit_group") == 3  # two tiles in the prologue, one per step
    src = [m for m in build(128, 64, 128, {"warpgroups": 1, "n": 64, "bk": 32, "stages": 2}).imported_modules
           if m.type_key == "cuda"][0].get_source()
    assert 'wgmma.wait_group.sync.aligned 1;' not in src and 'wgmma.wait_group.sync.aligned 0;' in src


def test_wgmma_needs_sm_90a():
    with pytest.raises(CompileError, match="need Hopper's own instructions: build with -arch=sm_90a"):
        build(128, 128, 64, target="cuda -arch=sm_90 -max_shared_memory_per_block=232448")


def test_sizes_are_checked():
    a = te.placeholder((100, 64), "float16")
    w = te.placeholder((128, 64), "float16")
    with pytest.raises(ValueError, match="M a multiple of 128"):
        wgmma.dense_wgmma(a, w)
    with pytest.raises(ValueError, match="kc=3"):
        wgmma.intrin_wgmma_gemm(64, 3)


def test_compute_equals_numpy_on_the_cpu():
    """The product over the core-matrix views (A_il[c, i, e] = A[i, 8c + e]), untensorized, on the host."""
    a = te.placeholder((128, 64), "float16", name="A")
    w = te.placeholder((128, 64), "float16", name="W")
    c = wgmma.dense_wgmma(a, w)
    f = tvm.build(te.create_schedule(c.op), [a, w, c], target="llvm")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((128, 64)).astype("float16"), rng.standard_normal((128, 64)).astype("float16")
    out = tvm.nd.empty((128, 128), "float32")
    f(tvm.nd.array(x), tvm.nd.array(y), out)
    np.testing.assert_allclose(out.numpy(), x.astype("float64") @ y.astype("float64").T, atol=1e-3, rtol=0)


def test_mbarrier_and_bulk_copy_helpers_assemble():
    """The copy engine's bulk copy completing on an mbarrier, as kiln_mbarrier_* / kiln_bulk_copy
    print them, in a kernel NVRTC assembles for sm_90a."""
    src = cg.PREAMBLE + MBARRIER + r"""
extern "C" __global__ void __launch_bounds__(128) bulk(const half* __restrict__ x, half* __restrict__ y) {
  __shared__ __align__(128) half tile[1024];
  __shared__ __align__(8) unsigned long long bar;
  if (threadIdx.x == 0) {
    kiln_mbarrier_init(&bar, 1);
    kiln_mbarrier_expect_tx(&bar, 2048);
    kiln_bulk_copy(tile, x + blockIdx.x * 1024, 2048, &bar);
  }
  __syncthreads();
  kiln_mbarrier_wait(&bar, 0);
  for (int i = threadIdx.x; i < 1024; i += 128) y[blockIdx.x * 1024 + i] = tile[i];
}
"""
    ptx = cg.compile_source(src, "sm_90a", "ptx").decode(errors="replace")
    for op in ("mbarrier.init.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64",
               "mbarrier.try_wait.parity.shared::cta.b64",
               "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"):
        assert op in ptx, op
    assert cg.compile_source(src, "sm_90a", "cubin")[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("conf", [None, {"warpgroups": 1, "n": 64, "bk": 32, "stages": 2},
                                  {"n": 256, "copy": "tma"}, {"warpgroups": 1, "n": 64, "stages": 2, "copy": "tma"}],
                         ids=["default", "small", "tma", "tma-small"])
def test_dense_runs(conf):
    dev = tvm.cuda(0)
    if dev.compute_version != "9.0":
        pytest.skip(f"wgmma runs on compute capability 9.0 (sm_90a) only; this GPU is {dev.compute_version}")
    m, n, k = 256, 512, 320 if conf else 256
    if conf and conf.get("copy") == "tma":
        m, k = 384, 640  # 10 k steps: slots reused and barrier phases flipped more than once
    f = build(m, n, k, conf)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((m, k)).astype("float16"), rng.standard_normal((n, k)).astype("float16")
    out = tvm.nd.array(np.full((m, n), np.nan, "float32"), dev)
    f(tvm.nd.array(x, dev), tvm.nd.array(y, dev), out)
    want = x.astype("float64") @ y.astype("float64").T
    # float32 sums of exact float16 products: k roundings, each at most 2^-24 of a partial sum
    bound = k * 2 ** -24 * (np.abs(x).astype("float64") @ np.abs(y).astype("float64").T).max()
    np.testing.assert_allclose(out.numpy(), want, atol=bound, rtol=0)


def test_strategy_picks_wgmma_blocks_for_the_target():
    """relay's float16 dense takes wgmma on sm_90a only, with the largest blocks that still make a
    wave of the GPU's 132 multiprocessors and 3+ stages within the target's shared memory."""
    cfg = wgmma.strategy_config
    with tvm.target.Target(TARGET + " -tag=nvidia/nvidia-h100"):
        assert cfg(4096, 4096, 4096) == {"warpgroups": 2, "n": 256, "copy": "tma", "bk": 64, "stages": 4}
        assert cfg(2048, 2048, 4096) == {"warpgroups": 2, "n": 128, "copy": "tma", "bk": 64, "stages": 6}
        assert cfg(4096, 4096, 192)["stages"] == 3  # no deeper than the k steps
        # 64 blocks of 128 x 128 are less than a wave; 512 of 64 x 64 more than half of one
        assert cfg(1024, 2048, 4096) == {"warpgroups": 1, "n": 64, "copy": "tma", "bk": 64, "stages": 8}
        assert cfg(128, 3072, 768)["n"] == 64  # BERT's FFN up: 96 blocks of 64 x 64
        # K of 16 k steps or fewer: from an eighth of a wave (BERT's 128 x 768: 24 blocks; GPT-2's
        # 64 x 2304: 36); longer reductions on so few blocks (FFN down, K = 3072) stay on wmma
        assert cfg(128, 768, 768)["n"] == cfg(64, 2304, 768)["n"] == 64
        assert cfg(128, 768, 3072) is None and cfg(64, 768, 3072) is None and cfg(64, 128, 768) is None
        assert cfg(4096, 4096, 4000) is None and cfg(4096, 4096, 64) is None  # K: 64s, two steps at least
    with tvm.target.Target("cuda -arch=sm_90a -max_shared_memory_per_block=131072 -tag=nvidia/nvidia-h100"):
        assert cfg(4096, 4096, 4096)["stages"] == 3  # 3 x 48 KiB slabs + 2 KiB
    for other in ("cuda -arch=sm_90 -max_shared_memory_per_block=232448", "cuda -arch=sm_90a",
                  "cuda -arch=sm_80 -max_shared_memory_per_block=232448"):
        with tvm.target.Target(other):
            assert cfg(4096, 4096, 4096) is None, other


def _relay_dense(m, n, k, seed=3):
    """dense + bias + relu in float32, made float16 as kiln's fp16 models are (float32 sums)."""
    from kiln import relay

    rng = np.random.default_rng(seed)
    w, b = rng.uniform(-1, 1, (n, k)).astype("float32"), rng.uniform(-1, 1, (n,)).astype("float32")
    x = relay.var("x", shape=(m, k), dtype="float32")
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, relay.const(w)), relay.const(b)))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    return relay.transform.ToMixedPrecision("float16", accumulation_dtype="float32")(mod), w, b


def test_relay_float16_dense_takes_wgmma_on_sm_90a():
    from kiln import relay

    mod, _, _ = _relay_dense(1024, 4352, 256)  # 8 x 17 blocks of 128 x 256
    lib = relay.build(mod, target=tvm.target.Target(TARGET, host="llvm"))
    src = lib.get_lib().imported_modules[0].get_source()
    assert "wgmma.mma_async.sync.aligned.m64n256k16" in src and "cp.async.bulk.tensor.2d" in src
    # the cast / bias / relu in the product's kernel, from the staging tile
    assert "kiln_wgmma_store256_float_staging" in src and "cast_kernel1" not in src
    for target in ("cuda -arch=sm_90 -max_shared_memory_per_block=232448", "cuda -arch=sm_90a"):
        src = relay.build(mod, target=tvm.target.Target(target, host="llvm")).get_lib().imported_modules[0].get_source()
        assert "wgmma" not in src and "wmma" in src, target  # the mma.sync / wmma tensor cores


@pytest.mark.gpu
@pytest.mark.parametrize("epilogue", ["kernel", "fused"])
@pytest.mark.parametrize("m,n,k,block_n", [(1024, 4352, 256, 256), (1024, 2176, 384, 128), (128, 3072, 768, 64)],
                         ids=["128x256", "128x128", "64x64"])
def test_relay_float16_dense_on_wgmma_runs(epilogue, m, n, k, block_n, monkeypatch):
    """relay's float16 dense + bias + relu on an sm_90a GPU: the wgmma product (bulk tensor copies
    through the tensor maps the runtime encodes) and its epilogue (a kernel of its own, or from the
    shared staging tile over the slabs), against float64 numpy."""
    from kiln import relay
    from kiln.contrib import graph_executor

    monkeypatch.setattr(wgmma, "EPILOGUE", epilogue)

    dev = tvm.cuda(0)
    if dev.compute_version != "9.0":
        pytest.skip(f"wgmma runs on compute capability 9.0 (sm_90a) only; this GPU is {dev.compute_version}")
    mod, w, b = _relay_dense(m, n, k)
    lib = relay.build(mod, target=tvm.target.Target(TARGET, host="llvm"))
    # 8 x 17 blocks of 128 x 256 (4 stages), of 128 x 128 (6 stages: 6 k steps), or 2 x 48 of 64 x 64
    assert f"wgmma.mma_async.sync.aligned.m64n{block_n}k16" in lib.get_lib().imported_modules[0].get_source()
    x = np.random.default_rng(9).uniform(-1, 1, (m, k)).astype("float32")
    g = graph_executor.GraphModule(lib["default"](dev))
    g.set_input("x", x)
    g.run()
    xh, wh, bh = (v.astype("float16").astype("float64") for v in (x, w, b))
    want = np.maximum(xh @ wh.T + bh, 0)
    # the float32 product rounded to float16, the bias added in float16: two roundings of 2^-11
    # of at most the largest |x| |w| + |b|, and the float32 sums' k roundings of 2^-24
    scale = (np.abs(xh) @ np.abs(wh).T + np.abs(bh)).max()
    np.testing.assert_allclose(g.get_output(0).numpy(), want, atol=scale * (2 * 2 ** -11 + k * 2 ** -24), rtol=0)


def _with_epilogue(m, n, k, conf):
    """relu(product + bias) in float16, as relay's fused dense group computes it."""
    from kiln import topi

    a = te.placeholder((m, k), "float16", name="A")
    w = te.placeholder((n, k), "float16", name="W")
    bias = te.placeholder((n,), "float16", name="bias")
    with tvm.target.Target(TARGET):
        c = wgmma.dense_wgmma(a, w, conf)
        y = te.compute((m, n), lambda i, j: c[i, j].astype("float16") + bias[j], name="bias_add")
        y = topi.nn.relu(y)
        s = wgmma.schedule_dense_wgmma([y])
        return tvm.build(s, [a, w, bias, y], target=TARGET, name="dense_relu")


def test_fused_epilogue_stages_the_tile_over_the_slabs():
    """epilogue "fused": each warpgroup's tile goes to a shared staging tile laid over the slabs
    (after a block barrier: the other warpgroup's products still read them), the bias and relu
    are applied from there in the same kernel; the shared memory is the slabs' alone."""
    f = _with_epilogue(256, 512, 512, {"n": 256, "copy": "tma", "epilogue": "fused"})
    code = f.metadata["device_code"]
    (entry,) = code["kernels"]
    assert entry["shared_bytes"] == 4 * (128 + 256) * 64 * 2 + 1024 + 1024  # the 128 KiB tile lies over them
    src = [mod for mod in f.imported_modules if mod.type_key == "cuda"][0].get_source()
    assert "kiln_wgmma_store256_float_staging" in src and "__syncthreads();  // the other warpgroups'" in src
    assert base64.b64decode(code["cubin"])[:4] == b"\x7fELF"
    unfused = _with_epilogue(256, 512, 512, {"n": 256, "copy": "tma", "epilogue": "kernel"})
    assert len(unfused.metadata["device_code"]["kernels"]) == 2
