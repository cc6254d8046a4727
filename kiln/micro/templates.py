"""AutoTVM templates of the Cortex-M int8 kernels (kiln/topi/cortex_m), tuned on the emulated
board by instruction count (MicroBuilder / MicroRunner, kiln/micro/autotvm.py).

``cortex_m/dense_int8`` (M, N, K, cpu): int8 (M, K) x (N, K) -> int32. Knobs:

- ``isa``: ``"plain"`` (plain loops: the naive schedule) or the core's tier (``dsp`` / ``mve``,
  from ``cpu``), so the untensorized kernel is one point of the space;
- ``rows``: output columns per data slice (accumulators per loaded data word), divisors of N up
  to 8;
- ``local``: sums in a local array (registers) or in the output.

The untuned default is the tier, 4 rows (or the widest divisor below), local sums. Importing this
module registers the template.
"""

from __future__ import annotations

from kiln import te
from kiln.autotvm.space import OtherOptionEntity
from kiln.autotvm.task import get_config, template
from kiln.target import Target
from kiln.topi.cortex_m import dense_int8, isa_tier, schedule_dense_int8
from kiln.topi.cortex_m.dense_int8 import usable


def _rows_choices(n: int) -> list:
    return [r for r in (1, 2, 4, 8) if n % r == 0]


@template("cortex_m/dense_int8")
def dense_int8_template(M: int, N: int, K: int, cpu: str = "cortex-m4"):
    a = te.placeholder((M, K), "int8", name="A")
    w = te.placeholder((N, K), "int8", name="W")
    out = dense_int8(a, w)
    tier = isa_tier(Target(f"c -mcpu={cpu}"))
    cfg = get_config()
    cfg.define_knob("isa", ["plain"] + ([tier] if usable(tier, K) else []))
    rows = _rows_choices(N)
    cfg.define_knob("rows", rows)
    cfg.define_knob("local", [True, False])
    if cfg.is_fallback:  # the untuned default (default_config finds it in the space)
        cfg["isa"] = OtherOptionEntity(tier if usable(tier, K) else "plain")
        cfg["rows"] = OtherOptionEntity(max(r for r in rows if r <= 4))
        cfg["local"] = OtherOptionEntity(True)
    isa = cfg["isa"].val
    cfg.add_flop(2.0 * M * N * K)
    sch = schedule_dense_int8(out, None if isa == "plain" else isa, rows=cfg["rows"].val, local=cfg["local"].val)
    return sch, [a, w, out]


def default_config(task):
    """The untuned default's point of the space: the tier, the most rows up to 4, local sums."""
    space = task.config_space
    want = {"isa": space.space_map["isa"].entities[-1].val,
            "rows": max(r.val for r in space.space_map["rows"].entities if r.val <= 4), "local": True}
    for i in range(len(space)):
        c = space.get(i)
        if all(c[k].val == v for k, v in want.items()):
            return c
    raise AssertionError(f"the default {want} is not in the space of {task.name}")


__all__ = ["dense_int8_template", "default_config"]
