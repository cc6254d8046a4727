"""Loading GPU modules: the device module from the metadata, the launch hook, .so/.tar files,
argument device checks and time_evaluator, on a hand-written module (opencl_fixture.py)."""

import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln.errors import KilnError

sys.path.insert(0, os.path.dirname(__file__))
import opencl_fixture  # noqa: E402

pytestmark = pytest.mark.opencl


def _check(mod, n=1000):
    x = np.random.default_rng(n).uniform(size=n).astype("float32")
    a = tvm.nd.array(x, tvm.cl(0))
    b = tvm.nd.empty((n,), "float32", tvm.cl(0))
    mod(a, b)
    np.testing.assert_allclose(b.numpy(), x + 1, rtol=1e-6)
    mod["scale"](a, b, 0.5)
    np.testing.assert_allclose(b.numpy(), x * 0.5, rtol=1e-6)


def test_compiled_module_runs_and_exposes_device_code():
    mod = opencl_fixture.module()
    cl_mods = [m for m in mod.imported_modules if m.type_key == "opencl"]
    assert len(cl_mods) == 1 and "add_one_kernel0" in cl_mods[0].get_source()
    _check(mod, 1000)
    _check(mod, 64)
    assert mod.load().imported_modules[0] is cl_mods[0]  # one device module, one program


@pytest.mark.parametrize("ext", ["so", "tar"])
def test_export_and_load(tmp_path, ext):
    path = str(tmp_path / f"lib_cl.{ext}")
    opencl_fixture.module().export_library(path)
    loaded = tvm.runtime.load_module(path)
    [cl_mod] = [m for m in loaded.imported_modules if m.type_key == "opencl"]
    assert cl_mod.get_source() == opencl_fixture.OPENCL_SOURCE
    _check(loaded, 333)


def test_arguments_must_live_on_the_device():
    mod = opencl_fixture.module()
    a_cpu = tvm.nd.array(np.ones(8, "float32"))
    b = tvm.nd.empty((8,), "float32", tvm.cl(0))
    with pytest.raises(ValueError, match=r"add_one: argument 'A' is on cpu\(0\), expected a opencl "
                                         r"device .*tvm.nd.array\(x, tvm.cl\(0\)\)"):
        mod(a_cpu, b)


def test_launch_errors_surface_as_exceptions():
    mod = opencl_fixture.module()
    cl_mod = mod.imported_modules[0]
    saved = cl_mod.kernels[0]["name"]
    a = tvm.nd.array(np.ones(8, "float32"), tvm.cl(0))
    b = tvm.nd.empty((8,), "float32", tvm.cl(0))
    cl_mod._built.clear()
    cl_mod.kernels[0]["name"] = "no_such_kernel"
    try:
        with pytest.raises(AttributeError, match="no_such_kernel"):
            mod(a, b)
    finally:
        cl_mod.kernels[0]["name"] = saved
        cl_mod._built.clear()
    _check(mod, 8)  # the module still works afterwards


def test_time_evaluator_times_on_the_device():
    mod = opencl_fixture.module()
    n = 1 << 16
    a = tvm.nd.array(np.ones(n, "float32"), tvm.cl(0))
    b = tvm.nd.empty((n,), "float32", tvm.cl(0))
    res = mod.time_evaluator(mod.entry_name, tvm.cl(0), number=5, repeat=3)(a, b)
    assert len(res.results) == 3 and all(0 < r < 1 for r in res.results)
    np.testing.assert_array_equal(b.numpy(), np.full(n, 2, "float32"))
    assert mod.imported_modules[0].events is None  # collection is off outside the timer
