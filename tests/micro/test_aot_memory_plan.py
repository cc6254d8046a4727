"""The AOT arena's static memory plan (issue 36 item 3, kiln/relay/backend/aot_memory_plan.py):
offsets never put two simultaneously live tensors on the same bytes, and for MLPerf Tiny's DS-CNN
the arena is within 1.25x of the peak sum of live activations, both checked here from the graph
JSON without the planner's code; the firmware's arena symbol has the planned size."""

import json
import subprocess

import numpy as np
import pytest
from ds_cnn_model import ds_cnn
from kws_model import run_ort

from kiln import micro, relay
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu
from kiln.relay.backend import Executor
from kiln.relay.backend.aot_memory_plan import Live, plan_offsets


def _conflicts(tensors, offsets):
    bad = []
    for i, a in enumerate(tensors):
        for j in range(i):
            b = tensors[j]
            live_together = a.first <= b.last and b.first <= a.last
            share_bytes = offsets[i] < offsets[j] + b.size and offsets[j] < offsets[i] + a.size
            if live_together and share_bytes:
                bad.append((i, j))
    return bad


@pytest.mark.parametrize("seed", range(20))
def test_offsets_never_overlap_live_tensors(seed):
    rng = np.random.default_rng(seed)
    tensors = []
    for _ in range(int(rng.integers(1, 30))):
        first = int(rng.integers(0, 40))
        tensors.append(Live(first, first + int(rng.integers(0, 8)), int(rng.integers(1, 5000))))
    offsets, arena = plan_offsets(tensors, align=16)
    assert not _conflicts(tensors, offsets)
    assert all(o % 16 == 0 for o in offsets) and arena % 16 == 0
    assert arena >= max(o + t.size for o, t in zip(offsets, tensors))
    peak = max(sum(t.size for t in tensors if t.first <= n <= t.last) for n in range(48))
    assert arena >= peak


def test_a_chain_reuses_bytes():
    """x0 -> x1 -> x2 -> x3: each tensor lives from its producer to its consumer, so two slots do."""
    tensors = [Live(k, k + 1, 1000) for k in range(4)]
    offsets, arena = plan_offsets(tensors, align=16)
    assert arena == 2016 and sorted(set(offsets)) == [0, 1008] and not _conflicts(tensors, offsets)


def test_alternating_sizes_reach_the_peak():
    """DS-CNN's int8 chain: a conv's 8,000 B output, a 12,096 B padded copy, ... : neighbours must
    sit at opposite ends of the arena; largest-first fit alone needs 28,096 B, the search the peak."""
    sizes = [8000, 12096, 8000, 8000] * 4 + [8000]
    tensors = [Live(k, k + 1, n) for k, n in enumerate(sizes)]
    offsets, arena = plan_offsets(tensors, align=16)
    peak = max(sum(t.size for t in tensors if t.first <= n <= t.last) for n in range(len(sizes) + 1))
    assert not _conflicts(tensors, offsets) and arena == peak == 20096


def test_elementwise_kernels_write_over_their_dying_input(tmp_path):
    """Unfused elementwise kernels (opt_level 0: one kernel per op): each writes its output over its
    input, which dies there, so the chain needs one tensor's bytes, not two; the program still
    computes numpy's values (the host's cc, standalone AOT)."""
    import kiln as tvm
    x = relay.var("x", shape=(1, 4, 16, 16), dtype="float32")
    y = relay.nn.relu(relay.multiply(relay.exp(relay.add(x, relay.const(1.0))), relay.const(2.0)))
    y = relay.add(y, relay.sigmoid(y))  # y's last reader is this add: the sigmoid cannot take y's bytes
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    with tvm.transform.PassContext(opt_level=0):
        lib = relay.build(mod, target="c", executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    plan, size = lib.plan, 1 * 4 * 16 * 16 * 4
    peak, span, _ = _independent_peak(json.loads(lib.graph_json))
    assert peak == 2 * size and len(plan.inplace) == 3  # exp, multiply, relu over their inputs
    for e_out, e_in in plan.inplace.items():  # the input dies where the output is born, or shares a chain's bytes
        assert plan.offset[e_out] == plan.offset[e_in] and span[e_in][0] < span[e_out][0]
    assert plan.workspace_size == 2 * size  # y and sigmoid(y) live together; add..relu share one slot
    v = np.random.default_rng(0).standard_normal((1, 4, 16, 16)).astype("float32")
    project = micro.generate_project(micro.get_microtvm_template_projects("crt"), lib, tmp_path / "p",
                                     {"inputs": {"x": v}, "project_type": "aot_standalone_demo"})
    project.build()
    r = np.maximum(np.exp(v + 1) * 2, 0)
    np.testing.assert_allclose(project.run()["outputs"]["output"], r + 1 / (1 + np.exp(-r)), rtol=1e-5, atol=1e-6)

    x = relay.var("x", shape=(1, 1024), dtype="float32")  # a chain alone: one slot instead of two
    chain = relay.Function([x], relay.sigmoid(relay.tanh(relay.exp(relay.negative(x)))))
    with tvm.transform.PassContext(opt_level=0):
        lib = relay.build(tvm.IRModule.from_expr(chain), target="c",
                          executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    assert lib.plan.workspace_size == 4096 and _independent_peak(json.loads(lib.graph_json))[0] == 8192


def _independent_peak(graph: dict) -> tuple:
    """(peak bytes of intermediate tensors live at one kernel, their lifetimes) from graph JSON."""
    nodes, attrs = graph["nodes"], graph["attrs"]
    row = np.cumsum([0] + [int(n.get("attrs", {}).get("num_outputs", 1)) if n["op"] == "tvm_op" else 1
                           for n in nodes]).tolist()
    heads = {row[h[0]] + h[1] for h in graph["heads"]}
    size = {e: int(np.prod(s)) * np.dtype(d).itemsize for e, (s, d) in
            enumerate(zip(attrs["shape"][1], attrs["dltype"][1]))}
    span = {}
    for nid, n in enumerate(nodes):
        if n["op"] == "tvm_op":
            for e in range(row[nid], row[nid + 1]):
                span[e] = [nid, nid]
            for i, k, *_ in n["inputs"]:
                if row[i] + k in span:
                    span[row[i] + k][1] = nid
    span = {e: s for e, s in span.items() if e not in heads}
    peak = max(sum(size[e] for e, (a, b) in span.items() if a <= nid <= b) for nid in range(len(nodes)))
    return peak, span, size


def test_ds_cnn_arena_is_near_the_peak_and_is_the_firmware_bss(tmp_path):
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    model, inputs = ds_cnn()
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m4", params=params,
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    peak, span, size = _independent_peak(json.loads(lib.graph_json))
    plan = lib.plan
    assert set(plan.offset) == set(span)
    eids = sorted(span)
    placed = [Live(span[e][0], span[e][1], size[e]) for e in eids]
    assert not plan.inplace  # (DS-CNN has no unfused elementwise kernel)
    assert not _conflicts(placed, [plan.offset[e] for e in eids])
    assert peak <= plan.workspace_size <= 1.25 * peak, (plan.workspace_size, peak)
    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), lib,
                                     tmp_path / "fw", {"inputs": inputs})
    project.build()
    nm = subprocess.run(["arm-none-eabi-nm", "-S", project.elf], capture_output=True, text=True, check=True).stdout
    arena = [int(line.split()[1], 16) for line in nm.splitlines() if line.endswith(f"{plan.prefix}_workspace")]
    assert arena == [plan.workspace_size]
    got = project.run()["outputs"]["output"]
    np.testing.assert_allclose(got, run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)
