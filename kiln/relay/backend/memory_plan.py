"""Storage planning for the graph executor: which buffer each intermediate tensor lives in.

The executor runs the nodes in order. An output tensor needs its buffer from the moment its
node runs until its last consumer has run; after that the buffer may hold a later tensor. The
planner walks the nodes once, handing each new output the smallest free buffer that fits (or,
when none fits, the largest free one, grown), and frees a tensor's buffer after its last use.

A node's outputs are allocated before its inputs are freed, so a kernel never writes into a
buffer it is reading. Graph inputs (data and parameters) and graph outputs keep buffers of
their own: inputs are set once and read by every run, outputs are read after the run.
"""

from __future__ import annotations


def plan_storage(nodes: list, entry_bytes: list, node_row_ptr: list, heads: list, kinds: list | None = None) -> list:
    """``storage_id`` for every entry (node output), in entry order.

    ``nodes``: graph JSON nodes (``op`` "null" for inputs, ``inputs`` as [node, index, 0]).
    ``entry_bytes``: size of each entry. ``heads``: the graph outputs as [node, index, 0].
    ``kinds``: per entry None (a buffer) or a key (an image: scope, shape, dtype); an image is
    reused only by entries of the same key, since it cannot be resized or reinterpreted.
    """
    kinds = kinds or [None] * len(entry_bytes)
    def eid(ref) -> int:
        return node_row_ptr[ref[0]] + ref[1]

    uses = [0] * len(entry_bytes)
    for node in nodes:
        for ref in node["inputs"]:
            uses[eid(ref)] += 1
    pinned = {eid(h) for h in heads}
    storage = [-1] * len(entry_bytes)
    capacity: list[int] = []  # bytes of each storage id
    kind_of: list = []  # None or the image key of each storage id
    free: list[int] = []

    def allocate(size: int, kind=None) -> int:
        pool = [s for s in free if kind_of[s] == kind]
        fits = [s for s in pool if capacity[s] >= size]
        if fits:
            sid = min(fits, key=lambda s: capacity[s])
        elif pool and kind is None:
            sid = max(pool, key=lambda s: capacity[s])
            capacity[sid] = size
        else:
            capacity.append(size)
            kind_of.append(kind)
            return len(capacity) - 1
        free.remove(sid)
        return sid

    for nid, node in enumerate(nodes):
        outs = range(node_row_ptr[nid], node_row_ptr[nid + 1])
        if node["op"] == "null":
            for e in outs:
                capacity.append(entry_bytes[e])
                kind_of.append(kinds[e])
                storage[e] = len(capacity) - 1
            continue
        for e in outs:
            storage[e] = allocate(entry_bytes[e], kinds[e])
        for ref in node["inputs"]:
            e = eid(ref)
            uses[e] -= 1
            if uses[e] == 0 and e not in pinned and nodes[ref[0]]["op"] != "null":
                free.append(storage[e])
        for e in outs:  # outputs nobody reads (an unused split field) free at once
            if uses[e] == 0 and e not in pinned:
                free.append(storage[e])
    return storage
