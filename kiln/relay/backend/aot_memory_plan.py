"""Static memory plan of the AOT arena: an offset for every intermediate tensor.

The AOT run function calls the kernels in graph order. An intermediate tensor is live from the
node that writes it to the last node that reads it (both included: a kernel never writes over a
tensor it is reading, so no in-place reuse across a kernel's own inputs and outputs). Two
tensors may share bytes when their lifetimes are disjoint.

``plan_offsets`` places the tensors largest first, each at the lowest aligned offset where it
overlaps no placed tensor whose lifetime meets its own (first fit over the gaps between those
tensors, sorted by offset). The arena is the highest end. ``peak_live_bytes`` is the lower bound
any plan must reach: the largest sum of the sizes of tensors live at one node. When the first
fit is above that bound (sizes rounded up to ``align``), a bounded backtracking search in order
of first use looks for a plan of exactly the bound and is taken if it finds one.

In place: a kernel that is elementwise over an input of its output's shape and element size
(``inplace_input``: every op of the fused function elementwise or broadcast) writes its output
over that input when the input dies there (``merge_inplace``): element ``i`` is read before it
is written and no other element is. The two then are one tensor of the plan, live from the
input's producer to the output's last reader. The graph codegen records the candidates
(``GraphCodegen.inplace``); only the AOT plan uses them.

The graph executor's planner (memory_plan.py) shares whole buffers between tensors (a storage
id, sized by the largest tensor it ever holds); offsets let a large tensor's bytes hold two
smaller ones at once, which is what a microcontroller's RAM wants.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Live:
    """A tensor of ``size`` bytes live from node ``first`` to node ``last`` (inclusive)."""

    first: int
    last: int
    size: int


def _up(x: int, align: int) -> int:
    return (x + align - 1) // align * align


def plan_offsets(tensors: list, align: int = 16, budget: int = 20000) -> tuple[list, int]:
    """(offset of each tensor, arena bytes); offsets are multiples of ``align``. The largest-first
    fit below, unless a search finds a plan of the lower bound (``_search``)."""
    offsets, arena = _first_fit(tensors, align)
    bound = _up(peak_live_bytes([Live(t.first, t.last, _up(t.size, align)) for t in tensors]), align)
    if arena > bound and len(tensors) <= 400:  # (recursion: one level per tensor)
        found = _search(tensors, align, bound, budget)
        if found is not None:
            return found, bound
    return offsets, arena


def _search(tensors: list, align: int, bound: int, budget: int):
    """Offsets within ``bound`` bytes, or None: tensors in order of first use, each tried at the
    aligned ends of the gaps between the live tensors already placed (lowest first), backtracking,
    at most ``budget`` placements. Largest-first fit can lose here: in a chain of int8 activations
    and larger padded copies (DS-CNN: 8,000 and 12,096 B) each pair of neighbours must sit at
    opposite ends of the arena, which placing by size does not see (28,096 B for a 20,096 B peak)."""
    order = sorted(range(len(tensors)), key=lambda i: (tensors[i].first, -tensors[i].size, i))
    offsets: dict = {}
    steps = [0]

    def candidates(t):
        busy = sorted((offsets[j], offsets[j] + tensors[j].size) for j in offsets
                      if tensors[j].first <= t.last and t.first <= tensors[j].last)
        spots = {0} | {_up(hi, align) for _, hi in busy} | {(lo - t.size) // align * align for lo, _ in busy}
        spots.add((bound - t.size) // align * align)
        return [at for at in sorted(spots) if 0 <= at and at + t.size <= bound
                and all(at + t.size <= lo or hi <= at for lo, hi in busy)]

    def place(k) -> bool:
        if k == len(order):
            return True
        i = order[k]
        for at in candidates(tensors[i]):
            steps[0] += 1
            if steps[0] > budget:
                return False
            offsets[i] = at
            if place(k + 1):
                return True
            del offsets[i]
        return False

    if not tensors or not place(0):
        return None
    return [offsets[i] for i in range(len(tensors))]


def _first_fit(tensors: list, align: int) -> tuple[list, int]:
    order = sorted(range(len(tensors)), key=lambda i: (-tensors[i].size, tensors[i].first, i))
    offsets = [0] * len(tensors)
    placed: list = []  # indices already given an offset
    arena = 0
    for i in order:
        t = tensors[i]
        busy = sorted((offsets[j], offsets[j] + tensors[j].size) for j in placed
                      if tensors[j].first <= t.last and t.first <= tensors[j].last)
        at = 0
        for lo, hi in busy:
            if at + t.size <= lo:
                break
            at = max(at, _up(hi, align))
        offsets[i] = at
        placed.append(i)
        arena = max(arena, at + t.size)
    return offsets, _up(arena, align)


def peak_live_bytes(tensors: list) -> int:
    """The largest sum of sizes of the tensors live at one node."""
    if not tensors:
        return 0
    nodes = range(min(t.first for t in tensors), max(t.last for t in tensors) + 1)
    return max(sum(t.size for t in tensors if t.first <= n <= t.last) for n in nodes)


def lifetimes(graph: dict, row: list, skip: set, nbytes) -> dict:
    """{entry id: Live} of the graph's intermediate entries (those not in ``skip``: inputs,
    outputs, constants), from graph JSON nodes in execution order; ``nbytes(eid)`` sizes one."""
    first, last = {}, {}
    for nid, node in enumerate(graph["nodes"]):
        if node["op"] != "tvm_op":
            continue
        for i, k, *_ in node["inputs"]:
            eid = row[i] + k
            last[eid] = nid
        for eid in range(row[nid], row[nid + 1]):
            first.setdefault(eid, nid)
    return {e: Live(first[e], max(first[e], last.get(e, first[e])), nbytes(e)) for e in first if e not in skip}


def inplace_input(func, args) -> int | None:
    """The position of an argument a fused kernel may overwrite with its output, or None: the
    function's ops are all elementwise/broadcast (OpPattern <= BROADCAST: output element ``i``
    reads element ``i`` of a same-shaped input, and writes only element ``i``), the argument is a
    tensor (not a constant, not a tuple) of the output's shape and element size."""
    from ..expr import Call, Constant, Function, Tuple, TupleGetItem
    from ..op.registry import OpDef, OpPattern
    from ..ty import TensorType
    from ..visitor import post_order

    out = func.body.checked_type
    if not isinstance(out, TensorType) or any(isinstance(a, (Tuple, TupleGetItem)) for a in args):
        return None
    for node in post_order(func.body):
        if isinstance(node, (Tuple, TupleGetItem, Function)):
            return None
        if isinstance(node, Call) and not (isinstance(node.op, OpDef) and node.op.pattern <= OpPattern.BROADCAST):
            return None
    def static(shape):  # None for a dynamic dimension
        try:
            return tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            return None

    def itemsize(dtype):
        try:
            return np.dtype(str(dtype)).itemsize
        except TypeError:  # bfloat16 and other dtypes numpy does not name
            return None

    import numpy as np
    shape, size = static(out.shape), itemsize(out.dtype)
    if shape is None or size is None or str(out.dtype) == "bool":
        return None
    for i, (p, a) in enumerate(zip(func.params, args)):
        t = p.checked_type
        if isinstance(a, Constant) or not isinstance(t, TensorType) or str(t.dtype) == "bool":
            continue
        if static(t.shape) == shape and itemsize(t.dtype) == size:
            return i
    return None


def merge_inplace(live: dict, pairs: list) -> dict:
    """{entry: the entry whose bytes it takes}: for each (input entry, output entry, node) of a
    kernel that may write over that input (``inplace_input``), when the input dies at that node
    and both are planned intermediates of one size; chains follow (a -> b -> c share a's bytes)."""
    root: dict = {}

    def find(e):
        while e in root:
            e = root[e]
        return e

    for e_in, e_out, nid in pairs:
        if e_in in live and e_out in live and live[e_in].last == nid and live[e_in].size == live[e_out].size:
            root[e_out] = find(e_in)
    return {e: find(e) for e in root}


__all__ = ["Live", "plan_offsets", "peak_live_bytes", "lifetimes", "inplace_input", "merge_inplace"]
