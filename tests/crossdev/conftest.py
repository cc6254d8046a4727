"""Fixtures for the cross-device tests: a Python tracker on 127.0.0.1 and two qemu boards
(kiln_rpc cross-built for aarch64 and armv7) registered with it under keys qemu-aarch64 and
qemu-armv7. Everything is started once per test session and torn down at its end."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import boards  # noqa: E402
import kernels as kernel_defs  # noqa: E402
from boards import svc  # noqa: E402

import kiln as tvm  # noqa: E402


def _require(arch: boards.Arch) -> None:
    missing = arch.missing()
    if missing:
        pytest.skip(f"{arch.name} board {missing}")


@pytest.fixture(scope="session")
def tracker():
    t = svc.tracker()
    yield t
    t.stop()


@pytest.fixture(scope="session")
def runtime_builds(tmp_path_factory):
    """Build directories of the C runtime, built on first use: builds[cross_prefix]."""
    root = tmp_path_factory.mktemp("kiln-c-runtime")
    cache = {}

    def get(cross: str = "", *extra: str) -> str:
        key = (cross, extra)
        if key not in cache:
            name = (cross.rstrip("-") or "host") + ("-" + str(len(cache)) if extra else "")
            cache[key] = boards.build_runtime(str(root / name), cross, extra)
        return cache[key]
    return get


@pytest.fixture(scope="session")
def board_factory(tracker, runtime_builds):
    started = {}

    def get(name: str) -> boards.Board:
        arch = boards.ARCHES[name]
        _require(arch)
        if name not in started:
            binary = os.path.join(runtime_builds(arch.cross), "kiln_rpc")
            started[name] = boards.start_board(binary, arch, tracker.port, arch.key)
        return started[name]
    yield get
    for b in started.values():
        b.stop()


@pytest.fixture(params=sorted(boards.ARCHES))
def board(request, board_factory):
    return board_factory(request.param)


@pytest.fixture(scope="session")
def cross_modules(tmp_path_factory):
    """Kernels compiled on the host for each board: cross_modules(arch, kernel) -> files."""
    root = tmp_path_factory.mktemp("cross-modules")
    cache = {}

    def get(arch_name: str, kernel: str):
        if (arch_name, kernel) not in cache:
            arch = boards.ARCHES[arch_name]
            s, tensors, inputs, reference = kernel_defs.KERNELS[kernel]()
            mod = tvm.build(s, tensors, target=arch.target, name=kernel)
            files = boards.module_files(str(root), f"{kernel}-{arch_name}", mod)
            cache[arch_name, kernel] = (files, inputs, reference)
        return cache[arch_name, kernel]
    return get


@pytest.fixture
def rng():
    return np.random.default_rng(7)
