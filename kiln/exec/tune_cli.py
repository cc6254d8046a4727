"""``kiln tune``: look at a tuning log: a summary per task, a PNG of best GFLOPS vs trials.

    kiln tune --log resnet18.log                 # summary: trials, errors, best GFLOPS and config
    kiln tune --log resnet18.log --plot r.png    # and the curves, one per task
    kiln tune --log resnet18.log --pick-best best.log

Tuning itself is a Python API (``kiln.autotvm``): a log is what this command reads.
"""

from __future__ import annotations

import collections


def add_arguments(p) -> None:
    p.add_argument("--log", required=True, help="tuning log (JSON lines from autotvm.callback.log_to_file)")
    p.add_argument("--plot", metavar="PNG", default=None, help="write best GFLOPS vs trials per task here")
    p.add_argument("--pick-best", metavar="OUT", default=None,
                   help="write the best record of each task to OUT (autotvm.record.pick_best)")
    p.add_argument("--quiet", action="store_true", help="skip the summary")


def summarize(log: str) -> list[dict]:
    """Per task, in log order: name, args, trials, errors by kind, best GFLOPS, its trial and config,
    and the trial at which 90% of the best was first reached."""
    from kiln.autotvm import record
    from kiln.autotvm.measure.measure import MeasureErrorNo
    from kiln.autotvm.plot import _task_flop

    tasks: dict[str, dict] = {}
    for inp, res in record.load_from_file(log):
        key = f"{inp.task.name}{inp.task.args}"
        t = tasks.get(key)
        if t is None:
            t = tasks[key] = {"name": inp.task.name, "args": inp.task.args, "target": str(inp.target),
                              "flop": _task_flop(inp.task), "gflops": [], "errors": collections.Counter(),
                              "best_config": None}
        ok = res.error_no == MeasureErrorNo.NO_ERROR
        cost = sum(res.costs) / len(res.costs) if ok and res.costs else 0.0
        g = t["flop"] / cost / 1e9 if ok and cost > 0 else 0.0
        if not ok:
            t["errors"][MeasureErrorNo(res.error_no).name] += 1
        if g > max(t["gflops"], default=0.0) or t["best_config"] is None and ok:
            t["best_config"] = inp.config
        t["gflops"].append(g)
    out = []
    for t in tasks.values():
        g = t["gflops"]
        best = max(g, default=0.0)
        t.update(trials=len(g), best_gflops=best, best_trial=g.index(best) + 1 if g else 0,
                 reach90=next((i + 1 for i, v in enumerate(g) if best and v >= 0.9 * best), 0))
        out.append(t)
    return out


def _short(args) -> str:
    """Tensor shapes only: the attributes make the line too long to read."""
    shapes = [("x".join(map(str, a[1]))) for a in args if isinstance(a, tuple) and a[:1] == ("TENSOR",)]
    return ", ".join(shapes) or str(args)


def run(args) -> int:
    from kiln.autotvm import record

    tasks = summarize(args.log)
    if not tasks:
        print(f"{args.log}: no records")
        return 1
    if not args.quiet:
        print(f"{args.log}: {len(tasks)} tasks, {sum(t['trials'] for t in tasks)} trials")
        print(f"{'#':>3} {'task':<28}{'inputs':<30}{'trials':>7}{'errors':>7}{'best GFLOPS':>12}"
              f"{'at':>5}{'90% at':>7}  best config")
        for i, t in enumerate(tasks, 1):
            cfg = "-" if t["best_config"] is None else \
                ",".join(f"{k}={v}" for k, v in _knobs(t["best_config"]))
            print(f"{i:>3} {t['name']:<28}{_short(t['args']):<30}{t['trials']:>7}{sum(t['errors'].values()):>7}"
                  f"{t['best_gflops']:>12.2f}{t['best_trial']:>5}{t['reach90']:>7}  {cfg}")
            if t["errors"]:
                print(f"{'':>4}errors: " + ", ".join(f"{k} {n}" for k, n in t["errors"].most_common()))
    if args.plot:
        from kiln.autotvm import plot
        curves = {f"{t['name']} {_short(t['args'])}": [(i + 1, b) for i, b in enumerate(_best_so_far(t["gflops"]))]
                  for t in tasks}
        how = plot.save_png(curves, args.plot, title=f"best GFLOPS vs trials: {args.log}")
        print(f"plot: {args.plot} ({plot.describe(how)})")
    if args.pick_best:
        record.pick_best(args.log, args.pick_best)
        print(f"best records: {args.pick_best}")
    return 0


def _knobs(config):
    """(name, value) of a ConfigEntity's knobs, the value as the template reads it."""
    for name, entity in config.items():
        yield name, getattr(entity, "val", getattr(entity, "size", entity))


def _best_so_far(values):
    best, out = 0.0, []
    for v in values:
        best = max(best, v)
        out.append(best)
    return out
