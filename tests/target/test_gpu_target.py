"""GPU targets: keys, limits with their defaults, hosts."""

import pytest

from kiln.errors import TargetError
from kiln.target import Target


@pytest.mark.parametrize("text,keys,shared", [
    ("opencl", ("opencl", "gpu"), 48 * 1024),
    ("opencl -device=mali", ("mali", "opencl", "gpu"), 32 * 1024),
    ("opencl -device=adreno", ("adreno", "opencl", "gpu"), 32 * 1024),
    ("opencl -device=mali -max_shared_memory_per_block=16384", ("mali", "opencl", "gpu"), 16384),
])
def test_opencl_keys_and_limits(text, keys, shared):
    t = Target(text)
    assert t.keys == keys
    assert t.attrs["max_shared_memory_per_block"] == shared
    assert t.max_num_threads == 256
    assert Target(str(t)) == t and str(t) == text  # defaults are not spelled out
    assert t.get_target_device_type() == 4


def test_opencl_host():
    t = Target("opencl -device=mali", host="llvm -mtriple=aarch64-linux-gnu")
    assert t.host.mtriple == "aarch64-linux-gnu" and t.kind.name == "opencl"
    assert Target("opencl -max_num_threads=1024").max_num_threads == 1024
    with pytest.raises(TargetError, match="must be a CPU target"):
        Target("opencl", host="opencl")
    with pytest.raises(TargetError, match="option -max_num_threads must be an integer"):
        Target("opencl -max_num_threads=many")
