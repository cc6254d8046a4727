"""AutoTVM templates of the tensor-core products (kiln/autotvm/templates/topi_cuda.py): their
knobs, relay's float16 dense task on CUDA, and configs building to wmma kernels (NVRTC, no GPU)."""

import pytest

import kiln as tvm
from kiln import autotvm, relay, te
from kiln.codegen import cuda as cg

needs_nvrtc = pytest.mark.skipif(not cg.have_nvrtc(), reason="needs NVRTC: pip install -e '.[cuda]'")
KNOBS = {"block_row_warps", "block_col_warps", "warp_row_tiles", "warp_col_tiles", "chunk", "offset", "vec",
         "double_buffer", "mma", "raster"}


def _task(name="dense_tensorcore.cuda"):
    import kiln.autotvm.templates  # noqa: F401 - registers the templates

    A = te.placeholder((128, 64), "float16", name="A")
    W = te.placeholder((96, 64), "float16", name="W")
    return autotvm.task.create(name, args=(A, W, "float32"), target=tvm.target.Target("cuda -arch=sm_80", host="llvm"))


def test_dense_tensorcore_space_and_default():
    task = _task()
    assert set(task.config_space.space_map) == KNOBS
    default = task.config_space.get(task.config_space.default_index())
    # N = 96 is 6 tiles: 2 warps of 1 (3 tiles per warp is not a knob value); K = 64: one 64-wide step
    assert default["block_col_warps"].val == 2 and default["warp_col_tiles"].val == 1 and default["chunk"].val == 4
    assert task.flop == 2.0 * 128 * 96 * 64


@needs_nvrtc
@pytest.mark.parametrize("knobs", [dict(block_row_warps=1, block_col_warps=2, warp_row_tiles=4, warp_col_tiles=1,
                                        chunk=4, offset=0, vec=4),
                                   dict(block_row_warps=4, block_col_warps=1, warp_row_tiles=2, warp_col_tiles=2,
                                        chunk=1, offset=8, vec=8)])
def test_configs_build_to_wmma(knobs):
    task = _task()
    space = task.config_space
    cfg = next(space.get(i) for i in range(len(space))
               if all(space.get(i)[k].val == v for k, v in knobs.items()))
    with tvm.target.Target("cuda -arch=sm_80"):
        s, args = task.instantiate(cfg)
    f = tvm.build(s, args, target=task.target)
    src = f.imported_modules[0].get_source()
    threads = 32 * knobs["block_row_warps"] * knobs["block_col_warps"]
    assert f"__launch_bounds__({threads})" in src and "kiln_wmma_mma_row_col_m16n16k16_f32_f32" in src


def test_relay_float16_dense_task_tunes_tensor_core_knobs():
    x = relay.var("x", shape=(32, 64), dtype="float16")
    w = relay.var("w", shape=(48, 64), dtype="float16")
    mod = tvm.IRModule.from_expr(relay.Function([x, w], relay.nn.dense(x, w)))
    target = tvm.target.Target("cuda", host="llvm")
    (task,) = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    assert task.name == "dense_nopack.gpu" and set(task.config_space.space_map) == KNOBS
