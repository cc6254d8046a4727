"""CPU facts come from what LLVM compiles for a -mcpu / -mattr, not from the CPU's name."""

import pytest

from kiln.errors import TargetError
from kiln.target import Target
from kiln.target.cpu_facts import cpu_facts, host_cpu

X86 = "llvm -mtriple=x86_64-linux-gnu"
AVX512 = {"sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "f16c"}
AVX2 = {"sse2", "avx", "avx2", "fma", "f16c"}
NEON64 = {"neon", "fma", "fp16"}
# Sapphire Rapids' int8 and bfloat16 units: VNNI (the zmm form hides AVX-VNNI), AVX512-BF16, AMX
SPR_EXTRA = {"avx512vnni", "avx512bf16", "amx-int8", "amx-bf16"}

# target -> (float32 lanes, FMA, vector registers, features); checked against the CPUs' manuals.
EXPECTED = {
    f"{X86} -mcpu=x86-64": (4, False, 16, {"sse2"}),
    f"{X86} -mcpu=x86-64-v2": (4, False, 16, {"sse2"}),
    f"{X86} -mcpu=x86-64-v3": (8, True, 16, AVX2),
    f"{X86} -mcpu=x86-64-v4": (16, True, 32, AVX512),
    f"{X86} -mcpu=haswell": (8, True, 16, AVX2),
    f"{X86} -mcpu=broadwell": (8, True, 16, AVX2),
    f"{X86} -mcpu=core-avx2": (8, True, 16, AVX2),
    f"{X86} -mcpu=alderlake": (8, True, 16, AVX2 | {"avxvnni"}),  # VEX-encoded int8 dot products
    f"{X86} -mcpu=znver2": (8, True, 16, AVX2 | {"sse4a"}),  # AMD's own: Intel CPUs cannot run its code
    f"{X86} -mcpu=znver3": (8, True, 16, AVX2 | {"sse4a"}),
    f"{X86} -mcpu=znver4": (16, True, 32, AVX512 | {"avx512vnni", "avx512bf16", "sse4a"}),
    f"{X86} -mcpu=skylake-avx512": (16, True, 32, AVX512),
    f"{X86} -mcpu=tigerlake": (16, True, 32, AVX512 | {"avx512vnni"}),
    f"{X86} -mcpu=sapphirerapids": (16, True, 32, AVX512 | SPR_EXTRA | {"avx512fp16"}),  # half arithmetic
    f"{X86} -mcpu=x86-64-v4 -mattr=+avx512fp16": (16, True, 32, AVX512 | {"avx512fp16"}),
    # Disabling avx512f takes every AVX-512 extension with it; AVX2 and FMA stay.
    f"{X86} -mcpu=skylake-avx512 -mattr=-avx512f": (8, True, 16, AVX2),
    f"{X86} -mcpu=sapphirerapids -mattr=-avx512fp16": (16, True, 32, AVX512 | SPR_EXTRA),
    f"{X86} -mcpu=znver4 -mattr=-avx512f": (8, True, 16, AVX2 | {"sse4a"}),
    f"{X86} -mcpu=haswell -mattr=-fma": (8, False, 16, {"sse2", "avx", "avx2", "f16c"}),
    f"{X86} -mcpu=haswell -mattr=-f16c": (8, True, 16, {"sse2", "avx", "avx2", "fma"}),
    f"{X86} -mcpu=sandybridge": (8, False, 16, {"sse2", "avx"}),  # AVX without AVX2 (128-bit ints) or F16C
    "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72": (4, True, 32, NEON64),
    "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53": (4, True, 32, NEON64),
    "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76": (4, True, 32, NEON64 | {"fullfp16", "dotprod"}),  # ARMv8.2
    "llvm -mtriple=aarch64-linux-gnu -mattr=+fullfp16": (4, True, 32, NEON64 | {"fullfp16"}),
    "llvm -mtriple=armv7l-linux-gnueabihf -mattr=+neon": (4, False, 16, {"neon"}),
    "llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a7": (4, True, 16, {"neon", "fma"}),
}


@pytest.mark.parametrize("target", list(EXPECTED))
def test_facts_of_named_cpus(target):
    lanes, fma, registers, features = EXPECTED[target]
    f = cpu_facts(target)
    assert (f.lanes("float32"), f.has_fma, f.vector_registers, set(f.features)) == (lanes, fma, registers, features)
    assert f.lanes("float64") == lanes // 2


def test_lanes_per_dtype_follow_the_integer_units():
    # Sandy Bridge: 256-bit float adds, integer adds only 128 bits wide (AVX2 added them).
    f = cpu_facts(f"{X86} -mcpu=sandybridge")
    assert (f.lanes("float32"), f.lanes("int32"), f.lanes("int8")) == (8, 4, 16)
    # Knights Landing: AVX-512F without BW, so 16-bit and 8-bit integers stay at 256 bits.
    f = cpu_facts(f"{X86} -mcpu=knl")
    assert (f.lanes("float32"), f.lanes("int32"), f.lanes("int16"), f.lanes("uint8")) == (16, 16, 16, 32)
    assert "avx512bw" not in f.features
    with pytest.raises(TargetError, match="no vector width known for dtype 'handle'"):
        f.lanes("handle")


def test_plain_llvm_is_this_machine_as_llvm_sees_it():
    cpu, features = host_cpu()
    f = cpu_facts("llvm")
    assert f.cpu == cpu
    enabled = {x[1:] for x in features.split(",") if x.startswith("+")}
    assert ("avx512f" in f.features) == ("avx512f" in enabled)
    assert ("avx2" in f.features) == ("avx2" in enabled)
    assert ("f16c" in f.features) == ("f16c" in enabled)
    assert ("avx512fp16" in f.features) == ("avx512fp16" in enabled)
    assert f.has_fma == ("fma" in enabled or "neon" in enabled or "fp-armv8" in enabled)
    assert f.lanes() == {512: 16, 256: 8, 128: 4}[f.float_bits]


def test_the_current_target_is_the_default_and_gpu_targets_answer_for_their_host():
    with Target(f"{X86} -mcpu=haswell"):
        assert cpu_facts().lanes() == 8
    gpu = Target("opencl", host=f"{X86} -mcpu=skylake-avx512")
    assert cpu_facts(gpu).lanes() == 16
    assert cpu_facts(f"{X86} -mcpu=haswell") is cpu_facts(Target(f"{X86} -mcpu=haswell"))  # cached


def test_schedule_api_reads_the_same_facts():
    from kiln.topi.cpu import tile_fits, vector_lanes, vector_registers

    assert vector_lanes(32, Target(f"{X86} -mcpu=core-avx2")) == 8
    assert vector_lanes(32, Target(f"{X86} -mcpu=tigerlake")) == 16
    assert vector_lanes(32, Target(f"{X86} -mcpu=skylake-avx512 -mattr=-avx512f")) == 8
    assert vector_registers(Target(f"{X86} -mcpu=znver3")) == 16
    assert tile_fits(6, 2, 16) and not tile_fits(7, 2, 16) and not tile_fits(4, 8, 16)
