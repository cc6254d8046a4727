import os

import numpy as np
import pytest

import kiln as tvm
from kiln.contrib import utils
from kiln.errors import KilnError
from kiln.runtime.library import LibraryModule


def _f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _check_add_one(mod, n=1024):
    a = tvm.nd.array(_f32(n))
    b = tvm.nd.empty((n,), "float32")
    mod(a, b)
    np.testing.assert_array_equal(b.numpy(), a.numpy() + 1)


def test_compiled_module_runs_on_host(c_module):
    assert c_module.entry_name == "add_one" and c_module.type_key == "c"
    assert c_module.imported_modules == []
    _check_add_one(c_module)
    a, b = tvm.nd.array(_f32(17, 9)), tvm.nd.array(_f32(9, 5, seed=1))
    c = tvm.nd.empty((17, 5), "float32")
    c_module["matmul"](a, b, c)
    np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)


def test_symbolic_kernel_at_three_sizes(c_module):
    f = c_module.get_function("add_one")
    for n in (1, 7, 4096):
        _check_add_one(f, n)


def test_scalars_and_fixed_shapes(c_module):
    a = tvm.nd.array(np.arange(5, dtype="float64"))
    b = tvm.nd.empty((5,), "float64")
    c_module["scale"](a, b, 2.5, -3)
    np.testing.assert_array_equal(b.numpy(), np.arange(5) * 2.5 - 3)
    c_module["scale"](a, b, 2, np.int32(1))  # an int is accepted for a float scalar
    np.testing.assert_array_equal(b.numpy(), np.arange(5) * 2 + 1)
    x = tvm.nd.array(np.arange(16, dtype="int32").reshape(4, 4))
    y = tvm.nd.empty((4, 4), "int32")
    c_module["add_fixed"](x, x, y)
    np.testing.assert_array_equal(y.numpy(), 2 * x.numpy())


@pytest.mark.parametrize("args, message", [
    (lambda: (_nd(512), _nd(512), _nd(1)),
     r"add_one takes 2 arguments \(A, B\), got 3"),
    (lambda: (_nd(4, dtype="float64"), _nd(4)),
     r"add_one: argument 'A' has dtype float64, expected float32"),
    (lambda: (_nd(4), _nd(2, 2)),
     r"add_one: argument 'B' has 2 dimensions \(shape \(2, 2\)\), expected 1 \(shape \(n,\)\)"),
    (lambda: (_nd(512), _nd(1024)),
     r"add_one: argument 'B' has shape \(1024,\), expected \(n,\) with n=512 \(set by argument 'A'\)"),
    (lambda: (np.zeros(4, "float32"), _nd(4)),
     r"add_one: argument 'A' is a numpy.ndarray; wrap it with tvm.nd.array"),
    (lambda: ([1.0], _nd(1)),
     r"add_one: argument 'A' must be an NDArray \(float32\(n,\)\), got list"),
])
def test_argument_errors(c_module, args, message):
    with pytest.raises((ValueError, TypeError), match=message):
        c_module["add_one"](*args())


def _nd(*shape, dtype="float32"):
    return tvm.nd.empty(shape, dtype)


def test_concrete_shape_and_scalar_errors(c_module):
    good = _nd(4, 4, dtype="int32")
    with pytest.raises(ValueError, match=r"add_fixed: argument 'C' has shape \(4, 5\), expected \(4, 4\)"):
        c_module["add_fixed"](good, good, _nd(4, 5, dtype="int32"))
    a, b = _nd(3, dtype="float64"), _nd(3, dtype="float64")
    with pytest.raises(ValueError, match=r"scale: argument 'offset' must be an int \(int32\), got float"):
        c_module["scale"](a, b, 1.0, 0.5)
    with pytest.raises(ValueError, match=r"scale: argument 'offset' = 4294967296 does not fit in int32"):
        c_module["scale"](a, b, 1.0, 2**32)
    with pytest.raises(ValueError, match=r"scale: argument 'alpha' must be a number \(float64\), got str"):
        c_module["scale"](a, b, "2", 0)


def test_matmul_symbolic_consistency(c_module):
    with pytest.raises(ValueError, match=r"argument 'B' has shape \(4, 5\), expected \(k, n\) with k=3 "
                                         r"\(set by argument 'A'\)"):
        c_module["matmul"](_nd(2, 3), _nd(4, 5), _nd(2, 5))
    with pytest.raises(ValueError, match=r"argument 'C' has shape \(2, 6\), expected \(m, n\) with n=5"):
        c_module["matmul"](_nd(2, 3), _nd(3, 5), _nd(2, 6))


def test_wrong_device(c_module):
    remote_cpu = tvm.runtime.Device(1, 0)
    a = tvm.nd.empty((2,), "float32", remote_cpu)
    a.device = tvm.cl(0)  # pretend: an array that lives on another device kind
    a._sig = ("float32", 1, 4)
    with pytest.raises(ValueError, match=r"add_one: argument 'A' is on opencl\(0\), expected a cpu device"):
        c_module["add_one"](a, _nd(2))


def test_kernel_error_message(c_module):
    with pytest.raises(KilnError, match=r"^fail: deliberately failed on 3 elements$"):
        c_module["fail"](_nd(3))
    _check_add_one(c_module)  # the module still works afterwards


def test_unknown_function(c_module):
    with pytest.raises(AttributeError, match=r"has no function 'nope'; its functions: add_one, matmul"):
        c_module["nope"]


def test_get_source(c_module):
    assert "int32_t add_one" in c_module.get_source()
    assert c_module.get_source("c") == c_module.get_source()
    with pytest.raises(KilnError, match=r"has no asm source; formats it has: 'c'"):
        c_module.get_source("asm")


@pytest.mark.parametrize("ext", ["so", "tar"])
def test_export_and_load(c_module, ext):
    temp = utils.tempdir()
    path = temp.relpath(f"lib.{ext}")
    c_module.export_library(path)
    loaded = tvm.runtime.load_module(path)
    assert isinstance(loaded, LibraryModule)
    assert loaded.entry_name == "add_one"
    assert loaded.function_names()[:2] == ["add_one", "matmul"]
    _check_add_one(loaded, 33)
    if ext == "tar":
        import tarfile
        assert sorted(tarfile.open(path).getnames()) == ["lib0.o", "lib1.o", "metadata.json"]
        assert os.path.exists(path + ".so")  # relinked beside the archive


def test_library_module_directly(c_module, tmp_path):
    path = str(tmp_path / "k.so")
    c_module.export_library(path)
    mod = LibraryModule(path)
    assert mod.metadata["entry"] == "add_one" and mod.type_key == "library"
    assert '"add_one"' in mod.get_source()
    _check_add_one(mod, 5)


def test_num_threads_written_after_load(c_module, tmp_path):
    path = str(tmp_path / "k.so")
    c_module.export_library(path)
    out = _nd(1, dtype="int32")
    with tvm.config.override(num_threads=3):
        tvm.runtime.load_module(path)["num_threads"](out)
    assert out.numpy()[0] == 3


def test_reexport_same_path_loads_new_file(c_kernels, tmp_path):
    from helpers import c_kernels as ck
    path = str(tmp_path / "k.so")
    c_kernels.module().export_library(path)
    first = tvm.runtime.load_module(path)
    only_add = dict(ck.metadata(c_kernels.triple), functions=ck.FUNCTIONS[:1])
    objects = [ck.compile_object(ck.symbols_source(only_add)), c_kernels.objects[1]]
    from kiln.runtime.compiled import CompiledModule
    CompiledModule(objects, only_add, {}, c_kernels.triple).export_library(path)
    second = tvm.runtime.load_module(path)
    assert first.function_names() != second.function_names() == ["add_one"]


def test_failing_fcompile_leaves_no_file(c_module, tmp_path):
    def broken(output, objects, options=None):
        with open(output, "wb") as f:
            f.write(b"partial")
        raise RuntimeError("linker exploded")
    with pytest.raises(RuntimeError, match="linker exploded"):
        c_module.export_library(str(tmp_path / "lib.so"), fcompile=broken)
    assert os.listdir(tmp_path) == []


def test_fcompile_receives_objects_and_options(c_module, tmp_path):
    seen = {}

    def link(output, objects, options=None):
        seen.update(objects=[os.path.basename(o) for o in objects], options=options)
        from kiln.contrib import cc
        cc.create_shared(output, objects, options)
    c_module.export_library(str(tmp_path / "lib.so"), fcompile=link, options=["-O2"])
    assert seen == {"objects": ["lib0.o", "lib1.o"], "options": ["-O2"]}
    _check_add_one(tvm.runtime.load_module(str(tmp_path / "lib.so")))


def test_save_object_source_and_metadata(c_module, tmp_path):
    c_module.save(str(tmp_path / "k.c"))
    assert "add_one" in (tmp_path / "k.c").read_text()
    c_module.save(str(tmp_path / "k.json"))
    assert '"entry": "add_one"' in (tmp_path / "k.json").read_text()
    with pytest.raises(KilnError, match="this module has 2 objects; one .o cannot hold them"):
        c_module.save(str(tmp_path / "k.o"))


def test_load_errors(tmp_path):
    with pytest.raises(KilnError, match="module file .*missing.so does not exist"):
        tvm.runtime.load_module(str(tmp_path / "missing.so"))
    (tmp_path / "junk.so").write_bytes(b"not an elf file at all")
    with pytest.raises(KilnError, match=r"junk.so is not an ELF shared object"):
        tvm.runtime.load_module(str(tmp_path / "junk.so"))


def test_non_kiln_library(tmp_path):
    import subprocess
    src = tmp_path / "plain.c"
    src.write_text("int plain(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "plain.so"), str(src)], check=True)
    with pytest.raises(KilnError, match="plain.so is not a kiln module: it has no __kiln_metadata"):
        tvm.runtime.load_module(str(tmp_path / "plain.so"))


def test_abi_version_mismatch(c_kernels, tmp_path):
    from helpers import c_kernels as ck
    from kiln.runtime.compiled import CompiledModule
    meta = dict(ck.metadata(c_kernels.triple), abi_version=99)
    objects = [ck.compile_object(ck.symbols_source(meta)), c_kernels.objects[1]]
    CompiledModule(objects, meta, {}, c_kernels.triple).export_library(str(tmp_path / "v.so"))
    with pytest.raises(KilnError, match="v.so uses kiln ABI version 99; this runtime speaks version 1"):
        tvm.runtime.load_module(str(tmp_path / "v.so"))


def test_bad_tar_member_rejected(tmp_path):
    import io
    import tarfile
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("../escape.o")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(KilnError, match=r"member '../escape.o' points outside"):
        tvm.runtime.load_module(str(path))
    assert not (tmp_path.parent / "escape.o").exists()


def test_concurrent_calls_from_threads(c_module):
    from concurrent.futures import ThreadPoolExecutor
    f = c_module["add_one"]

    def work(seed):
        n = 100 + seed
        a = tvm.nd.array(_f32(n, seed=seed))
        b = tvm.nd.empty((n,), "float32")
        for _ in range(200):
            f(a, b)
        return np.array_equal(b.numpy(), a.numpy() + 1)
    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(32)))
