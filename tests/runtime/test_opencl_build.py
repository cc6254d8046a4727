"""The runtime on real compiler output: tvm.build(..., target="opencl") modules run, export,
load (.so/.tar), time on the device and report bad arguments (the compiler's own tests are in
tests/codegen/test_opencl.py; these look at the loader, the hook and the device API)."""

import os
import sys

import numpy as np
import pytest

import kiln as tvm

sys.path.insert(0, os.path.dirname(__file__))
import opencl_fixture  # noqa: E402

pytestmark = pytest.mark.opencl


def _run(f, m, alpha=2.5):
    dev = tvm.cl(0)
    a = np.random.default_rng(m).uniform(size=m).astype("float32")
    c = tvm.nd.empty((m,), "float32", dev)
    f(tvm.nd.array(a, dev), c, alpha)
    np.testing.assert_allclose(c.numpy(), opencl_fixture.two_kernels_reference(a, alpha), rtol=1e-6)


@pytest.fixture(scope="module")
def two():
    return opencl_fixture.built_two_kernels()


def test_built_module_runs_with_workspace_and_sizes(two):
    [cl_mod] = [m for m in two.imported_modules if m.type_key == "opencl"]
    assert "__kernel void two_kernel0" in cl_mod.get_source()
    for m in (1000, 64, 65, 1):  # sizes not divisible by the block, and smaller than it
        _run(two, m)
    _run(two, 0)  # an empty grid launches nothing


@pytest.mark.parametrize("ext", ["so", "tar"])
def test_exported_module_loads_and_runs(two, tmp_path, ext):
    path = str(tmp_path / f"two.{ext}")
    two.export_library(path)
    loaded = tvm.runtime.load_module(path)
    [cl_mod] = [m for m in loaded.imported_modules if m.type_key == "opencl"]
    assert cl_mod.get_source() == two.imported_modules[0].get_source()
    _run(loaded, 777, alpha=-1.0)


def test_time_evaluator_on_device(two):
    dev = tvm.cl(0)
    n = 1 << 16
    a = tvm.nd.array(np.ones(n, "float32"), dev)
    c = tvm.nd.empty((n,), "float32", dev)
    res = two.time_evaluator("two", dev, number=3, repeat=2)(a, c, 1.0)
    assert len(res.results) == 2 and all(0 < r < 1 for r in res.results)
    np.testing.assert_array_equal(c.numpy(), np.full(n, 2, "float32"))


def test_arguments_on_the_wrong_device(two):
    with pytest.raises(ValueError, match=r"two: argument 'A' is on cpu\(0\), expected a opencl device"):
        two(tvm.nd.array(np.ones(4, "float32")), tvm.nd.empty((4,), "float32", tvm.cl(0)), 1.0)
