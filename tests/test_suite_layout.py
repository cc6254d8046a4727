"""The test tree itself: pytest imports test files by basename (no packages), so two files of one
name in different folders stop collection of the whole suite."""

from collections import defaultdict
from pathlib import Path


def test_test_file_basenames_are_unique():
    seen = defaultdict(list)
    for path in Path(__file__).parent.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(Path(__file__).parent)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
