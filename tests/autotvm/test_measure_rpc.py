"""RPCRunner against real processes on 127.0.0.1: a tracker and servers under one key."""

import threading
import time

import pytest

from kiln import autotvm
from kiln.autotvm.measure import MeasureErrorNo, MeasureInput
from kiln.autotvm.measure.measure import create_measure_batch

import rpc_services


@pytest.fixture
def fleet():
    tracker = rpc_services.tracker()
    servers = []

    def add_server(key="autotvm-test"):
        svc = rpc_services.server("--tracker", f"127.0.0.1:{tracker.port}", "--key", key)
        servers.append(svc)
        return svc

    yield tracker, add_server, servers
    for s in servers:
        s.stop()
    tracker.stop()


def _wait_servers(tracker, n, key="autotvm-test"):
    from kiln import rpc
    def count():
        t = rpc.connect_tracker("127.0.0.1", tracker.port)
        try:
            return t.summary()["queue_info"].get(key, {}).get("free", 0) >= n
        finally:
            t.close()
    rpc_services.wait_until(count, timeout=15, what=f"{n} free servers")


def _measure(task, port, n_parallel, configs, **runner_kw):
    runner = autotvm.RPCRunner("autotvm-test", "127.0.0.1", port, number=1, repeat=1,
                               n_parallel=n_parallel, cooldown_interval=0, **runner_kw)
    batch = create_measure_batch(task, autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=2), runner=runner))
    try:
        inputs = [MeasureInput(task.target, task, c) for c in configs]
        built = batch.builder.build(inputs)
        start = time.monotonic()  # the runner's wall time: what more devices should cut
        results = batch.runner.run(inputs, built)
        return results, time.monotonic() - start
    finally:
        batch.close()


def test_two_servers_measure_in_parallel(fleet):
    tracker, add_server, _ = fleet
    add_server()
    add_server()
    _wait_servers(tracker, 2)
    # Each candidate sleeps 0.2 s per run (warm-up + timed run), so device time dominates the
    # per-candidate overhead (session, upload, fill), which halves with two servers too.
    task = autotvm.task.create("test/busy", (64, 200_000), "llvm")
    configs = [task.config_space.get(i) for i in range(8)]
    # Untimed: each server's first session pays one-off costs (imports, loader caches); in the
    # timed runs below only the 2-server run would pay them for its second server.
    _measure(task, tracker.port, None, [task.config_space.get(i) for i in range(8, 12)])
    results1, one = _measure(task, tracker.port, 1, configs)
    results2, two = _measure(task, tracker.port, None, configs)  # default: all servers of the key
    assert all(r.error_no == 0 for r in results1 + results2), results1 + results2
    assert all(abs(r.costs[0] - 0.2) < 0.05 for r in results1 + results2)
    print(f"8 candidates: 1 server {one:.2f} s, 2 servers {two:.2f} s")
    assert two < 0.65 * one, f"two servers took {two:.2f} s vs {one:.2f} s for one"


def test_rpc_crash_and_timeout_are_candidate_errors(fleet):
    tracker, add_server, _ = fleet
    add_server()
    _wait_servers(tracker, 1)
    task = autotvm.task.create("test/add", (1024, "faults"), "llvm")
    space = task.config_space
    pick = {space.get(i)["fault"].val: space.get(i) for i in range(len(space))
            if space.get(i)["tile"].size[-1] == 4}
    results, _ = _measure(task, tracker.port, 1, [pick["crash"], pick["hang"], pick["none"]],
                          timeout=3, check_correctness=True)
    kinds = [MeasureErrorNo(r.error_no) for r in results]
    assert kinds == [MeasureErrorNo.RUNTIME_DEVICE, MeasureErrorNo.RUN_TIMEOUT, MeasureErrorNo.NO_ERROR], results


def test_runner_waits_for_a_device_that_comes_back(fleet):
    tracker, add_server, servers = fleet
    first = add_server()
    _wait_servers(tracker, 1)
    task = autotvm.task.create("test/busy", (64, 100_000), "llvm")
    configs = [task.config_space.get(i) for i in range(4)]
    out = {}
    worker = threading.Thread(target=lambda: out.update(r=_measure(task, tracker.port, 1, configs)[0]))
    worker.start()
    time.sleep(1.0)
    first.stop()  # the device disappears mid-run ...
    time.sleep(1.0)
    add_server()  # ... and another of the same key registers
    worker.join(timeout=90)
    assert not worker.is_alive()
    assert [r.error_no for r in out["r"]] == [0, 0, 0, 0], out["r"]


def _resnet18_layout_task():
    """A ResNet-18 conv2d task (64->128 channels, 1x1, stride 2, at 32x32 pixels) whose oc_bn
    knob is a layout knob: each value gives the kernel's arguments other shapes."""
    relay = pytest.importorskip("kiln.relay")
    import kiln.relay.testing  # noqa: F401
    mod, params = relay.testing.resnet.get_workload(num_layers=18, batch_size=1, image_shape=(3, 32, 32))
    tasks = autotvm.task.extract_from_program(mod["main"], target="llvm", params=params,
                                              ops=(relay.op.get("nn.conv2d"),))
    task = next(t for t in tasks if t.args[0][1] == (1, 64, 8, 8) and t.args[1][1] == (128, 64, 1, 1))
    assert "oc_bn" in task.config_space.layout_knobs
    return task


def test_layout_knob_candidates_measure_through_the_fleet(fleet):
    """Document 004's setting (tracker, two servers under one key, XGBTuner) on a task whose
    candidates differ in argument shapes: the runner fills and checks each candidate in its own
    shapes, so (nearly) every candidate is measured; before, those of another oc_bn failed with
    "fill_1: argument 'fill1' has shape ..., expected ..."."""
    from kiln.autotvm.tuner import XGBTuner
    tracker, add_server, _ = fleet
    add_server()
    add_server()
    _wait_servers(tracker, 2)
    task = _resnet18_layout_task()
    seen = []
    runner = autotvm.RPCRunner("autotvm-test", "127.0.0.1", tracker.port, number=2, repeat=1,
                               timeout=20, cooldown_interval=0, check_correctness=True)
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2), runner=runner)
    tuner = XGBTuner(task, loss_type="rank")
    tuner.tune(n_trial=16, measure_option=option,
               callbacks=[lambda _, inputs, results: seen.extend(zip(inputs, results))])
    assert len(seen) == 16
    ok = [inp for inp, res in seen if res.error_no == MeasureErrorNo.NO_ERROR]
    errors = [str(res) for _, res in seen if res.error_no != MeasureErrorNo.NO_ERROR]
    assert len(ok) >= 0.9 * len(seen), errors
    # The candidates really differed in argument shapes (several oc_bn values measured) and were
    # checked against the untuned kernel in their own layout (check_correctness).
    assert len({inp.config["oc_bn"].val for inp in ok}) >= 2, [inp.config for inp in ok]
