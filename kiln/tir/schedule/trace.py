"""The record of a schedule: one instruction per primitive call, printable as Python and replayable.

``str(sch.trace)`` is a function ``apply_trace(sch)`` that makes the same calls, as TVM prints it;
``trace.apply_to_schedule(sch, remove_postproc=False)`` replays the instructions on another
schedule of the same module, mapping each returned block/loop handle to the new one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kiln.errors import ScheduleError


class BlockRV:
    """A handle to a block of a schedule (it stays valid while the block exists)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"BlockRV({self.name!r})"


class LoopRV:
    """A handle to a loop of a schedule (valid until a primitive replaces the loop)."""

    def __init__(self, var):
        self.var = var

    def __repr__(self) -> str:
        return f"LoopRV({self.var.name!r})"


@dataclass(frozen=True)
class Instruction:
    """One primitive call: kind is the Schedule method, inputs and outputs are handles or values."""

    kind: str
    inputs: tuple  # (argument name, value) pairs, in call order; "*name" holds positional arguments
    outputs: tuple
    listed: bool = False  # the call returned a list (printed ``l1, = ...`` when it has one item)


class Trace:
    """The instructions a schedule ran, in order."""

    def __init__(self, insts=()):
        self.insts = list(insts)

    def append(self, inst: Instruction) -> None:
        self.insts.append(inst)

    def apply_to_schedule(self, sch, remove_postproc: bool = False, decision_provider=None) -> None:
        """Run the same primitives on sch (a Schedule of a structurally equal module)."""
        del remove_postproc, decision_provider  # no post-processing steps or sampled decisions in kiln
        rvs: dict[int, object] = {}

        def arg(v):
            if isinstance(v, (BlockRV, LoopRV)):
                if id(v) not in rvs:
                    raise ScheduleError(f"trace: handle {v!r} is used before an instruction returned it")
                return rvs[id(v)]
            if isinstance(v, (list, tuple)):
                return type(v)(arg(x) for x in v)
            return v

        for inst in self.insts:
            args = [x for k, v in inst.inputs if k.startswith("*") for x in arg(v)]
            kwargs = {k: arg(v) for k, v in inst.inputs if not k.startswith("*")}
            got = getattr(sch, inst.kind)(*args, **kwargs)
            got = list(got) if isinstance(got, (list, tuple)) else [] if got is None else [got]
            for old, new in zip(inst.outputs, got):
                rvs[id(old)] = new

    def as_python(self) -> list[str]:
        names: dict[int, str] = {}
        lines = []

        def text(v):
            if isinstance(v, (BlockRV, LoopRV)):
                return names[id(v)]
            if isinstance(v, list):
                return "[" + ", ".join(text(x) for x in v) + "]"
            if isinstance(v, tuple):
                return "(" + "".join(text(x) + ", " for x in v) + ")"
            return json.dumps(v) if isinstance(v, str) else repr(v)

        for inst in self.insts:
            outs = []
            for o in inst.outputs:
                names[id(o)] = f"{'b' if isinstance(o, BlockRV) else 'l'}{len(names)}"
                outs.append(names[id(o)])
            parts = [", ".join(text(x) for x in v) if k.startswith("*") else f"{k}={text(v)}" for k, v in inst.inputs]
            call = f"sch.{inst.kind}({', '.join(parts)})"
            target = ", ".join(outs) + ("," if inst.listed and len(outs) == 1 else "")
            lines.append(f"{target} = {call}" if outs else call)
        return lines

    def __str__(self) -> str:
        body = self.as_python() or ["pass"]
        return "\n".join(["# from tvm import tir", "def apply_trace(sch: tir.Schedule) -> None:"]
                         + ["  " + line for line in body])

    __repr__ = __str__

    def show(self) -> None:
        print(str(self))
