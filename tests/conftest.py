"""Fixtures shared by the whole test suite.

``c_kernels``: the ABI kernels of tests/helpers/c_kernels.py compiled for the host
(``.objects``, ``.metadata``, ``.triple``, ``.module()`` -> a fresh CompiledModule).
``c_module``: a fresh CompiledModule over them. ``c_kernels_aarch64``: the same objects
cross-compiled with aarch64-linux-gnu-gcc (skips when that compiler is missing).
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # makes tests/helpers importable as `helpers`

from helpers import c_kernels as _c_kernels  # noqa: E402


@pytest.fixture(scope="session")
def c_kernels():
    return _c_kernels.build("cc")


@pytest.fixture
def c_module(c_kernels):
    return c_kernels.module()


@pytest.fixture(scope="session")
def c_kernels_aarch64():
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs aarch64-linux-gnu-gcc (apt-get install -y gcc-aarch64-linux-gnu)")
    return _c_kernels.build("aarch64-linux-gnu-gcc")
