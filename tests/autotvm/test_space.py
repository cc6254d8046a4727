"""Config spaces: knob enumeration, indexing, JSON, fallbacks, and the errors templates see."""

import pytest

from kiln import autotvm, te
from kiln.autotvm.space import ConfigEntity, ConfigSpace, FallbackConfigEntity
from kiln.errors import TuningError


def test_split_policies_enumerate_what_they_promise():
    s = ConfigSpace()
    s.define_split("f", 12, num_outputs=2)
    s.define_split("p", 12, num_outputs=2, policy="power2")
    s.define_split("v", 12, num_outputs=2, policy="verbose")
    s.define_split("three", 8, num_outputs=3)
    inner = lambda name: sorted(e.size[-1] for e in s.space_map[name].entities)  # noqa: E731
    assert inner("f") == [1, 2, 3, 4, 6, 12]
    assert inner("p") == [1, 2, 4, 8]
    assert inner("v") == [1, 2, 3, 4, 6, 8, 12]
    # three-way splits of 8 with exact factors: (o, m, i) with m * i dividing 8
    assert len(s.space_map["three"]) == 10
    assert len(s) == 6 * 4 * 7 * 10


def test_filter_and_max_factor():
    s = ConfigSpace()
    s.define_split("x", 64, num_outputs=2, filter=lambda e: e.size[-1] >= 8)
    s.define_split("y", 64, num_outputs=2, max_factor=4)
    assert sorted(e.size[-1] for e in s.space_map["x"].entities) == [8, 16, 32, 64]
    assert sorted(e.size[-1] for e in s.space_map["y"].entities) == [1, 2, 4]


def test_index_round_trip_and_json():
    s = ConfigSpace()
    s.define_split("x", 16, num_outputs=2)
    s.define_reorder("r", [0, 1, 2], policy="all")
    s.define_annotate("a", [0, 1], policy="try_unroll_vec")
    s.define_knob("k", [1, "two", 3.0])
    assert len(s) == 5 * 6 * 6 * 3
    for index in (0, 1, 77, len(s) - 1):
        cfg = s.get(index)
        assert cfg.index == index
        assert s.index_of(s.knob_indices(index)) == index
        back = ConfigEntity.from_json_dict(cfg.to_json_dict())
        assert back == cfg and str(back) == str(cfg)
    with pytest.raises(TuningError, match="outside the space"):
        s.get(len(s))


def test_split_entity_applies_to_a_schedule():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    space = ConfigSpace()
    space.define_split("t", B.op.axis[0], num_outputs=3)
    entity = next(e for e in space.space_map["t"].entities if e.size[1:] == [4, 8])
    axes = entity.apply(s, B, B.op.axis[0])
    assert len(axes) == 3 and len(s[B].leaf_iter_vars) == 3


def test_fallback_defaults_and_fallback_split():
    cfg = FallbackConfigEntity()
    cfg.define_split("x", 64, num_outputs=3)
    assert cfg["x"].size == [-1, 1, 1]
    cfg.fallback_split("x", [-1, 4, 16])
    assert cfg["x"].size == [-1, 4, 16]
    cfg.fallback_split("x", [-1, 3, 5])  # not factors of 64: the closest in log scale
    assert cfg["x"].size[1:] in ([4, 4], [2, 4], [4, 8], [2, 8])
    assert cfg.is_fallback


def test_template_errors_name_the_fix():
    s = ConfigSpace()
    with pytest.raises(TuningError, match="before defining it"):
        s["nope"]
    with pytest.raises(TuningError, match="unknown policy"):
        s.define_split("x", 8, policy="fancy")
    with pytest.raises(TuningError, match="no valid choices"):
        s.define_split("x", 8, filter=lambda e: False)
    with pytest.raises(TuningError, match="no template named"):
        autotvm.task.create("test/does-not-exist", (1,), "llvm")


def test_task_has_space_flop_and_workload():
    task = autotvm.task.create("kiln/matmul", (64, 64, 64, "float32"), "llvm")
    assert task.workload == ("kiln/matmul", 64, 64, 64, "float32")
    assert task.flop == 2 * 64 ** 3
    assert set(task.config_space.knobs) == {"tile_x", "tile_y", "tile_k", "order"}
    assert len(task.config_space) > 100


def test_flop_is_counted_when_the_template_does_not():
    task = autotvm.task.create("test/add", (64,), "llvm")
    assert task.flop == 64
