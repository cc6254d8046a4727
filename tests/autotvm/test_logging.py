"""Document 004's tip for a tuning run that shows "0.00 / 0.00 GFLOPS": one line,
``logging.getLogger('autotvm').setLevel(logging.DEBUG)``, prints every measurement with its
error. Run in a fresh interpreter: pytest's own log capture installs handlers that hide the
difference."""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

SCRIPT = textwrap.dedent("""
    import logging, sys
    import kiln as tvm
    from kiln import autotvm, te

    {setup}

    @autotvm.template("test_logging/add")
    def add(n):
        a = te.placeholder((n,), name="a")
        b = te.compute((n,), lambda i: a[i] + 1.0, name="b")
        s = te.create_schedule(b.op)
        cfg = autotvm.get_config()
        cfg.define_split("tile", n, num_outputs=2)
        cfg.add_flop(n)
        _, inner = cfg["tile"].apply(s, b, b.op.axis[0])
        return s, [a, b]

    task = autotvm.task.create("test_logging/add", args=(64,), target=sys.argv[1])
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=1),
                                    runner=autotvm.LocalRunner(number=1, repeat=1, cooldown_interval=0))
    autotvm.tuner.RandomTuner(task).tune(n_trial=2, measure_option=option)
""")


def _tune(setup: str, target: str = "llvm"):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", SCRIPT.format(setup=setup), target], capture_output=True,
                          text=True, env=env, timeout=300, check=True)


def test_debug_level_alone_prints_every_trial():
    out = _tune("logging.getLogger('autotvm').setLevel(logging.DEBUG)")
    trials = [line for line in out.stderr.splitlines() if line.startswith("No: ")]
    assert len(trials) == 2 and all("GFLOPS" in t and "MeasureResult(costs=" in t for t in trials), out.stderr
    assert out.stdout == ""


def test_a_failed_trial_shows_its_error():
    out = _tune("logging.getLogger('autotvm').setLevel(logging.DEBUG)", "llvm -mtriple=aarch64-linux-gnu")
    trials = [line for line in out.stderr.splitlines() if line.startswith("No: ")]
    assert len(trials) == 2 and all("error_no=RUNTIME_DEVICE" in t and "aarch64" in t for t in trials), out.stderr


def test_silent_by_default_and_once_through_a_configured_root_logger():
    assert _tune("").stderr == ""
    out = _tune("logging.basicConfig(level=logging.DEBUG, format='root %(name)s: %(message)s')")
    trials = [line for line in out.stderr.splitlines() if "No: " in line]
    assert len(trials) == 2 and all(t.startswith("root autotvm: No: ") for t in trials), out.stderr
