"""relay.build through the build cache (kiln/relay/backend/build_cache.py): a hit skips lowering
and still computes the reference's result; a changed config, target or graph is a miss; a
damaged entry is rebuilt; another process finds the entry this one wrote; two processes
building the same model at once both succeed."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln as tvm
from kiln import cache, config, relay
from kiln.contrib import graph_executor
from kiln.relay import reference
from kiln.relay.backend import build_cache, dispatch
from kiln.relay.backend.te_compiler import TECompiler

RNG = np.random.default_rng(7)


def net(channels=8):
    x = relay.var("data", shape=(1, 3, 12, 12))
    w, b = relay.var("w", shape=(channels, 3, 3, 3)), relay.var("b", shape=(channels,))
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, padding=(1, 1)), b))
    wd = relay.var("wd", shape=(5, channels * 144))
    z = relay.nn.dense(relay.nn.batch_flatten(y), wd)
    mod = tvm.IRModule.from_expr(relay.Function([x, w, b, wd], z))
    params = {"w": RNG.standard_normal((channels, 3, 3, 3)).astype("float32"),
              "b": RNG.standard_normal(channels).astype("float32"),
              "wd": (RNG.standard_normal((5, channels * 144)) * 0.05).astype("float32")}
    return mod, params


MOD, PARAMS = net()
DATA = RNG.standard_normal((1, 3, 12, 12)).astype("float32")
WANT = reference.run(MOD, {"data": DATA}, PARAMS)


def build(mod=MOD, params=PARAMS, target="llvm"):
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target=target, params=params)


def run(lib):
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(data=DATA)
    m.run()
    return m.get_output(0).numpy()


@pytest.fixture
def cache_dir(tmp_path):
    with config.override(cache_dir=str(tmp_path)):
        yield tmp_path / cache.SUBDIR


@pytest.fixture
def lowering(monkeypatch):
    """Counts the kernels lowered (TE -> TIR): zero means everything came from the cache."""
    calls = []
    real = TECompiler._lower_te

    def counted(self, *args):
        calls.append(args[-1])
        return real(self, *args)

    monkeypatch.setattr(TECompiler, "_lower_te", counted)
    return calls


def entries(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_hit_skips_lowering_and_matches_the_reference(cache_dir, lowering):
    cold = build()
    assert len(lowering) == 3 and len(entries(cache_dir)) == 1
    np.testing.assert_allclose(run(cold), WANT, rtol=1e-4, atol=1e-4)
    lowering.clear()
    warm = build()
    assert lowering == []
    np.testing.assert_allclose(run(warm), WANT, rtol=1e-4, atol=1e-4)
    assert warm.get_lib().function_names() == cold.get_lib().function_names()
    assert warm.get_lib().get_source("ll") == cold.get_lib().get_source("ll")
    assert "tvmgen_default_fused_nn_dense" in warm.get_lib().get_source("asm")


def test_config_target_and_graph_changes_are_misses(cache_dir, lowering):
    build()
    with dispatch.use_config_provider(lambda op, wkl, tgt: {"tile_ow": 2} if op == "nn.conv2d" else None):
        tuned = build()
    assert len(entries(cache_dir)) == 2 and len(lowering) == 6
    np.testing.assert_allclose(run(tuned), WANT, rtol=1e-4, atol=1e-4)
    build(target="llvm -mcpu=haswell")  # AVX2: runs here and on any x86-64 CI machine
    assert len(entries(cache_dir)) == 3
    wider, wider_params = net(channels=16)
    build(wider, wider_params)
    assert len(entries(cache_dir)) == 4
    other_params = {k: v + 1 for k, v in PARAMS.items()}  # weights are graph params, not kernel code
    lowering.clear()
    np.testing.assert_allclose(run(build(MOD, other_params)), reference.run(MOD, {"data": DATA}, other_params),
                               rtol=1e-4, atol=1e-4)
    assert lowering == [] and len(entries(cache_dir)) == 4


def test_key_covers_target_cpu_and_kernel_description():
    parts = [build_cache.kernel_part("k", (("call", "nn.relu"),), None, None)]
    keys = {build_cache.module_key(tvm.target.Target(t), parts) for t in
            ("llvm -mcpu=haswell", "llvm -mcpu=znver3", "llvm -mcpu=skylake-avx512",
             "llvm -mtriple=aarch64-linux-gnu")}
    assert len(keys) == 4 and None not in keys
    haswell = tvm.target.Target("llvm -mcpu=haswell")
    tuned = [build_cache.kernel_part("k", (("call", "nn.relu"),), None, {"tile": [1, 4]})]
    assert build_cache.module_key(haswell, tuned) not in keys
    with config.override(cache_dir="off"):
        assert build_cache.module_key(haswell, parts) is None
    with config.override(debug=2):  # the user wants to see the IR of every pass: build it
        assert build_cache.module_key(haswell, parts) is None


def test_damaged_entry_is_rebuilt(cache_dir, lowering):
    build()
    (path,) = cache_dir.iterdir()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    lowering.clear()
    np.testing.assert_allclose(run(build()), WANT, rtol=1e-4, atol=1e-4)
    assert len(lowering) == 3 and path.read_bytes() == data


def _builder(folder, seed: int, hit_only: bool) -> subprocess.Popen:
    """A fresh interpreter (its own string-hash seed) that builds and runs the net; with
    ``hit_only`` it fails if any kernel is lowered."""
    code = textwrap.dedent(f"""
        import json
        from kiln.relay.backend.te_compiler import TECompiler
        import test_build_cache as t
        if {hit_only}:
            TECompiler._lower_te = lambda *a: (_ for _ in ()).throw(AssertionError("lowered on a hit"))
        print(json.dumps(t.run(t.build()).tolist()))
    """)
    env = {**os.environ, "KILN_CACHE_DIR": str(folder), "PYTHONHASHSEED": str(seed),
           "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _result(proc) -> np.ndarray:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    return np.array(json.loads(out))


def test_another_process_hits_the_entry(cache_dir, tmp_path):
    build()
    np.testing.assert_allclose(_result(_builder(tmp_path, 99, hit_only=True)), WANT, rtol=1e-4, atol=1e-4)


def test_two_processes_building_the_same_model(cache_dir, tmp_path):
    """Both start on an empty cache, so both lower and write the same entry at about the same
    time: both builds work and one whole entry is left, which a third build hits."""
    procs = [_builder(tmp_path, seed, hit_only=False) for seed in (1, 2)]
    for proc in procs:
        np.testing.assert_allclose(_result(proc), WANT, rtol=1e-4, atol=1e-4)
    assert len(entries(cache_dir)) == 1
    np.testing.assert_allclose(_result(_builder(tmp_path, 3, hit_only=True)), WANT, rtol=1e-4, atol=1e-4)
