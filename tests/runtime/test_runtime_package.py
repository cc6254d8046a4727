"""The runtime package on a device: tools/build_runtime_package.sh unpacked into a fresh venv
that holds numpy and nothing else (the compiler's files are physically absent), running what
the compiler exported, locally and through the package's RPC server (issue 34).

Device environments, as in pyproject's runtime-* extras: numpy only (LLVM .so modules,
graph_executor, oneDNN-offloaded graphs, the RPC server, which also serves on document 001's
stand-in numpy.py); + pyopencl (OpenCL modules on PoCL, locally and served); + cuda-bindings without NVRTC (CUDA
modules up to the first launch; the launch on a GPU). The C runtime half: the package built with
this machine's C runtime runs a tvmc package (plain, oneDNN-offloaded, OpenCL on PoCL) with
kiln_run and serves a client with kiln_rpc, with no compiler on PATH (PoCL's own linker aside).
The venv links the packages from this test's own environment instead of downloading them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "rpc"))
import rpc_services as svc  # noqa: E402

SITE = Path(sysconfig.get_paths()["purelib"])
EXTRAS = {  # device environment -> the distributions it links (code and metadata) from this environment
    "numpy": ["numpy", "numpy.libs", "numpy-*.dist-info"],
    "opencl": ["pyopencl*", "pytools*", "platformdirs*", "siphash24*", "typing_extensions*"],
    "cuda": ["cuda", "cuda_bindings*", "cuda_pathfinder*"],  # cuda-bindings; nvidia/ (NVRTC) left out
}

# Every device script starts by proving the compiler is not there.
PROLOGUE = """
import importlib.util, sys
import kiln
assert kiln.__file__.startswith({pkg!r}), kiln.__file__
for name in ("kiln.codegen", "kiln.ir", "kiln.te", "kiln.tir", "kiln.relay", "kiln.target", "kiln.topi",
             "kiln.autotvm", "kiln.driver", "llvmlite", "onnx", "onnxruntime"):
    assert importlib.util.find_spec(name) is None, name + " is importable on the device"
import numpy as np
import kiln as tvm
"""


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    """(run(script, extras) -> stdout, env(extras) -> environment, package dir)."""
    base = tmp_path_factory.mktemp("device")
    subprocess.run(["sh", str(ROOT / "tools" / "build_runtime_package.sh"), str(base / "rt.tar.gz")],
                   check=True, capture_output=True)
    subprocess.run(["tar", "-xzf", str(base / "rt.tar.gz"), "-C", str(base)], check=True)
    pkg = base / "kiln_runtime" / "python"
    shipped = {p.relative_to(pkg).parts[1] for p in (pkg / "kiln").rglob("*.py") if len(p.relative_to(pkg).parts) > 2}
    assert shipped == {"runtime", "rpc", "exec", "contrib"}, shipped
    assert not (pkg / "kiln" / "exec" / "tune_cli.py").exists()
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    extras_dirs = {}
    for extra, names in EXTRAS.items():
        target = site if extra == "numpy" else base / f"extra-{extra}"
        target.mkdir(exist_ok=True)
        for pattern in names:
            found = list(SITE.glob(pattern))
            if not found and extra == "numpy":
                pytest.skip(f"numpy is not installed in {SITE}")
            for src in found:
                (target / src.name).symlink_to(src)
        extras_dirs[extra] = target
    python = str(venv / "bin" / "python")

    def env(*extras: str) -> dict:
        path = [str(pkg)] + [str(extras_dirs[e]) for e in extras]
        out = {"PATH": os.environ["PATH"], "HOME": str(base), "PYTHONPATH": os.pathsep.join(path),
               "KILN_CACHE_DIR": str(base / "cache")}
        for key in ("OCL_ICD_VENDORS", "POCL_DEVICES", "LD_LIBRARY_PATH"):
            if key in os.environ:
                out[key] = os.environ[key]
        return out

    def run(script: str, *extras: str) -> str:
        code = PROLOGUE.format(pkg=str(pkg)) + textwrap.dedent(script)
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env(*extras),
                              cwd=str(base), timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    return run, env, python, base


def _add_one(target: str, bind: bool = False):
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    if bind:
        bx, tx = s[B].split(B.op.axis[0], factor=16)
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [A, B], target=target, name="add_one")


def test_llvm_module_runs_in_numpy_only_python(device, tmp_path):
    run, *_ = device
    _add_one("llvm").export_library(str(tmp_path / "add.so"))
    x = np.arange(64, dtype="float32")
    np.save(tmp_path / "x.npy", x)
    run(f"""
        f = tvm.runtime.load_module({str(tmp_path / 'add.so')!r})
        x = np.load({str(tmp_path / 'x.npy')!r})
        b = tvm.nd.empty((64,), "float32")
        f(tvm.nd.array(x), b)
        np.save({str(tmp_path / 'y.npy')!r}, b.numpy())
    """)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x * 2 + 1)  # exact: one rounding each


def _small_graph(dnnl: bool = False, target: str = "llvm"):
    from kiln import relay

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype("float32")
    x = relay.var("x", shape=(4, 8))
    y = relay.nn.relu(relay.nn.dense(x, relay.const(w))) + relay.const(np.float32(0.5))
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    if dnnl:
        from kiln.relay.op.contrib.dnnl import partition_for_dnnl
        mod = partition_for_dnnl(mod)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, target_host="llvm" if target != "llvm" else None)
    return lib, w


GRAPH_SCRIPT = """
    from kiln.contrib import graph_executor
    lib = tvm.runtime.load_module({so!r})
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input("x", np.load({x!r}))
    m.run()
    np.save({y!r}, m.get_output(0).numpy())
"""


def _check_graph(path: Path, x, w):
    want = np.maximum(x.astype("float64") @ w.T.astype("float64"), 0) + 0.5
    # 8 float32 products summed: error below 8 * eps * sum|x||w| (here sum|x||w| < 40)
    np.testing.assert_allclose(np.load(path), want, rtol=0, atol=8 * 40 * np.finfo("float32").eps)


def test_graph_executor_runs_in_numpy_only_python(device, tmp_path):
    run, *_ = device
    lib, w = _small_graph()
    lib.export_library(str(tmp_path / "net.so"))
    x = np.random.default_rng(1).standard_normal((4, 8)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    run(GRAPH_SCRIPT.format(so=str(tmp_path / "net.so"), x=str(tmp_path / "x.npy"), y=str(tmp_path / "y.npy")))
    _check_graph(tmp_path / "y.npy", x, w)


def test_onednn_graph_runs_in_numpy_only_python(device, tmp_path):
    from kiln.runtime.json_runtime import dnnl_available

    if dnnl_available() is not None:
        pytest.skip(f"needs oneDNN: {dnnl_available()}")
    run, *_ = device
    lib, w = _small_graph(dnnl=True)
    assert any(m.type_key == "dnnl" for m in lib.get_lib().imported_modules)
    lib.export_library(str(tmp_path / "net.so"))
    x = np.random.default_rng(2).standard_normal((4, 8)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    # No kiln sources and no C++ compiler on this device's PATH: the library carries the shim.
    run("import os; os.environ['PATH'] = '/nonexistent'\n" + textwrap.dedent(GRAPH_SCRIPT).format(
        so=str(tmp_path / "net.so"), x=str(tmp_path / "x.npy"), y=str(tmp_path / "y.npy")))
    _check_graph(tmp_path / "y.npy", x, w)


def _serve_a_module_and_a_graph(cmd, env, cwd, tmp_path, graph_module, seed, check_session=None, target="llvm"):
    """Start the package's server ``cmd`` on 127.0.0.1, then as a client with the compiler: run an
    exported kernel built for ``target`` ("llvm" or "opencl") and a graph (``graph_module(lib,
    remote_lib, dev)`` makes its executor; None: no graph). ``check_session(remote)`` looks at
    the server first."""
    from kiln import rpc

    log = open(tmp_path / "server.log", "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(cwd))
    try:
        svc.wait_until(lambda: "bind to" in (tmp_path / "server.log").read_text(), what=f"{cmd[0]} start")
        port = int((tmp_path / "server.log").read_text().split("bind to")[1].split(":")[1].split()[0])
        remote = rpc.connect(svc.HOST, port)
        if check_session is not None:
            check_session(remote)
        _add_one(target, bind=target != "llvm").export_library(str(tmp_path / "add.so"))
        remote.upload(str(tmp_path / "add.so"))
        f = remote.load_module("add.so")
        dev = remote.cpu(0) if target == "llvm" else remote.cl(0)
        x = np.linspace(-3, 3, 64).astype("float32")
        a, b = tvm.nd.array(x, dev), tvm.nd.empty((64,), "float32", dev)
        f(a, b)
        np.testing.assert_array_equal(b.numpy(), x * np.float32(2) + np.float32(1))
        times = f.time_evaluator("add_one", dev, number=3, repeat=2)(a, b).results
        assert len(times) == 2 and all(t > 0 for t in times)
        if graph_module is None:
            return
        lib, w = _small_graph()
        lib.export_library(str(tmp_path / "net.so"))
        remote.upload(str(tmp_path / "net.so"))
        m = graph_module(lib, remote.load_module("net.so"), dev)
        xg = np.random.default_rng(seed).standard_normal((4, 8)).astype("float32")
        m.set_input("x", xg)
        m.run()
        np.save(tmp_path / "y.npy", m.get_output(0).numpy())
        _check_graph(tmp_path / "y.npy", xg, w)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_rpc_server_from_the_package(device, tmp_path):
    """The package's ``python -m kiln.exec.rpc_server`` serves a client that has the compiler."""
    _, env, python, base = device
    from kiln.contrib import graph_executor

    port = svc.free_port()
    _serve_a_module_and_a_graph(
        [python, "-m", "kiln.exec.rpc_server", "--host", svc.HOST, "--port", str(port), "--port-end", str(port + 20)],
        env(), base, tmp_path, lambda lib, rlib, dev: graph_executor.GraphModule(rlib["default"](dev)), seed=3)


def test_rpc_server_from_the_package_on_the_documents_stand_in_numpy(device, tmp_path):
    """Document 001's troubleshooting for a device without numpy: its stand-in numpy.py ahead of
    everything on the path; the package's server still serves an exported kernel (arrays the
    server allocates without numpy, time_evaluator)."""
    from test_no_numpy import STAND_IN_NUMPY

    _, env, python, base = device
    (tmp_path / "stand_in").mkdir()
    (tmp_path / "stand_in" / "numpy.py").write_text(STAND_IN_NUMPY)
    server_env = env()
    server_env["PYTHONPATH"] = str(tmp_path / "stand_in") + os.pathsep + server_env["PYTHONPATH"]

    def runs_on_the_stand_in(remote):
        with open(f"/proc/{remote.get_function('rpc.getpid')()}/maps") as maps:
            assert "_multiarray_umath" not in maps.read()  # the server's worker never loaded numpy

    port = svc.free_port()
    _serve_a_module_and_a_graph(
        [python, "-m", "kiln.exec.rpc_server", "--host", svc.HOST, "--port", str(port), "--port-end", str(port + 20)],
        server_env, base, tmp_path, None, seed=0, check_session=runs_on_the_stand_in)


def test_opencl_module_runs_with_pyopencl(device, tmp_path):
    pytest.importorskip("pyopencl", reason="needs pyopencl (pip install -e '.[opencl]')")
    from kiln.runtime.devices.opencl import API

    if not API.exist(0):
        pytest.skip("needs an OpenCL device (apt-get install pocl-opencl-icd; check with clinfo)")
    run, *_ = device
    _add_one("opencl", bind=True).export_library(str(tmp_path / "add_cl.so"))
    x = np.arange(64, dtype="float32") - 7
    np.save(tmp_path / "x.npy", x)
    run(f"""
        f = tvm.runtime.load_module({str(tmp_path / 'add_cl.so')!r})
        assert [m.type_key for m in f.imported_modules] == ["opencl"]
        dev = tvm.cl(0)
        a = tvm.nd.array(np.load({str(tmp_path / 'x.npy')!r}), dev)
        b = tvm.nd.empty((64,), "float32", dev)
        f(a, b)
        np.save({str(tmp_path / 'y.npy')!r}, b.numpy())
    """, "opencl")
    # OpenCL may contract a*2+1 into one fma: exact either way for these small integers
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x * 2 + 1)


def test_rpc_server_from_the_package_runs_an_opencl_module(device, tmp_path):
    """The package's server in the pyopencl environment serves an OpenCL module on its PoCL
    device to a client with the compiler (the kernel, then device-timed repeats)."""
    pytest.importorskip("pyopencl", reason="needs pyopencl (pip install -e '.[opencl]')")
    from kiln.runtime.devices.opencl import API

    if not API.exist(0):
        pytest.skip("needs an OpenCL device (apt-get install pocl-opencl-icd; check with clinfo)")
    _, env, python, base = device
    port = svc.free_port()
    _serve_a_module_and_a_graph(
        [python, "-m", "kiln.exec.rpc_server", "--host", svc.HOST, "--port", str(port), "--port-end", str(port + 20)],
        env("opencl"), base, tmp_path, None, seed=0, target="opencl")


@pytest.fixture(scope="module")
def cuda_library(tmp_path_factory):
    from kiln.runtime.devices.nvrtc import have_nvrtc

    if not have_nvrtc():
        pytest.skip("building CUDA needs NVRTC: pip install -e '.[cuda]'")
    path = tmp_path_factory.mktemp("cuda") / "add_cu.so"
    _add_one("cuda", bind=True).export_library(str(path))
    return path


CUDA_LOAD = """
    from kiln.runtime.devices import nvrtc
    # The venv has cuda-bindings but no NVRTC wheel; a GPU machine may still have the CUDA
    # toolkit's NVRTC on its library path, so take it away: the PTX carried since the build runs.
    nvrtc.have_nvrtc = lambda: False
    f = tvm.runtime.load_module({so!r})
    (cu,) = f.imported_modules
    assert cu.type_key == "cuda" and ".entry add_one_kernel" in cu.get_source("ptx"), cu.get_source("ptx")[:300]
"""


def test_cuda_module_loads_without_nvrtc(device, cuda_library):
    """cuda-bindings without NVRTC: the module loads and shows its PTX, carried since the build."""
    run, *_ = device
    run(CUDA_LOAD.format(so=str(cuda_library)), "cuda")


def test_cuda_module_launches_from_its_ptx(device, cuda_library, tmp_path):
    """The first launch, on an NVIDIA GPU: the driver JIT-compiles the carried PTX (no NVRTC)."""
    run, *_ = device
    x = np.arange(64, dtype="float32")
    np.save(tmp_path / "x.npy", x)
    out = run(CUDA_LOAD.format(so=str(cuda_library)) + f"""
    dev = tvm.cuda(0)
    if not dev.exist:
        print("no GPU")
    else:
        a = tvm.nd.array(np.load({str(tmp_path / 'x.npy')!r}), dev)
        b = tvm.nd.empty((64,), "float32", dev)
        f(a, b)
        np.save({str(tmp_path / 'y.npy')!r}, b.numpy())
""", "cuda")
    if "no GPU" in out:
        pytest.skip("needs an NVIDIA GPU (the module loaded; the launch is the GPU's)")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x * 2 + 1)


# The C runtime half: the package built with this machine's C runtime (build_runtime_package.sh
# OUTPUT ""), used as a device without Python uses it: kiln_run on a tvmc package, kiln_rpc
# serving a client, and the oneDNN shim shipped beside them. PATH holds no compiler.
@pytest.fixture(scope="module")
def c_device(tmp_path_factory):
    """The unpacked kiln_runtime/host folder: kiln_run, kiln_rpc, libkiln_runtime, headers."""
    if any(shutil.which(tool) is None for tool in ("make", "gcc")):
        pytest.skip("needs make and gcc to build the C runtime")
    base = tmp_path_factory.mktemp("c-device")
    made = subprocess.run(["sh", str(ROOT / "tools" / "build_runtime_package.sh"), str(base / "rt.tar.gz"), ""],
                          capture_output=True, text=True, env=dict(os.environ, MAKEFLAGS="-j2"))
    assert made.returncode == 0, made.stdout + made.stderr
    subprocess.run(["tar", "-xzf", str(base / "rt.tar.gz"), "-C", str(base)], check=True)
    host = base / "kiln_runtime" / "host"
    assert {"kiln_run", "kiln_rpc", "libkiln_runtime.so", "kiln_runtime.h"} <= {p.name for p in host.iterdir()}
    return host


def _kiln_run(host: Path, package: Path, tmp_path: Path, x, *options: str, path: str = "/nonexistent") -> Path:
    np.savez(tmp_path / "in.npz", x=x)
    out = tmp_path / "out.npz"
    env = {"PATH": path, "HOME": str(tmp_path), "KILN_CACHE_DIR": str(tmp_path / "cache"),
           **{k: os.environ[k] for k in ("OCL_ICD_VENDORS", "POCL_DEVICES") if k in os.environ}}
    proc = subprocess.run([str(host / "kiln_run"), "--package", str(package), "--input", str(tmp_path / "in.npz"),
                           "--output", str(out), *options], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_c_runtime_runs_a_graph_package(c_device, tmp_path):
    from kiln.driver.tvmc.compiler import export_package

    lib, w = _small_graph()
    export_package(lib, str(tmp_path / "net.tar"))
    x = np.random.default_rng(4).standard_normal((4, 8)).astype("float32")
    out = _kiln_run(c_device, tmp_path / "net.tar", tmp_path, x)
    np.save(tmp_path / "y.npy", np.load(out)["output_0"])
    _check_graph(tmp_path / "y.npy", x, w)


@pytest.mark.opencl
def test_c_runtime_runs_an_opencl_package(c_device, tmp_path):
    """The package's kiln_run on the local OpenCL device (PoCL): the kernels are built from the
    package's OpenCL C by the device's own driver (PoCL links them with the system's ld, so PATH
    stays as it is here; kiln's own sources are not in the package)."""
    from kiln.driver.tvmc.compiler import export_package

    lib, w = _small_graph(target="opencl")
    export_package(lib, str(tmp_path / "net.tar"))
    x = np.random.default_rng(7).standard_normal((4, 8)).astype("float32")
    out = _kiln_run(c_device, tmp_path / "net.tar", tmp_path, x, "--device", "cl", path=os.environ["PATH"])
    np.save(tmp_path / "y.npy", np.load(out)["output_0"])
    _check_graph(tmp_path / "y.npy", x, w)


def test_c_runtime_runs_a_onednn_package(c_device, tmp_path):
    from kiln.driver.tvmc.compiler import export_package
    from kiln.runtime.json_runtime import dnnl_available

    if dnnl_available() is not None:
        pytest.skip(f"needs oneDNN: {dnnl_available()}")
    assert (c_device / "libkiln_dnnl.so").exists(), "the package ships the oneDNN shim where oneDNN is installed"
    lib, w = _small_graph(dnnl=True)
    assert any(m.type_key == "dnnl" for m in lib.get_lib().imported_modules)
    export_package(lib, str(tmp_path / "net.tar"))
    x = np.random.default_rng(5).standard_normal((4, 8)).astype("float32")
    out = _kiln_run(c_device, tmp_path / "net.tar", tmp_path, x)
    np.save(tmp_path / "y.npy", np.load(out)["output_0"])
    _check_graph(tmp_path / "y.npy", x, w)


def test_c_rpc_server_from_the_package(c_device, tmp_path):
    """The package's kiln_rpc serves a client that has the compiler: a module and a graph."""
    from kiln.contrib import graph_executor

    def graph_module(lib, rlib, dev):
        # The C server's graph executor: graph JSON + library + parameters (src/runtime/rpc/session_graph.c)
        m = graph_executor.create(lib.get_graph_json(), rlib, dev)
        m.set_input(**lib.get_params())
        return m

    _serve_a_module_and_a_graph([str(c_device / "kiln_rpc"), "--host", svc.HOST, "--port", str(svc.free_port())],
                                {"PATH": "/nonexistent", "HOME": str(tmp_path)}, tmp_path, tmp_path, graph_module,
                                seed=6)
