"""Fixtures for the RPC tests: real services on 127.0.0.1, torn down after each test module."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # rpc_services, shared with tests/integration

import rpc_services  # noqa: E402


@pytest.fixture(scope="module")
def rpc_server():
    svc = rpc_services.server()
    yield svc
    svc.stop()


@pytest.fixture(scope="session")
def kernel_files(c_kernels, tmp_path_factory):
    """The C test kernels exported as .so and .tar (the compiler's two module formats)."""
    d = tmp_path_factory.mktemp("rpc-kernels")
    mod = c_kernels.module()
    mod.export_library(str(d / "kernels.so"))
    mod.export_library(str(d / "kernels.tar"))
    return d
