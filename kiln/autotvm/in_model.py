"""Pick each task's config by timing it inside the whole model, not alone.

Tuning times each kernel alone, many times over, on the same inputs. Inside a model a kernel
reads what the previous one left in the caches, and a layout knob (``oc_bn``) decides what its
consumers read; so the fastest config alone is not always the fastest in the model (measured on
ResNet-18: Winograd 512@7 on 32-channel blocks was faster alone and slower in the model than the
default's 16). ``pick_in_model`` takes each task's declared default and its ``top`` fastest
records, builds the model once per rank (build ``v`` uses every task's ``v``-th candidate, or
its default where it has fewer), runs those builds in turn (each a few times in a row) and times
every kernel inside each whole run, and keeps for each task the candidate whose kernels (and
the layout transforms that read their outputs) took least; a candidate must beat the default
by ``margin`` to replace it.

>>> tasks = autotvm.task.extract_from_program(mod["main"], target=target, params=params)
>>> # ... tune each task, logging every record to "all.log" ...
>>> picks = autotvm.in_model.pick_in_model(mod, params, target, tasks, "all.log", out="best.log")
>>> with autotvm.apply_history_best("best.log"):
...     lib = relay.build(mod, target=target, params=params)

The model runs here, in this process: ``target`` must be code this machine runs (``llvm``, or
``llvm -mcpu=<an older CPU of this family>``). The result is a log of one record per task whose
cost is the in-model time of its kernels.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import sys
import time

import numpy as np

from .measure import MeasureInput, MeasureResult

logger = logging.getLogger("kiln.autotvm")


def candidates(tasks, records, top: int = 3) -> dict:
    """``{workload: [(task, config), ...]}``: each task's declared default first, then its ``top``
    fastest other configs among its records in ``records`` (a log file or (input, result)
    pairs; ``record.of_task``), by mean cost."""
    from .record import load_from_file, of_task

    pairs = list(load_from_file(records) if isinstance(records, str) else records)
    out = {}
    for task in tasks:
        costs: dict = {}  # config index -> its lowest mean cost
        for inp, res in of_task(pairs, task):
            if res.error_no == 0 and res.costs:
                mean = sum(res.costs) / len(res.costs)
                costs[inp.config.index] = min(mean, costs.get(inp.config.index, mean))
        space = task.config_space
        default = space.default_index()
        ranked = sorted(costs.items(), key=lambda kv: kv[1])
        indexes = ([default] if default is not None else []) + \
            [i for i, _ in ranked if i != default][:top]
        if indexes:
            out[task.workload] = [(task, space.get(i)) for i in indexes]
    return out


def check_runs_here(target) -> None:
    """Raise KilnError unless this machine runs ``target``'s code (same architecture, and every
    feature the target compiles for is one this CPU has): the picks are timed here."""
    from kiln.errors import KilnError
    from kiln.target.cpu_facts import why_host_cannot_run
    from kiln.target.target import Target

    tgt = Target(target) if isinstance(target, str) else target
    if tgt.kind.name != "llvm":
        raise KilnError(f"pick_in_model: target {tgt} is not CPU code this machine runs; pick on a CPU "
                        "target (llvm ...), or use the tuned log as it is")
    if why := why_host_cannot_run(tgt):
        raise KilnError(f"pick_in_model: cannot run code for {tgt} here: {why}; pick on a machine of the "
                        "target's kind, or use the tuned log as it is")


def _build(mod, params, target, assign: dict):
    from kiln import relay, transform
    from kiln.relay.backend import dispatch

    def provider(op_name, workload, tgt):
        del op_name, tgt
        return assign.get(workload)

    with dispatch.use_config_provider(provider), transform.PassContext(opt_level=3):
        return relay.build(mod, target=target, params=params)


class _Run:
    """One build of the model, ready to run kernel by kernel."""

    def __init__(self, factory, inputs: dict):
        import kiln
        from kiln.contrib import graph_executor

        self.module = graph_executor.GraphModule(factory["default"](kiln.cpu(0)))
        for name, value in inputs.items():
            self.module.set_input(name, value)
        executor = self.module.module
        self.plan = executor._prepared()
        nodes = json.loads(factory.get_graph_json())["nodes"]
        workloads = factory.kernel_workloads
        # Each kernel of a tuned workload, with the unfused layout transforms that read its output
        # (a layout knob puts them there, so they are part of its cost).
        position = {nid: k for k, (nid, _, _, _) in enumerate(executor.kernels)}
        self.groups: dict = {}
        for k, (nid, name, _, _) in enumerate(executor.kernels):
            if name in workloads:
                self.groups.setdefault(workloads[name], []).append(k)
        for nid, node in enumerate(nodes):
            name = node.get("attrs", {}).get("func_name", "")
            if node.get("op") != "tvm_op" or "layout_transform" not in name or name in workloads:
                continue
            for src, *_ in node["inputs"]:
                producer = executor.kernels[position[src]][1] if src in position else None
                if producer in workloads:
                    self.groups[workloads[producer]].append(position[nid])
        self.samples: list = []

    def output(self) -> np.ndarray:
        self.module.run()
        return self.module.get_output(0).numpy()

    def time_once(self) -> float:
        """Run the model once, timing each kernel; returns the whole run's seconds."""
        seconds = []
        clock = time.perf_counter
        start = clock()
        for cfunc, args, codes, n, _ in self.plan:
            t = clock()
            cfunc(args, codes, n)
            seconds.append(clock() - t)
        whole = clock() - start
        self.samples.append(seconds)
        return whole

    def cost(self, workload) -> float:
        """Median over the timed runs of the seconds the kernels of ``workload`` took in one run."""
        ks = self.groups.get(workload, [])
        return statistics.median(sum(r[k] for k in ks) for r in self.samples)


def _inputs(mod, params) -> dict:
    rng = np.random.default_rng(0)
    out = {}
    for var in mod["main"].params:
        if var.name_hint in (params or {}):
            continue
        ty = var.checked_type if getattr(var, "checked_type", None) is not None else var.type_annotation
        shape = tuple(int(d) for d in ty.shape)
        out[var.name_hint] = rng.uniform(-1, 1, shape).astype(str(ty.dtype))
    return out


def _same_output(run: "_Run", want: np.ndarray, which: str) -> None:
    from kiln.errors import KilnError
    got = run.output()
    if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
        raise KilnError(f"pick_in_model: {which} gives a different output than the default build (max diff "
                        f"{float(np.abs(got - want).max()):.3g}); a tuned config is wrong")


def _interleaved(runs: list, rounds: int, burst: int) -> list:
    """Each round runs every build ``burst`` + 1 times in a row, the first untimed, starting at
    a different build each round. One run of each in turn measured the cache, not the configs:
    four builds of MobileNetV2 hold 56 MB of weights, more than the L3, so each run started
    cold, and the build run first after another came out 1.3-1.5x slower than the rest."""
    wholes = [[] for _ in runs]
    for r in range(rounds):
        for j in [(r + i) % len(runs) for i in range(len(runs))]:
            runs[j].time_once()
            runs[j].samples.pop()
            for _ in range(burst):
                wholes[j].append(runs[j].time_once())
    return [statistics.median(w) for w in wholes]


def pick_in_model(mod, params, target, tasks, records, top: int = 3, rounds: int = 10,
                  margin: float = 0.02, out: str | None = None, burst: int = 3,
                  verbose: bool = True) -> list:
    """The config of each task in ``tasks`` chosen inside the whole model (module docstring);
    returns ``[(MeasureInput, MeasureResult)]``, one per task, and writes them to ``out`` (a log
    for ``apply_history_best``) when given. ``verbose`` prints each build, the whole-run times
    and the picks. Each build's output must match the default build's, or the pick stops with
    an error naming the build."""
    from kiln.errors import KilnError

    from .record import save_to_file

    def say(line: str) -> None:
        logger.info("pick_in_model: %s", line)
        if verbose:
            print(f"[pick_in_model] {line}", file=sys.stderr, flush=True)

    check_runs_here(target)
    mod = _typed(mod)
    cands = candidates(tasks, records, top)
    if not cands:
        raise KilnError("pick_in_model: no task has a declared default or a successful record; "
                        "tune the tasks first (their records go in `records`)")
    inputs = _inputs(mod, params)
    ranks = max(len(c) for c in cands.values())
    runs = []
    for v in range(ranks):
        assign = {wl: (c[v] if v < len(c) else c[0])[1] for wl, c in cands.items()}
        start = time.perf_counter()
        runs.append(_Run(_build(mod, params, target, assign), inputs))
        say(f"build {v + 1}/{ranks} (rank {v} of every task) in {time.perf_counter() - start:.1f} s")
    want = runs[0].output()
    for v, run in enumerate(runs[1:], 1):
        _same_output(run, want, f"the build of rank {v}")
    wholes = _interleaved(runs, rounds, burst)
    say("whole run, median of %d: %s" % (rounds * burst, ", ".join(
        f"rank {v} {t * 1e3:.2f} ms" for v, t in enumerate(wholes))))

    chosen = []  # (task, candidates, rank, cost, default cost)
    for wl, cand in cands.items():
        default_cost = runs[0].cost(wl)
        best = (default_cost, 0)
        for v in range(1, len(cand)):
            cost = runs[v].cost(wl)
            if cost < best[0] and cost < default_cost * (1 - margin):
                best = (cost, v)
        chosen.append((cand[best[1]][0], cand, best[1], best[0], default_cost))
    if any(v for _, _, v, _, _ in chosen):
        # Each pick won where its own kernels ran; together they change more than one layer's
        # neighbours (ResNet-18: every rank-1..3 build ran 25% slower whole than the defaults).
        # The picks stand only if the build of all of them beats the defaults' whole run.
        final = _Run(_build(mod, params, target, {c[0][0].workload: c[v][1] for _, c, v, _, _ in chosen}), inputs)
        _same_output(final, want, "the build of the picks")
        runs[0].samples.clear()
        default_ms, picked_ms = _interleaved([runs[0], final], rounds, burst)
        say(f"whole run: the picks {picked_ms * 1e3:.2f} ms, the defaults {default_ms * 1e3:.2f} ms")
        if picked_ms >= default_ms:
            say("the picks together are not faster than the defaults: keeping every default")
            chosen = [(task, cand, 0, default_cost, default_cost) for task, cand, _, _, default_cost in chosen]

    picks = []
    for task, cand, v, cost, default_cost in chosen:
        config = cand[v][1]
        picks.append((MeasureInput(task.target, task, config), MeasureResult((cost,), 0, 0.0, time.time())))
        shapes = " ".join("x".join(map(str, a[1])) for a in task.args if isinstance(a, tuple) and a[:1] == ("TENSOR",))
        say(f"{task.name} {shapes}: " + (f"config {config.index} (rank {v}) {cost * 1e3:.3f} ms in the model, "
                                          f"default {default_cost * 1e3:.3f} ms" if v else
                                          f"default {default_cost * 1e3:.3f} ms in the model"))
    if out:  # whole or not at all: a half-written log would be read as a complete one
        tmp = f"{out}.tmp{os.getpid()}"
        try:
            save_to_file(tmp, picks)
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return picks


def _typed(mod):
    from kiln.relay import transform as relay_transform
    return relay_transform.InferType()(mod)
