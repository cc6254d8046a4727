"""Tasks from a relay program map to kiln.topi's tunable x86 ops; tuned knobs reach topi."""

import time

import pytest

import kiln as tvm
from kiln import autotvm
from kiln.autotvm import record
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.target.cpu_facts import why_host_cannot_run

relay = pytest.importorskip("kiln.relay")

# The blocked layouts follow the target's vector width (8 float lanes on AVX2, 16 on AVX-512),
# so the layout tests name their CPU instead of taking the host's.
BLOCKED_CPUS = {"llvm -mcpu=haswell": 8, "llvm -mcpu=skylake-avx512": 16}


def _net():
    x = relay.var("data", shape=(1, 16, 14, 14), dtype="float32")
    y = relay.nn.conv2d(x, relay.var("w1", shape=(32, 16, 3, 3)), padding=(1, 1))
    y = relay.nn.conv2d(relay.nn.relu(y), relay.var("w2", shape=(32, 32, 3, 3)), padding=(1, 1))
    y = relay.nn.conv2d(relay.nn.relu(y), relay.var("w3", shape=(32, 32, 3, 3)), padding=(1, 1))
    z = relay.nn.dense(relay.nn.batch_flatten(y), relay.var("fc", shape=(10, 32 * 14 * 14)))
    return tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(z), z))


def test_extract_from_program_dedups_by_workload():
    mod = _net()
    tasks = autotvm.task.extract_from_program(mod["main"], target="llvm", params={},
                                              ops=(relay.op.get("nn.conv2d"),))
    assert sorted(t.name for t in tasks) == ["conv2d_nchw.x86", "conv2d_nchw.x86"]
    shapes = sorted(t.args[0][1] for t in tasks)
    assert shapes == [(1, 16, 14, 14), (1, 32, 14, 14)]
    both = autotvm.task.extract_from_program(mod["main"], target="llvm", params={})
    assert {t.name for t in both} == {"conv2d_nchw.x86", "dense_nopack.x86"}


def test_tuned_knobs_reach_the_topi_compute(tmp_path):
    from kiln.autotvm.templates import topi_conv2d_nchw
    from kiln.autotvm.templates.topi_cpu import X86
    schedule_conv2d_nchw = X86["schedule_conv2d_nchw"]
    from kiln import te

    task = autotvm.task.extract_from_program(_net()["main"], target="llvm", params={},
                                             ops=(relay.op.get("nn.conv2d"),))[0]
    space = task.config_space
    # 3x3 stride-1 convs on blocked data are Winograd on x86: oc_bn and tile_p
    pick = next(i for i in range(len(space)) if space.get(i)["oc_bn"].val == 16
                and space.get(i)["tile_p"].val == 2)
    log = str(tmp_path / "conv.log")
    record.save_to_file(log, [(MeasureInput(task.target, task, space.get(pick)),
                               MeasureResult((1e-4,), 0, 0.1, time.time()))])
    (_, dshape, _), (_, kshape, _) = task.args[0], task.args[1]
    data, kernel = te.placeholder(dshape, name="data"), te.placeholder(kshape, name="w")

    def conf():
        out = topi_conv2d_nchw(data, kernel, *task.args[2:])
        s = schedule_conv2d_nchw([out])
        # x86 measures the blocked kernel relay deploys, on inputs of its own layout
        args = [*out.op.attrs.get("template_inputs", (data, kernel)), out]
        text = str(tvm.lower(s, args))
        f = tvm.build(s, args, target="llvm")
        return text, f
    with tvm.target.Target("llvm"):
        untuned, _ = conf()
        with autotvm.apply_history_best(log):
            tuned, f = conf()
    assert tuned != untuned
    assert f is not None


def _lowered(task, config) -> str:
    s, args = task.instantiate(config)
    return str(tvm.lower(s, args, simple_mode=True))


# CPU classes whose defaults differ (vector width, registers); only lowered, so any host runs them.
CPUS = ["llvm", "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v2", "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell",
        "llvm -mtriple=x86_64-linux-gnu -mcpu=znver3", "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512",
        "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4 -mattr=-avx512f"]


@pytest.mark.parametrize("target", CPUS)
def test_each_templates_declared_default_is_the_untuned_kernel(target):
    # The tuner measures the declared default first; that only guarantees "never slower than
    # untuned" if the default config builds exactly the kernel an untuned build emits.
    x = relay.var("data", shape=(1, 32, 28, 28), dtype="float32")
    y = relay.nn.conv2d(x, relay.var("w", shape=(64, 32, 3, 3)), padding=(1, 1))
    y = relay.nn.conv2d(y, relay.var("dw", shape=(64, 1, 3, 3)), padding=(1, 1), groups=64)
    z = relay.nn.dense(relay.nn.batch_flatten(y), relay.var("fc", shape=(10, 64 * 28 * 28)))
    q = relay.nn.batch_matmul(relay.var("a", shape=(2, 32, 48)), relay.var("b", shape=(2, 64, 48)))
    out = relay.Tuple([z, q])
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(out), out))
    tasks = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    assert {t.name for t in tasks} == {"conv2d_nchw.x86", "depthwise_conv2d_nchw.x86",
                                       "dense_nopack.x86", "batch_matmul.x86"}
    for task in tasks:
        space = task.config_space
        idx = space.default_index()
        assert idx is not None, task.name
        assert _lowered(task, space.get(idx)) == _lowered(task, autotvm.FallbackConfigEntity()), task.name
        other = next(i for i in range(len(space)) if i != idx)
        assert _lowered(task, space.get(other)) != _lowered(task, space.get(idx)), task.name


@pytest.mark.parametrize("target", BLOCKED_CPUS)
def test_conv2d_template_measures_the_blocked_kernel_relay_deploys(target):
    # AlterOpLayout runs x86 conv2d on NCHW{b}c data with pre-packed weights; the template
    # measures that kernel, and its output block (oc_bn) is a layout knob.
    ib = BLOCKED_CPUS[target]  # the input block: one vector of float32
    x = relay.var("data", shape=(1, 32, 14, 14), dtype="float32")
    y = relay.nn.conv2d(x, relay.var("w", shape=(64, 32, 3, 3)), strides=(2, 2), padding=(1, 1))
    z = relay.nn.conv2d(x, relay.var("w3", shape=(64, 32, 3, 3)), padding=(1, 1))  # 3x3/1: Winograd
    out = relay.Tuple([y, z])
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(out), out))
    direct, wino = sorted(autotvm.task.extract_from_program(mod["main"], target=target, params={}),
                          key=lambda t: t.args[2] != (2, 2))
    space = direct.config_space
    assert space.layout_knobs == ("oc_bn",) and "vectorize_out" not in space.knobs
    blocks = sorted({c["oc_bn"].val for c in space})
    # AVX2's 16 registers: one block, tiles over several blocks instead (conv2d_nchwc.config_space)
    assert len(blocks) >= 3 if ib == 16 else blocks == [16], blocks
    for bn in blocks:
        cfg = next(c for c in space if c["oc_bn"].val == bn)
        _, args = direct.instantiate(cfg)
        shapes = [tuple(int(d) for d in a.shape) for a in args]
        assert shapes == [(1, 32 // ib, 14, 14, ib), (64 // bn, 32 // ib, 3, 3, ib, bn), (1, 64 // bn, 7, 7, bn)]
    space = wino.config_space
    # full-width AVX-512 (skylake-avx512) adds the task order and the weight prefetch (issue 35)
    extra = {"rows_outer", "prefetch"} if ib == 16 else set()
    assert set(space.knobs) == {"oc_bn", "tile_p"} | extra and space.layout_knobs == ("oc_bn",)
    cfg = next(c for c in space if c["oc_bn"].val == 32)
    _, args = wino.instantiate(cfg)
    # blocked data, the transformed kernel (K/bn, 16 frequencies, C/ib, ib, bn), blocked output
    assert [tuple(int(d) for d in a.shape) for a in args] == [(1, 32 // ib, 14, 14, ib), (2, 16, 32 // ib, ib, 32),
                                                              (1, 2, 14, 14, 32)]


@pytest.mark.parametrize("target", BLOCKED_CPUS)
def test_check_correctness_compares_each_layout_with_its_untuned_kernel(target):
    if why := why_host_cannot_run(target):
        pytest.skip(f"{target}: {why} (its layouts are checked by the compile-only test above)")
    from kiln.autotvm.measure.measure import create_measure_batch
    from kiln.autotvm.measure.reference import Reference

    # A strided conv and a Winograd one: with 16 vector registers (AVX2) the direct template
    # keeps one output block (it tunes multi-block tiles instead), so take the task whose
    # layout knob offers at least three blocks.
    x = relay.var("data", shape=(1, 16, 8, 8), dtype="float32")
    y = relay.nn.conv2d(x, relay.var("w", shape=(32, 16, 3, 3)), strides=(2, 2), padding=(1, 1))
    z = relay.nn.conv2d(x, relay.var("w3", shape=(64, 16, 3, 3)), padding=(1, 1))
    out = relay.Tuple([y, z])
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(out), out))
    tasks = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    task = next(t for t in tasks if len({c["oc_bn"].val for c in t.config_space}) >= 3)
    space = task.config_space
    default_bn = space.get(space.default_index())["oc_bn"].val
    bns = [default_bn] + [b for b in sorted({c["oc_bn"].val for c in space}) if b != default_bn][:2]
    picks = [next(c for c in space if c["oc_bn"].val == bn) for bn in bns]
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2),
        runner=autotvm.LocalRunner(number=1, repeat=1, check_correctness=True, cooldown_interval=0))
    batch = create_measure_batch(task, option)
    try:
        results = batch([MeasureInput(task.target, task, c) for c in picks])
    finally:
        batch.close()
    assert [r.error_no for r in results] == [0, 0, 0], results
    ref = Reference(task)
    try:
        variants = [ref.for_config(c) for c in picks]
        assert len({id(v) for v in variants}) == 3  # one untuned kernel per output block
        assert [v.arg_info[-1][0][-1] for v in variants] == bns
        assert ref in variants  # the default layout is the plain reference itself
    finally:
        ref.close()
