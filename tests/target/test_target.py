"""Target strings: parsing, keys, hosts, round trips, errors, the current-target context."""

import pytest

import kiln as tvm
from kiln.errors import TargetError
from kiln.target import Target

ROUND_TRIP = [
    "llvm", "llvm -mcpu=native", "llvm -mtriple=aarch64-linux-gnu",
    "llvm -mtriple=armv7l-linux-gnueabihf -mattr=+neon", "llvm -mtriple=aarch64-linux-android",
    "llvm -mcpu=cortex-a53 -mtriple=aarch64-linux-gnu -mattr=+neon,-crc",
    "llvm -device=arm_cpu -model=rasp4b -num-cores=4", "c", "opencl -device=adreno", "cuda -arch=sm_90",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(text):
    t = Target(text)
    assert Target(str(t)) == t
    assert str(Target(str(t))) == str(t)


def test_fields():
    t = Target("llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a72 -mattr=+neon,-vfp4")
    assert t.kind.name == "llvm" and t.mtriple == "armv7l-linux-gnueabihf" and t.mcpu == "cortex-a72"
    assert t.mattr == ("+neon", "-vfp4") and t.keys == ("cpu",)
    assert Target("llvm -device=arm_cpu").keys == ("arm_cpu", "cpu")
    assert Target("cuda").keys == ("cuda", "gpu") and Target("opencl").keys == ("opencl", "gpu")
    assert Target("opencl -device=adreno").keys == ("adreno", "opencl", "gpu")
    assert Target("llvm -num-cores=4").attrs["num-cores"] == 4


def test_host_forms():
    t = Target("opencl", host="llvm -mtriple=aarch64-linux-android")
    assert t.host.mtriple == "aarch64-linux-android" and t.kind.name == "opencl"
    t2 = Target(Target("cuda"), host=Target("llvm"))
    assert t2.host.kind.name == "llvm"
    t3 = Target({"kind": "opencl", "device": "adreno", "host": {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}})
    assert t3.keys[0] == "adreno" and t3.host.mtriple == "aarch64-linux-gnu"
    with pytest.raises(TargetError, match="must be a CPU target"):
        Target("cuda", host="opencl")


def test_helpers():
    assert tvm.target.arm_cpu("rasp4b").keys == ("arm_cpu", "cpu")
    assert tvm.target.arm_cpu("pixel2").mtriple.endswith("android")
    assert tvm.target.cuda(arch="sm_80").arch == "sm_80"


def test_errors_name_the_input():
    with pytest.raises(TargetError, match=r"unknown target kind 'vulkan'.*known kinds: llvm, c, cuda, opencl"):
        Target("vulkan")
    with pytest.raises(TargetError, match=r"unknown option -foo for kind 'llvm'; known options: .*-mtriple"):
        Target("llvm -foo=1")
    with pytest.raises(TargetError, match="-num-cores must be an integer"):
        Target("llvm -num-cores=many")
    with pytest.raises(TargetError, match="must look like -name=value"):
        Target("llvm mcpu")


def test_current_context():
    assert Target.current() is None
    with Target("llvm -mcpu=cortex-a53") as t:
        assert Target.current() is t
        with Target("cuda"):
            assert Target.current().kind.name == "cuda"
        assert Target.current() is t
    assert Target.current() is None
    with pytest.raises(TargetError):
        Target.current(allow_none=False)
