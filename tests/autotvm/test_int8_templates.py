"""AutoTVM templates of the CPU int8 kernels (autotvm/templates/int8_cpu.py): every task's
declared default is the untuned kernel, across CPU models. The mixed int8 conv's
(conv2d_int8_mixed.x86: x86 without VNNI, each output block's units on vpmaddubsw and vpmaddwd,
read at offsets from a table): extracted from a relay program, its untuned tile the declared
default, its offset table given to the runners (fill values would time loads of the first bytes),
tuned through a local RPC server and built from the log with the same bytes as the untuned build
and numpy's reference."""

from __future__ import annotations

import functools
import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, relay
from kiln.contrib import graph_executor
from kiln.target.cpu_facts import why_host_cannot_run
from kiln.topi import int8_pack
from kiln.topi.x86.conv2d_int8 import mixed_table, register_tile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "relay", "qnn"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "topi"))
from qnn_run import reference  # noqa: E402
from test_int8_x86 import mixed_graph  # noqa: E402

import rpc_services  # noqa: E402  (tests/rpc, on the path from conftest.py)

# a 3x3 stride-2 conv (stride 1 goes to the Winograd tier), 32 -> 16 channels, 11x11: 2 output
# blocks of 8 lanes, 72 units each, a 6-pixel output row
SHAPE = dict(ic=32, oc=16, hw=11, k=3, stride=2, zx=37, rounding="UPWARD")


@functools.lru_cache(maxsize=None)
def _mixed_task(target):
    rng = np.random.default_rng(5)
    mod, inputs, w = mixed_graph(rng, **SHAPE)
    tasks = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    assert [t.name for t in tasks] == ["conv2d_int8_mixed.x86"], [t.name for t in tasks]
    return mod, inputs, w, tasks[0]


@pytest.mark.parametrize("mcpu", ["haswell", "znver3"])
def test_mixed_conv_task_default_is_the_untuned_tile_and_its_table_is_in_bounds(mcpu):
    _, _, w, task = _mixed_task(f"llvm -mcpu={mcpu}")
    data, weight, _, table = (a[1] for a in task.args[:4])
    ow = (SHAPE["hw"] + 2 * (SHAPE["k"] // 2) - SHAPE["k"]) // SHAPE["stride"] + 1
    space = task.config_space
    default = space.get(space.default_index())
    assert (default["tile_ow"].val, default["oc_chunks"].val) == register_tile(ow, weight[0], "pmaddwd", weight[2])
    assert sorted(e.val for e in space.space_map["tile_ow"].entities) == [1, 2, 3, 6]
    # the runners' table: per output block the same units (and offsets) as the weights' own table,
    # in the reduction's order; every offset inside the padded u8 / int16 data
    fixed = task.input_values()
    assert list(fixed) == [3] and fixed[3].shape == table and fixed[3].dtype == np.int32
    parts = int8_pack.plan_mixed_conv_weight(w, data[-1], weight[2])
    real = mixed_table(parts[2], data, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
    for block in range(table[0]):
        assert sorted(map(tuple, fixed[3][block])) == sorted(map(tuple, real[block]))
    n, cc, h, wd, ib = data
    padded = cc * (h + 2) * (wd + 2) * ib
    assert 0 <= fixed[3][..., 4:].min() and fixed[3][..., 4:].max() + 4 <= padded


@pytest.fixture
def fleet():
    tracker = rpc_services.tracker()
    server = rpc_services.server("--tracker", f"127.0.0.1:{tracker.port}", "--key", "int8-mixed")
    yield tracker
    server.stop()
    tracker.stop()


def _run(lib, inputs):
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return m.get_output(0).numpy()


def test_mixed_conv_tuned_through_rpc_builds_the_same_bytes(tmp_path, fleet, monkeypatch):
    from kiln.autotvm import record
    from kiln.autotvm.tuner import GridSearchTuner
    from kiln.rpc.session import RemoteNDArray

    sent = []  # what the runner copies into the server's arrays (the fill kernels make the rest)
    copyfrom = RemoteNDArray.copyfrom

    def spy(self, src):
        sent.append(np.array(src))
        return copyfrom(self, src)
    monkeypatch.setattr(RemoteNDArray, "copyfrom", spy)

    target = "llvm -mcpu=haswell"
    if why_host_cannot_run(target):
        pytest.skip(f"{target}: {why_host_cannot_run(target)}")
    mod, inputs, _, task = _mixed_task(target)
    space = task.config_space
    log = str(tmp_path / "mixed.log")
    runner = autotvm.RPCRunner("int8-mixed", "127.0.0.1", fleet.port, number=2, repeat=1, timeout=60,
                               n_parallel=1, cooldown_interval=0, check_correctness=True)
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2, timeout=60), runner=runner)
    GridSearchTuner(task).tune(n_trial=2, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    rows = list(record.load_from_file(log))
    # every candidate ran and matched the untuned kernel on the same inputs (check_correctness)
    assert len(rows) == 2 and all(r.error_no == 0 for _, r in rows), rows
    # each of the 2 candidates and the untuned reference read the task's table, not fill values
    table = task.input_values()[3]
    assert len(sent) == 3 and all(np.array_equal(t, table) for t in sent), [t.shape for t in sent]
    tried = {(inp.config["tile_ow"].val, inp.config["oc_chunks"].val): (inp, r) for inp, r in rows}
    default = space.get(space.default_index())
    assert (default["tile_ow"].val, default["oc_chunks"].val) in tried  # the untuned tile measured first
    # a log of the other tiles only, so the tuned build cannot be the untuned one
    others = str(tmp_path / "others.log")
    with open(others, "w") as f:
        for key, (inp, r) in tried.items():
            if key != (default["tile_ow"].val, default["oc_chunks"].val):
                f.write(record.encode(inp, r) + "\n")
    with tvm.transform.PassContext(opt_level=3):
        untuned = relay.build(mod, target=target)
        with autotvm.apply_history_best(others):
            tuned = relay.build(mod, target=target)
    assert tuned.get_lib().get_source("asm") != untuned.get_lib().get_source("asm")  # the log's tile
    want = reference(mod, inputs)[0]
    np.testing.assert_array_equal(_run(untuned, inputs), want)
    np.testing.assert_array_equal(_run(tuned, inputs), want)


def test_int16_winograd_conv_is_a_one_config_task():
    """A 3x3 stride-1 int8 conv without VNNI runs the int16 Winograd kernel (tier wino16): its
    conv2d_int8 task has one config and the template schedules it with the Winograd schedule
    (extraction of such a program failed: the direct conv's schedule found no conv stage)."""
    rng = np.random.default_rng(5)
    mod, _, _ = mixed_graph(rng, **dict(SHAPE, stride=1))
    tasks = autotvm.task.extract_from_program(mod["main"], target="llvm -mcpu=haswell", params={})
    assert [t.name for t in tasks] == ["conv2d_int8.x86"] and ("tier", "wino16") in tasks[0].args
    assert len(tasks[0].config_space) == 1


def test_local_runner_passes_the_table_as_is(tmp_path):
    """LocalRunner's timing function (run here, in this process) gives the kernel the task's
    table and fill values for the other arguments."""
    from kiln.autotvm.measure.fill import fill_values
    from kiln.autotvm.measure.local_runner import time_candidate

    target = "llvm -mcpu=haswell"
    if why_host_cannot_run(target):
        pytest.skip(f"{target}: {why_host_cannot_run(target)}")
    _, _, _, task = _mixed_task(target)
    space = task.config_space
    s, args = task.instantiate(space.get(space.default_index()))
    path = str(tmp_path / "mixed.so")
    tvm.build(s, args, target=task.target).export_library(path)
    arg_info = [(tuple(int(d) for d in a.shape), str(a.dtype), i == len(args) - 1) for i, a in enumerate(args)]
    opts = {"number": 1, "repeat": 1, "min_repeat_ms": 0, "cooldown": 0, "flush": False, "device_type": 1,
            "inputs": task.input_values()}
    state = {}
    costs, outputs = time_candidate(state, (path, arg_info, opts, True))
    arrays = [a.numpy() for a in state["arrays"]]
    np.testing.assert_array_equal(arrays[3], task.input_values()[3])
    np.testing.assert_array_equal(arrays[1], fill_values(arg_info[1][0], arg_info[1][1], seed=1))
    assert len(costs) == 1 and outputs[0].shape == arg_info[-1][0]


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512", "llvm -mcpu=cascadelake",
                                    "llvm -mcpu=alderlake", "llvm -mcpu=sapphirerapids",
                                    "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod",
                                    "llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a9 -mattr=+neon"])
def test_every_int8_task_declares_the_untuned_kernel_its_default(target):
    """Each int8 task of small graphs (3x3 conv + dense, 1x1 conv -> depthwise -> dense, a mixed
    3x3 stride-2 conv, a 64-channel conv for AMX) lowers under its space's default config to the
    same TIR as under the fallback (what relay.build deploys untuned): tuning starts from it."""
    from kiln.autotvm.space import FallbackConfigEntity
    from test_int8_x86 import conv_graph, tflite_gemm_graph

    rng = np.random.default_rng(0)
    graphs = [conv_graph(rng, ic=16, oc=32, hw=9)[0], conv_graph(rng, ic=64, oc=32, hw=8)[0],
              tflite_gemm_graph(rng)[0], mixed_graph(rng, **SHAPE)[0]]
    seen = set()
    for mod in graphs:
        for task in autotvm.task.extract_from_program(mod["main"], target=target, params={}):
            space = task.config_space
            if len(space) == 1:  # AMX, int16 Winograd: the one config is the default (extraction made it)
                continue
            tirs = []
            for cfg in (space.get(space.default_index()), FallbackConfigEntity()):
                s, args = task.instantiate(cfg)
                with task.target:
                    tirs.append(str(tvm.lower(s, args, simple_mode=True)))
            assert tirs[0] == tirs[1], (task.name, space.get(space.default_index()))
            seen.add((task.name, dict(a for a in task.args if isinstance(a, tuple) and len(a) == 2).get("tier")))
    assert len(seen) >= 3, seen  # convs, dense and depthwise (and the tiers of this CPU)
