"""The Python server starts and serves on a machine without numpy: with none at all (files and
server functions), and with document 001's stand-in numpy.py (a .so module's kernels on arrays
the worker allocates without numpy)."""

import numpy as np

import kiln as tvm
from kiln import rpc

import rpc_services as svc


def test_server_serves_without_numpy(tmp_path):
    blocker = tmp_path / "numpy"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('numpy is not installed on this device')\n")
    server = svc.server(env={"PYTHONPATH": str(tmp_path)})
    try:
        sess = rpc.connect(svc.HOST, server.port)
        sess.upload(b"payload", target="f.bin")
        assert sess.listdir() == ["f.bin"] and sess.download("f.bin") == b"payload"
        assert sess.get_function("rpc.echo")({"k": [1, 2.0]}) == {"k": [1, 2.0]}
        sess.close()
        assert "numpy is not installed" in server.text()  # the warm-up import was skipped, not fatal
    finally:
        server.stop()


# Document 001's stand-in, as its troubleshooting section tells a user to save it as numpy.py in
# site-packages of a device that has no numpy.
STAND_IN_NUMPY = "".join(f"class {name}:\n    pass\n" for name in (
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
    "float32", "float64", "float_")) + '''
class dtype:
    def __init__(self, *args, **kwargs):
        pass

class ndarray:
    pass
'''


def test_server_with_the_documents_stand_in_numpy_serves_a_so_module(tmp_path, kernel_files):
    (tmp_path / "numpy.py").write_text(STAND_IN_NUMPY)
    server = svc.server(env={"PYTHONPATH": str(tmp_path)})
    try:
        sess = rpc.connect(svc.HOST, server.port)
        pid = sess.get_function("rpc.getpid")()
        with open(f"/proc/{pid}/maps") as f:
            assert "_multiarray_umath" not in f.read()  # the worker runs on the stand-in, not numpy
        sess.upload(str(kernel_files / "kernels.so"))
        f = sess.load_module("kernels.so")
        dev = sess.cpu()
        x = np.arange(1000, dtype="float32") * 0.5  # numpy on the client only
        a = tvm.nd.array(x, dev)
        b = tvm.nd.empty((1000,), "float32", dev)
        f(a, b)
        np.testing.assert_array_equal(b.numpy(), x + 1)
        times = f.time_evaluator("add_one", dev, number=5, repeat=2)(a, b).results
        assert len(times) == 2 and all(t > 0 for t in times)
        sess.close()
    finally:
        server.stop()
