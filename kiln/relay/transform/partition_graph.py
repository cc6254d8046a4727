"""PartitionGraph: turn each annotated region into one external function.

A region (see merge_compiler_regions.Regions) becomes

    Function(params, body, Primitive=1, Compiler="dnnl", global_symbol="tvmgen_default_dnnl_main_0")

called from ``main`` where the region was. Its parameters are the distinct values the region
reads through ``compiler_begin`` (constants are bound into the body instead); its result is
the value of each distinct member read through ``compiler_end`` (one value, or a tuple whose
fields the callers take with TupleGetItem). Functions are numbered in graph order across all
compilers. The functions are also added to the module under their symbol, for inspection;
``main`` calls them directly, as the graph executor calls primitive functions.
"""

from __future__ import annotations

from kiln.errors import CompileError

from ..expr import Call, Constant, Function, Tuple, TupleGetItem, var
from ..op.contrib.annotation import is_begin, is_end
from ..visitor import _walk, children
from .merge_compiler_regions import Regions
from .merge_composite import copy_subgraph, rebuild


def partition_graph(func: Function, mod_name: str = "default", start: int = 0) -> tuple[Function, dict]:
    """``(new main, {symbol: external function})``; numbering starts at ``start``."""
    regions = Regions(func.body)
    groups = regions.members()
    root_of = {m: r for r, ms in groups.items() for m in ms}
    ends_of: dict = {}
    for node in regions.order:
        if is_end(node) and node.args[0] in root_of:
            ends_of.setdefault(root_of[node.args[0]], [])
            if not any(node.args[0] is o for o in ends_of[root_of[node.args[0]]]):
                ends_of[root_of[node.args[0]]].append(node.args[0])
    inputs_of = {}
    for r, ms in groups.items():
        seen: list = []
        for m in ms:
            for a in m.args:
                if is_begin(a) and not isinstance(a.args[0], Constant) and not any(a.args[0] is s for s in seen):
                    seen.append(a.args[0])
        inputs_of[r] = seen

    _check_acyclic(regions, groups, inputs_of)
    calls: dict = {}
    functions: dict = {}

    def kids(node):
        if is_end(node) and node.args[0] in root_of:
            return inputs_of[root_of[node.args[0]]]
        return children(node)

    def dispatch(node):
        if is_end(node) and node.args[0] in root_of:
            r = root_of[node.args[0]]
            if r not in calls:
                calls[r] = _outline(r, groups[r], inputs_of[r], ends_of[r], regions.compiler[r],
                                    f"tvmgen_{mod_name}_{regions.compiler[r]}_main_{start + len(functions)}",
                                    memo, functions)
            call, outs = calls[r]
            k = next(i for i, o in enumerate(outs) if o is node.args[0])
            return call if len(outs) == 1 else TupleGetItem(call, k)
        if node in root_of or is_begin(node):
            return node  # reached only through region marks, which are replaced
        return rebuild(node, memo)

    memo: dict = {}
    _walk(func.body, memo, dispatch, kids)
    out = Function(func.params, memo[func.body], func.ret_type, func.type_params, func.attrs)
    return out, functions


def _outline(root, members, inputs, outputs, compiler: str, symbol: str, memo: dict, functions: dict):
    params = [var(f"{symbol}_i{k}", x.checked_type) for k, x in enumerate(inputs)]
    stop = {}
    for m in members:
        for a in m.args:
            if is_begin(a):
                x = a.args[0]
                stop[a] = x if isinstance(x, Constant) else params[next(i for i, y in enumerate(inputs) if y is x)]
    result = outputs[0] if len(outputs) == 1 else Tuple(list(outputs))
    body = copy_subgraph(result, stop)
    f = Function(params, body, None, None,
                 {"Primitive": 1, "Compiler": compiler, "global_symbol": symbol, "Inline": 1})
    functions[symbol] = f
    return Call(f, [memo[x] for x in inputs]), list(outputs)


def _check_acyclic(regions: Regions, groups: dict, inputs_of: dict) -> None:
    """Fail, rather than loop, on regions merged by hand into a cycle: a region must not read a
    value computed from one of its own outputs outside it (MergeCompilerRegions never does this)."""
    for root, members in groups.items():
        inside = set(members)
        seen: set = set()
        stack = [x for x in inputs_of[root]]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node in inside:
                raise CompileError(f"PartitionGraph: a {regions.compiler[root]} region reads a value computed "
                                   "from its own output outside it, so it cannot be one function; merge "
                                   "regions with MergeCompilerRegions, which keeps them acyclic")
            stack.extend(children(node))
