"""The configuration and the instruction encoding: Python encode, C decode, Python decode agree."""

import numpy as np
import pytest

from kiln import vta
from kiln.vta import isa, simulator


def test_env_names():
    env = vta.get_env()
    assert (env.BATCH, env.BLOCK_IN, env.BLOCK_OUT) == (1, 16, 16)
    assert (env.inp_dtype, env.wgt_dtype, env.acc_dtype) == ("int8", "int8", "int32")
    assert env.inp_scope == "local.inp_buffer" and env.acc_scope == "local.acc_buffer"
    assert (env.INP_DEPTH, env.WGT_DEPTH, env.ACC_DEPTH, env.UOP_DEPTH) == (2048, 1024, 2048, 8192)
    assert env.target.kind.name == "ext_dev" and "vta" in env.target.keys
    assert env.target.get_target_device_type() == 12


def _random_insn(rng, env, opcode):
    lay = isa.layout(env)[opcode]
    fields = {}
    for name, bits in lay:
        if name == "opcode":
            continue
        if name == "imm":
            fields[name] = int(rng.integers(-(1 << 15), 1 << 15))
        else:
            fields[name] = int(rng.integers(0, 1 << bits))
    return isa.Insn(opcode, **fields)


@pytest.mark.parametrize("cfg", [{}, {"LOG_BLOCK": 5, "LOG_BATCH": 1, "LOG_WGT_BUFF_SIZE": 19}])
def test_encode_decode_round_trip(cfg):
    env = vta.get_env().replace(**cfg) if cfg else vta.get_env()
    rng = np.random.default_rng(0)
    insns = [_random_insn(rng, env, op) for op in (isa.LOAD, isa.STORE, isa.GEMM, isa.ALU, isa.FINISH) for _ in range(20)]
    words = isa.encode(insns, env)
    assert isa.decode(words, env) == insns
    for insn, word in zip(insns, words):
        got = simulator.c_decode(env.export(), word)  # the C simulator's reading
        for name, value in insn.fields.items():
            assert got[name] == value, (insn, name)
        assert got["opcode"] == insn.opcode


def test_uop_round_trip():
    env = vta.get_env()
    gemm = [(1, 2, 3), (env.ACC_DEPTH - 1, env.INP_DEPTH - 1, env.WGT_DEPTH - 1), (0, 0, 0)]
    assert isa.decode_uops(isa.encode_uops(gemm, env, isa.GEMM), env, isa.GEMM) == gemm
    alu = [(5, 7), (env.ACC_DEPTH - 1, 0)]
    assert isa.decode_uops(isa.encode_uops(alu, env, isa.ALU), env, isa.ALU) == alu


def test_field_overflow_refused():
    env = vta.get_env()
    with pytest.raises(vta.VTAConfigError, match="field uop_end=.* does not fit"):
        isa.encode([isa.Insn(isa.GEMM, uop_end=1 << 20)], env)


@pytest.mark.parametrize("change, match", [
    ({"LOG_INP_BUFF_SIZE": 3}, r"LOG_INP_BUFF_SIZE=3 \(8 B\) is smaller than one inp block \(16 B\)"),
    ({"INP_BUFF_SIZE": 30000}, r"INP_BUFF_SIZE=30000 is not a power of two"),
    ({"LOG_ACC_WIDTH": 4}, r"only int8 x int8 -> int32"),
    ({"LOG_ACC_BUFF_SIZE": 24}, r"GEMM micro-op needs .* index bits"),
    ({"LOG_BLOCKS": 4}, r"unknown key 'LOG_BLOCKS'"),
])
def test_invalid_config_one_line(change, match):
    cfg = {**vta.get_env().export(), **change}
    if "INP_BUFF_SIZE" in change:
        del cfg["LOG_INP_BUFF_SIZE"]
    with pytest.raises(vta.VTAConfigError, match=match) as info:
        vta.Environment(cfg)
    assert "\n" not in str(info.value)


def test_environment_context():
    big = vta.get_env().replace(LOG_BLOCK_IN=5, LOG_BLOCK_OUT=5)
    with big:
        assert vta.get_env().BLOCK_IN == 32
    assert vta.get_env().BLOCK_IN == 16
