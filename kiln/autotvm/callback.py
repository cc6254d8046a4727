"""Callbacks for ``tuner.tune``: each is called as ``callback(tuner, inputs, results)`` after
every measured batch, and once with empty lists when tuning ends.

>>> tuner.tune(n_trial=200, measure_option=opt, callbacks=[
...     autotvm.callback.progress_bar(200, prefix="[Task  1/12] "),
...     autotvm.callback.log_to_file("matmul.log")])
"""

from __future__ import annotations

import sys
import time

import numpy as np

from . import record
from .measure.measure import MeasureErrorNo


def log_to_file(file_out, protocol: str = "json"):
    """Append every measurement to ``file_out`` (a path or an open file) as JSON lines."""
    def callback(tuner, inputs, results):
        del tuner
        if not inputs:
            return
        lines = "".join(record.encode(i, r, protocol) + "\n" for i, r in zip(inputs, results))
        if isinstance(file_out, str):
            with open(file_out, "a") as f:
                f.write(lines)
        else:
            file_out.write(lines)
            file_out.flush()
    return callback


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G", out=None):
    """One line, rewritten after every batch, as in the tuning tutorials:
    ``[Task  1/12]  Current/Best:   25.30/  39.12 GFLOPS | Progress: (992/1000) | 751.22 s``;
    " Done." ends it."""
    scale = {"G": 1e9, "M": 1e6, "T": 1e12, "K": 1e3}.get(si_prefix, 1e9)
    state = {"ct": 0, "cur": 0.0, "best": 0.0, "start": None, "done": False, "tuner": None}

    def callback(tuner, inputs, results):
        stream = out or sys.stdout
        if state["tuner"] is not tuner:  # a callback object reused for another task restarts
            state.update(ct=0, cur=0.0, best=0.0, start=getattr(tuner, "started", time.monotonic()),
                         done=False, tuner=tuner, shown=False)
        if state["done"]:
            return
        if not inputs and state["shown"]:  # tuning ended: close the line already on screen
            stream.write(" Done.\n")
            stream.flush()
            state["done"] = True
            return
        for inp, res in zip(inputs, results):
            state["ct"] += 1
            flops = 0.0
            if res.error_no == MeasureErrorNo.NO_ERROR:
                flops = inp.task.flop / float(np.mean(res.costs))
            state["cur"] = flops
            state["best"] = max(state["best"], tuner.best_flops)
        line = (f"\r{prefix}Current/Best: {state['cur'] / scale:7.2f}/{state['best'] / scale:7.2f} "
                f"{si_prefix}FLOPS | Progress: ({state['ct']}/{total}) | "
                f"{time.monotonic() - state['start']:.2f} s")
        if not inputs:
            stream.write(line + " Done.\n")
            state["done"] = True
        else:
            stream.write(line)
            state["shown"] = True
        stream.flush()
    return callback


def history_recorder(store: dict, key=None):
    """Keep (trial, best GFLOPS so far) per task in ``store`` (for plots: kiln.autotvm.plot)."""
    def callback(tuner, inputs, results):
        del inputs, results
        name = key or "%s%s" % (tuner.task.name, tuner.task.args)
        best, curve = 0.0, []
        for trial, gflops in tuner.history:
            best = max(best, gflops)
            curve.append((trial, best))
        store[name] = curve
    return callback
