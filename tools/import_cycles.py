#!/usr/bin/env python3
"""Count import circles in kiln: strongly connected components of the module import graph.

Every `import` / `from ... import` in a file counts, at module level and inside functions
alike (a lazy import is still a dependency). An edge goes from a module to each kiln module it
names; `from pkg import name` counts `pkg.name` when that is a module, else `pkg`. A package's
`__init__` is its own node (`kiln.runtime`).

    python tools/import_cycles.py            # count and largest circle
    python tools/import_cycles.py -v         # every circle, with its members
    python tools/import_cycles.py --edges    # ... and the imports (file:line) that close each one
    python tools/import_cycles.py --under kiln/runtime   # only circles touching that folder
    python tools/import_cycles.py --tree /tmp/old        # another checkout (an old commit)
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_names(pkg_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the package."""
    out = {}
    for path in sorted(pkg_dir.rglob("*.py")):
        parts = list(path.relative_to(pkg_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(mod: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_sites(mod: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(kiln module, line, inside a function) for every import of another kiln module in `mod`."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            lazy = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(mod, path, child)
                for a in child.names:
                    full = f"{base}.{a.name}"
                    names.append(full if full in known else base)
            for name in names:
                # "import kiln.a.b" depends on kiln.a.b (and runs kiln.a's __init__, which we do
                # not count: a package __init__ is imported by every child, that is no circle).
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name and name != mod:
                    found.append((name, child.lineno, in_function))
            visit(child, lazy)

    visit(tree, False)
    return found


def imports_of(mod: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The kiln modules that `mod` imports anywhere in its text."""
    return {name for name, _, _ in import_sites(mod, path, known)}


def graph(pkg_dir: Path) -> dict[str, set[str]]:
    known = module_names(pkg_dir)
    return {m: imports_of(m, p, known) for m, p in known.items()}


def strongly_connected(g: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is deep enough to hit the recursion limit)."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def circles(pkg_dir: Path = ROOT / "kiln") -> list[list[str]]:
    """Every import circle (component of more than one module), largest first."""
    comps = [c for c in strongly_connected(graph(pkg_dir)) if len(c) > 1]
    return sorted(comps, key=lambda c: (-len(c), c))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="list every circle's members")
    ap.add_argument("--edges", action="store_true", help="with each circle, the imports that close it "
                    "(file:line, 'lazy' when inside a function)")
    ap.add_argument("--under", help="only circles with a module under this folder (e.g. kiln/runtime)")
    ap.add_argument("--tree", default=str(ROOT), help="the checkout to read (e.g. an old commit unpacked with "
                    "git archive REV kiln | tar -x -C DIR)")
    args = ap.parse_args(argv)
    found = circles(Path(args.tree) / "kiln")
    if args.under:
        prefix = args.under.strip("/").replace("/", ".")
        found = [c for c in found if any(m == prefix or m.startswith(prefix + ".") for m in c)]
    sizes = [len(c) for c in found]
    print(f"import circles: {len(found)}; largest: {max(sizes, default=0)} modules; "
          f"modules in circles: {sum(sizes)}")
    known = module_names(Path(args.tree) / "kiln") if args.edges else {}
    for c in found if args.verbose or args.edges else found[:1]:
        print(f"  [{len(c)}] " + " ".join(c))
        for m in c if args.edges else ():
            path = known[m]
            for name, line, lazy in sorted(set(import_sites(m, path, known)), key=lambda t: t[1]):
                if name in c:
                    print(f"      {path.relative_to(Path(args.tree))}:{line} -> {name}{'  (lazy)' if lazy else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
