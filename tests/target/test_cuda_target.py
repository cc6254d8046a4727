"""CUDA targets: arch spellings, keys, limits and the nvidia/... tags."""

import pytest

import kiln as tvm
from kiln.errors import TargetError


def test_cuda_target_fields():
    t = tvm.target.Target("cuda -arch=sm_90")
    assert t.kind.name == "cuda" and t.arch == "sm_90" and t.keys == ("cuda", "gpu")
    assert t.max_num_threads == 1024 and t.thread_warp_size == 32
    assert t.attrs["max_shared_memory_per_block"] == 48 * 1024
    assert tvm.target.Target("cuda -mcpu=sm_80").arch == "sm_80"
    assert tvm.target.Target(str(t)) == t


def test_nvidia_tags():
    t = tvm.target.Target("nvidia/nvidia-h100")
    assert t.kind.name == "cuda" and t.arch == "sm_90" and "gpu" in t.keys
    assert t.attrs["tag"] == "nvidia/nvidia-h100" and tvm.target.Target(str(t)) == t
    assert tvm.target.Target("nvidia/nvidia-a100 -max_num_threads=512").max_num_threads == 512
    with pytest.raises(TargetError, match="unknown target tag 'nvidia/nope'; known: .*nvidia/nvidia-h100"):
        tvm.target.Target("nvidia/nope")
