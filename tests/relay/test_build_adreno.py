"""Whole models for ``opencl -device=adreno`` (textures) on the first OpenCL device (PoCL here):
ONNX ResNet-18 and MobileNetV2 (32 x 32, 10 classes) vs onnxruntime (1e-4), the convolution
kernels reading images, and texture builds equal to buffer builds."""

import functools

import numpy as np
import pytest
from helpers.ranking import allclose_bound, assert_ranking_kept
from onnx_models import mobilenet_v2, resnet18, run_ort

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

pytestmark = pytest.mark.opencl

TOL = dict(rtol=1e-4, atol=1e-4)
MODELS = {"resnet18": lambda: resnet18(image=32, classes=10),
          "mobilenet_v2": lambda: mobilenet_v2(image=32, classes=10)}
ADRENO = "opencl -device=adreno"


@functools.cache
def built(name: str, target: str = ADRENO, accumulation: str | None = None, textures: bool = True):
    """(inputs, lib, onnxruntime outputs); with ``accumulation``, converted to float16 first;
    ``textures=False``: the same kernels on buffers (relay.backend.adreno_textures)."""
    model, inputs = MODELS[name]()
    mod, params = relay.frontend.from_onnx(model)
    if accumulation:
        mod = relay.transform.InferType()(mod)
        mod = relay.transform.ToMixedPrecision("float16", accumulation_dtype=accumulation)(mod)
    with tvm.transform.PassContext(opt_level=3, config={"relay.backend.adreno_textures": textures}):
        lib = relay.build(mod, target=tvm.target.Target(target, host="llvm"), params=params)
    return inputs, lib, run_ort(model, inputs)


def outputs(lib, inputs) -> list:
    g = graph_executor.GraphModule(lib["default"](tvm.cl(0)))
    g.set_input(**inputs)
    g.run()
    return [g.get_output(i).numpy() for i in range(g.get_num_outputs())]


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_onnxruntime(name):
    inputs, lib, expected = built(name)
    got = outputs(lib, inputs)
    assert len(got) == len(expected)
    for g, want in zip(got, expected):
        np.testing.assert_allclose(g, want, **TOL)


@pytest.mark.parametrize("name", list(MODELS))
def test_texture_and_buffer_builds_agree(name):
    inputs, lib, _ = built(name)
    _, plain, _ = built(name, textures=False)
    assert "image2d_t" not in plain.get_lib().imported_modules[0].get_source()
    for a, b in zip(outputs(lib, inputs), outputs(plain, inputs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def check_float16(got, want):
    """A float16 build against float32 onnxruntime: within the error it accepts (logits move by
    about 2% of their range), and the class order wherever that error cannot explain a swap."""
    bound = dict(rtol=1e-2, atol=3e-2 * np.abs(want).max())
    print(assert_ranking_kept(got[0], want[0], allclose_bound(want[0], **bound)))
    np.testing.assert_allclose(got, want, **bound)

@pytest.mark.parametrize("name,accumulation", [("mobilenet_v2", "float32"), ("mobilenet_v2", "float16"),
                                               ("resnet18", "float16")])
def test_float16_model_keeps_top5(name, accumulation):
    # Half images and buffers, float arithmetic (PoCL has no cl_khr_fp16). Against float32
    # onnxruntime the logits move by about 2% of their range, as kiln's CPU float16 build's do.
    inputs, lib, expected = built(name, ADRENO, accumulation)
    src = lib.get_lib().imported_modules[0].get_source()
    assert "vload_half" in src and "image2d_t" in src
    got = outputs(lib, inputs)[0]
    want = expected[0]
    assert got.dtype == want.dtype
    check_float16(got, want)


def test_conv_kernels_read_images():
    _, lib, _ = built("mobilenet_v2")
    dev_mods = [m for m in lib.get_lib().imported_modules if m.type_key == "opencl"]
    assert len(dev_mods) == 1
    src = dev_mods[0].get_source()
    assert src.count("__read_only image2d_t") >= 2 and "__write_only image2d_t" in src
    assert "read_imagef(" in src and "write_imagef(" in src


def test_target_keys():
    t = tvm.target.Target(ADRENO, host="llvm -mtriple=aarch64-linux-android")
    assert t.keys[:3] == ("adreno", "opencl", "gpu")
    assert "aarch64-linux-android" in str(t.host)


def test_c_runtime_runs_texture_package(tmp_path):
    # kiln_run (the C graph executor) makes the images through clCreateImage (hook request -3).
    import os
    import subprocess

    from kiln.driver.tvmc.compiler import export_package

    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    out = str(tmp_path / "crt")
    made = subprocess.run(["make", "-s", "-j2", "-C", os.path.join(root, "src", "runtime"), f"OUT={out}"],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    inputs, lib, expected = built("mobilenet_v2")
    export_package(lib, str(tmp_path / "adreno.tar"))
    np.savez(tmp_path / "in.npz", **inputs)
    run = subprocess.run([os.path.join(out, "kiln_run"), "--package", str(tmp_path / "adreno.tar"), "--device", "cl",
                          "--input", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    got = np.load(tmp_path / "out.npz")
    for i, want in enumerate(expected):
        np.testing.assert_allclose(got[f"output_{i}"], want, **TOL)


def test_tvmc_mixed_precision_package_runs_on_textures(tmp_path):
    # tvmc compile --target "opencl -device=adreno, llvm" --mixed-precision, run by the Python executor.
    import onnx

    from kiln.driver.tvmc.compiler import compile_model
    from kiln.driver.tvmc.model import load

    model, inputs = MODELS["mobilenet_v2"]()
    onnx.save(model, str(tmp_path / "m.onnx"))
    package = compile_model(load(str(tmp_path / "m.onnx")), "opencl -device=adreno, llvm",
                            package_path=str(tmp_path / "m.tar"), mixed_precision=True,
                            mixed_precision_acc_type="float32")
    import tarfile
    with tarfile.open(package.package_path) as tar:
        tar.extractall(tmp_path / "pkg", filter="data")
    lib = tvm.runtime.load_module(str(tmp_path / "pkg" / "mod.so"))
    src = [m for m in lib.imported_modules if m.type_key == "opencl"][0].get_source()
    assert "image2d_t" in src and "vload_half" in src
    g = graph_executor.create(open(tmp_path / "pkg" / "mod.json").read(), lib, tvm.cl(0))
    g.load_params(open(tmp_path / "pkg" / "mod.params", "rb").read())
    g.set_input(**inputs)
    g.run()
    got, want = g.get_output(0).numpy(), run_ort(model, inputs)[0]
    check_float16(got, want)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_tensors_between_operators_are_images(name):
    # NCHW4c activations and OIHW4o weights live in images between kernels (mod.json storage_scope).
    import json

    _, lib, _ = built(name)
    attrs = json.loads(lib.get_graph_json())["attrs"]
    scopes = attrs["storage_scope"][1]
    assert len(scopes) == len(attrs["storage_id"][1])
    convs = sum(1 for s in scopes if s == "global.texture-weight")
    assert convs >= 10 and scopes.count("global.texture") >= convs - 1


@pytest.mark.heavy
@pytest.mark.parametrize("name", list(MODELS))
def test_full_size_model_on_graph_textures(name):
    # 224x224, 1000 classes: float32 vs onnxruntime (1e-4); float16, both accumulations, keeps the top-5.
    from onnx_models import mobilenet_v2, resnet18

    make = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}[name]
    for accumulation in (None, "float32", "float16"):
        # float16: a random MobileNetV2 amplifies rounding through its linear projections; the
        # calmer one (projection batch norms scaled by 0.5, as test_build_cuda does) keeps its order.
        calm = {"project_gamma": 0.5} if accumulation and name == "mobilenet_v2" else {}
        model, inputs = make(image=224, classes=1000, **calm)
        want = run_ort(model, inputs)[0]
        mod, params = relay.frontend.from_onnx(model)
        if accumulation:
            mod = relay.transform.InferType()(mod)
            mod = relay.transform.ToMixedPrecision("float16", accumulation_dtype=accumulation)(mod)
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=tvm.target.Target(ADRENO, host="llvm"), params=params)
        got = outputs(lib, inputs)[0]
        if accumulation is None:
            np.testing.assert_allclose(got, want, **TOL)
        else:
            check_float16(got, want)


# -- NHWC models (Keras .h5, as document 002 compiles): converted to the NCHW4c texture path ------

def _keras_resnet(tmp_path, image=32):
    """(model path, numpy forward) of the Keras-style residual net (tests/relay/frontend)."""
    import os
    import sys
    pytest.importorskip("h5py", reason="the Keras frontend reads .h5 files with h5py")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "frontend"))
    from test_keras_frontend import resnet_like
    path = str(tmp_path / "resnet50.h5")
    return path, resnet_like(path, seed=5, image=image)


def _texture_kernels(lib) -> list:
    src = [m for m in lib.get_lib().imported_modules if m.type_key == "opencl"][0].get_source()
    return [k for k in src.split("__kernel void")[1:] if "image2d_t" in k]


def test_nhwc_keras_model_takes_the_texture_path_and_matches_numpy(tmp_path):
    from kiln.driver import tvmc
    path, forward = _keras_resnet(tmp_path)
    model = tvmc.load(path)
    x = np.random.default_rng(6).standard_normal((1, 32, 32, 3)).astype("float32")
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(model.mod, target=tvm.target.Target(ADRENO, host="llvm"), params=model.params)
    convs = [k for k in _texture_kernels(lib) if "conv2d" in k.split("(")[0]]
    assert len(convs) >= 5  # every conv but the stem's (a per-operator one packing its own images) and more
    scopes = __import__("json").loads(lib.get_graph_json())["attrs"]["storage_scope"][1]
    assert scopes.count("global.texture") >= 4 and scopes.count("global.texture-weight") >= 5
    g = graph_executor.GraphModule(lib["default"](tvm.cl(0)))
    g.set_input("input_1", x)
    g.run()
    np.testing.assert_allclose(g.get_output(0).numpy(), forward(x), rtol=1e-4, atol=1e-6)


def test_nhwc_keras_model_conv_tasks_are_tunable_and_the_build_uses_them(tmp_path, caplog):
    import logging
    import time

    from kiln import autotvm
    from kiln.autotvm import record
    from kiln.autotvm.measure import MeasureInput, MeasureResult
    from kiln.driver import tvmc
    path, _ = _keras_resnet(tmp_path, image=16)
    model = tvmc.load(path)
    target = tvm.target.Target(ADRENO, host="llvm")
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        tasks = autotvm.task.extract_from_program(model.mod["main"], target=target, params=model.params)
    assert not [r for r in caplog.records if "no tunable template" in r.getMessage()]
    names = [t.name for t in tasks]
    assert names.count("conv2d_NCHW4c.adreno") >= 5 and "conv2d_nchw.adreno" in names  # + the stem
    rows = []
    for t in tasks:  # a config other than the default for each: the build must read every one
        space = t.config_space
        other = next(i for i in range(len(space)) if i != space.default_index())
        rows.append((MeasureInput(t.target, t, space.get(other)), MeasureResult((1e-4,), 0, 0.1, time.time())))
    log = str(tmp_path / "adreno.log")
    record.save_to_file(log, rows)
    with tvm.transform.PassContext(opt_level=3):
        untuned = relay.build(model.mod, target=target, params=model.params)
        with autotvm.apply_history_best(log):
            tuned = relay.build(model.mod, target=target, params=model.params)
    assert set(tuned.kernel_workloads.values()) == {t.workload for t in tasks}
    assert _texture_kernels(tuned) != _texture_kernels(untuned)


@pytest.mark.heavy
def test_full_size_keras_resnet50_nhwc_tunes_and_builds_on_textures(tmp_path):
    # Document 002's model: Keras ResNet-50, NHWC, 224x224, 1000 classes.
    import os
    pytest.importorskip("h5py")
    import importlib.util
    spec = importlib.util.spec_from_file_location(  # not on sys.path: tests/driver has a conftest of its own
        "keras_resnet50", os.path.join(os.path.dirname(__file__), "..", "driver", "keras_resnet50.py"))
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)

    from kiln import autotvm
    from kiln.driver import tvmc
    path = str(tmp_path / "resnet50.h5")
    builder.resnet50_h5(path)
    model = tvmc.load(path)
    target = tvm.target.Target(ADRENO, host="llvm")
    tasks = autotvm.task.extract_from_program(model.mod["main"], target=target, params=model.params)
    convs = [t for t in tasks if "conv2d" in t.name]
    assert len(convs) >= 20 and sum(t.name == "conv2d_NCHW4c.adreno" for t in convs) >= 19
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(model.mod, target=target, params=model.params)
        ref = relay.build(model.mod, target="llvm", params=model.params)
    assert len(_texture_kernels(lib)) >= 20
    x = np.random.default_rng(0).uniform(0, 1, (1, 224, 224, 3)).astype("float32")
    outs = []
    for built_lib, dev in ((lib, tvm.cl(0)), (ref, tvm.cpu(0))):
        g = graph_executor.GraphModule(built_lib["default"](dev))
        g.set_input("input_1", x)
        g.run()
        outs.append(g.get_output(0).numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-3, atol=1e-6)
