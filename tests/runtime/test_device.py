import pytest

import kiln as tvm
from kiln.errors import KilnError


def test_cpu_device_basics():
    dev = tvm.cpu(0)
    assert (dev.device_type, dev.device_id, str(dev)) == (1, 0, "cpu(0)")
    assert dev.exist and dev.session is None
    dev.sync()


@pytest.mark.parametrize("name, code", [("cpu", 1), ("llvm", 1), ("cuda", 2), ("gpu", 2),
                                        ("opencl", 4), ("cl", 4), ("llvm -mcpu=native", 1)])
def test_device_by_name(name, code):
    dev = tvm.device(name, 1)
    assert (dev.device_type, dev.device_id) == (code, 1)


def test_device_from_printed_form_and_code():
    assert tvm.device("cuda(3)") == tvm.cuda(3)
    assert tvm.device(4, 2) == tvm.cl(2)


def test_equality_and_hash():
    assert tvm.cpu(0) == tvm.device("cpu", 0)
    assert tvm.cpu(0) != tvm.cpu(1) and tvm.cpu(0) != tvm.cuda(0)
    assert len({tvm.cpu(0), tvm.device("llvm"), tvm.cpu(1)}) == 2


def test_remote_device_differs_from_local():
    remote = tvm.runtime.Device(1, 0, session=object())
    assert remote != tvm.cpu(0)


def test_unknown_device_name():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        tvm.device("tpu")


def test_device_kind_not_in_build():
    dev = tvm.device("vulkan", 0)
    assert dev.exist is False
    with pytest.raises(KilnError, match="device 'vulkan' is not available in this build"):
        dev.sync()
    with pytest.raises(KilnError, match="device 'vulkan' is not available in this build"):
        tvm.nd.empty((2,), "float32", dev)


def test_cuda_device_absent_says_so():
    from kiln.runtime.devices.cuda import API
    if API.exist(0):
        pytest.skip("this machine has a CUDA device")
    dev = tvm.cuda(0)
    assert dev.exist is False and dev.max_threads_per_block is None
    dev.sync()  # nothing was ever queued there
    with pytest.raises(KilnError, match=r"cuda\(0\) does not exist: this machine has 0 CUDA device"):
        tvm.nd.empty((2,), "float32", dev)
