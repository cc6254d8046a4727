"""How many of onnx's own node tests kiln passes (issue 5: >= 60% of the float node tests of the
ops the ONNX frontend must cover).

    python bench/onnx_coverage.py             # passed / attempted, rate, failing op types
    python bench/onnx_coverage.py -v          # also every failing case with its error
    python bench/onnx_coverage.py -k resize   # only cases whose name contains "resize"
    python bench/onnx_coverage.py --write-passing   # refresh tests/relay/onnx_node_passing.txt

Each case is imported with from_onnx, compiled with relay.build for llvm and run by the graph
executor (kiln.relay.frontend.onnx.backend.KilnBackend); outputs are compared with onnx's
expected outputs at the case's tolerances. The selection is ``backend.node_tests()``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time

PASSING_LIST = os.path.join(os.path.dirname(__file__), "..", "tests", "relay", "onnx_node_passing.txt")


def reason(exc: BaseException) -> str:
    """The first informative line of an error, for a one-line summary."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if isinstance(exc, AssertionError):
        detail = next((ln for ln in lines if ln.startswith(("Mismatched", "Output", "x and y", "("))), "")
        return f"wrong output: {lines[0] if lines else ''} {detail}".strip()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def generic(text: str) -> str:
    """``reason`` without what differs between cases of one op (node names, shapes, dtypes), so
    the cases that fail for the same cause group together."""
    text = re.sub(r"node '[^']*'", "node", text)
    text = re.sub(r"\((?:[^()]*)\)", "(..)", text)
    return re.sub(r"\b(?:b?float\w*|u?int\d\w*)\b", "<dtype>", text)[:160]


def run(tests, verbose: bool = False):
    from kiln.relay.frontend.onnx.backend import run_node_test

    outcomes = {}
    for t in tests:
        try:
            run_node_test(t)
            outcomes[t.name] = None
        except Exception as e:  # noqa: BLE001 - every failure is a data point here
            outcomes[t.name] = reason(e)
            if verbose:
                print(f"  FAIL {t.name} [{t.op_type}]: {outcomes[t.name][:300]}", flush=True)
    return outcomes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="print every failing case")
    parser.add_argument("-k", default="", help="only cases whose name contains this text")
    parser.add_argument("--write-passing", action="store_true",
                        help=f"write the passing case names to {os.path.normpath(PASSING_LIST)}")
    args = parser.parse_args(argv)

    from kiln.relay.frontend.onnx.backend import node_tests

    tests = [t for t in node_tests() if args.k in t.name]
    start = time.perf_counter()
    outcomes = run(tests, args.verbose)
    elapsed = time.perf_counter() - start
    passed = [t for t in tests if outcomes[t.name] is None]
    failing = collections.defaultdict(list)
    for t in tests:
        if outcomes[t.name] is not None:
            failing[t.op_type].append(generic(outcomes[t.name]))

    rate = len(passed) / max(len(tests), 1)
    print(f"ONNX node tests (float cases of the issue-5 ops): passed {len(passed)} / attempted {len(tests)} "
          f"= {100 * rate:.1f}%  ({elapsed:.0f} s)")
    if failing:
        print("failing op types (count: most common reason):")
        for op, reasons in sorted(failing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            common, n = collections.Counter(reasons).most_common(1)[0]
            more = f" (+{len(reasons) - n} with other reasons)" if n < len(reasons) else ""
            print(f"  {op:20s} {len(reasons):3d}: {common}{more}")
    if args.write_passing:
        if args.k:
            print("--write-passing needs the full selection (no -k)", file=sys.stderr)
            return 2
        with open(PASSING_LIST, "w") as f:
            f.write("# ONNX node tests kiln passes; tests/relay/test_onnx_backend.py runs each by name.\n"
                    "# Regenerate with: python bench/onnx_coverage.py --write-passing\n")
            f.writelines(f"{t.name}\n" for t in passed)
        print(f"wrote {len(passed)} names to {os.path.normpath(PASSING_LIST)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
