"""MergeCompilerRegions: join neighbouring regions of one external compiler.

After AnnotateTarget every supported op is a region of its own. A region's members are the
calls that read a ``compiler_begin`` or another member directly; values leave a region only
through ``compiler_end``. This pass joins a producer's region and a consumer's region of the
same compiler by dropping the ``compiler_end -> compiler_begin`` pair between them, unless some
path leaves the producer's region and comes back into the consumer's through other nodes:
merging those would make the partitioned function both feed and read that path (a cycle).
"""

from __future__ import annotations

from ..expr import Call, Function
from ..op.contrib.annotation import is_begin, is_end
from ..visitor import children, post_order
from .merge_composite import rebuild


class Regions:
    """The regions of an annotated graph: members, their compiler, union-find over members."""

    def __init__(self, body):
        self.order = post_order(body)
        self.parent: dict = {}
        self.compiler: dict = {}
        for node in self.order:
            if not isinstance(node, Call) or is_begin(node) or is_end(node):
                continue
            inside = [a for a in node.args if is_begin(a) or a in self.parent]
            if not inside:
                continue
            self.parent[node] = node
            self.compiler[node] = next(a.attrs.compiler for a in node.args if is_begin(a)) \
                if any(is_begin(a) for a in node.args) else self.compiler[self.find(inside[0])]
            for a in node.args:
                if a in self.parent:
                    self.union(a, node)

    def find(self, n):
        while self.parent[n] is not n:
            self.parent[n] = self.parent[self.parent[n]]
            n = self.parent[n]
        return n

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra
            self.compiler[ra] = self.compiler.get(ra) or self.compiler.get(rb)

    def members(self) -> dict:
        """``{root: [members in post order]}``, regions in the order of their first member."""
        out: dict = {}
        for node in self.order:
            if node in self.parent:
                out.setdefault(self.find(node), []).append(node)
        return out


def _producer(node):
    """The value a node reads, looking through region marks."""
    while isinstance(node, Call) and (is_begin(node) or is_end(node)):
        node = node.args[0]
    return node


def merge_compiler_regions(func: Function) -> Function:
    regions = Regions(func.body)
    succ: dict = {}
    for node in regions.order:
        if is_begin(node) or is_end(node):
            continue
        for c in children(node):
            succ.setdefault(_producer(c), []).append(node)
    merged_edges: set = set()
    for node in regions.order:
        if node not in regions.parent:
            continue
        for a in node.args:
            if not (is_begin(a) and is_end(a.args[0])):
                continue
            p = a.args[0].args[0]
            if p not in regions.parent or regions.compiler[regions.find(p)] != regions.compiler[regions.find(node)]:
                continue
            if a.args[0].attrs.compiler != a.attrs.compiler:
                continue
            if regions.find(p) is regions.find(node) or not _creates_cycle(regions, succ, p, node):
                regions.union(p, node)
                merged_edges.add((id(node), id(a)))
    if not merged_edges:
        return func
    new_of: dict = {}
    for node in regions.order:
        if isinstance(node, Call) and node in regions.parent:
            args = [new_of.get(a.args[0].args[0]) if (id(node), id(a)) in merged_edges else new_of.get(a, a)
                    for a in node.args]
            new_of[node] = Call(node.op, args, node.attrs, node.type_args)
        else:
            new_of[node] = rebuild(node, new_of)
    return Function(func.params, new_of[func.body], func.ret_type, func.type_params, func.attrs)


def _creates_cycle(regions: Regions, succ: dict, p, n) -> bool:
    """True when a path leaves p's region and reaches n's region through an outside node."""
    ra, rb = regions.find(p), regions.find(n)
    inside = lambda x: x in regions.parent and regions.find(x) in (ra, rb)  # noqa: E731
    a_members = [m for m in regions.order if m in regions.parent and regions.find(m) is ra]
    stack = [s for m in a_members for s in succ.get(m, []) if not inside(s)]
    seen = set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        for s in succ.get(x, []):
            if inside(s):
                if regions.find(s) is rb:
                    return True
            else:
                stack.append(s)
    return False
