"""``rpc.LocalSession``: the session API on this machine, with no server and no network.

Lets a script written for a remote board run unchanged on the host (000's ``local_demo``).
Devices are plain local devices, so arrays and modules are ordinary runtime objects.
"""

from __future__ import annotations

import os
import tempfile

from . import files


class LocalSession:
    """>>> remote = rpc.LocalSession(); remote.upload(path); f = remote.load_module("lib.tar")"""

    def __init__(self):
        self._dir = tempfile.TemporaryDirectory(prefix="kiln-local-session-")
        self.workdir = self._dir.name

    def upload(self, data, target: str | None = None) -> None:
        if isinstance(data, (bytes, bytearray, memoryview)):
            if target is None:
                raise ValueError("upload(bytes) needs target=<file name>")
            files.write_chunk(self.workdir, target, 0, data)
            return
        path = os.fspath(data)
        with open(path, "rb") as f:
            files.write_chunk(self.workdir, target or os.path.basename(path), 0, f.read())

    def download(self, name: str) -> bytes:
        with open(files.resolve(self.workdir, name, must_exist=True), "rb") as f:
            return f.read()

    def remove(self, name: str) -> None:
        files.remove(self.workdir, name)

    def listdir(self) -> list[str]:
        return files.listdir(self.workdir)

    def load_module(self, name: str):
        from ..runtime import module
        return module.load_module(files.resolve(self.workdir, name, must_exist=True))

    def get_function(self, name: str):
        from .worker import SERVER_FUNCTIONS
        if name not in SERVER_FUNCTIONS:
            raise AttributeError(f"no function named {name!r}; known: {sorted(SERVER_FUNCTIONS)}")
        func, wants_worker = SERVER_FUNCTIONS[name]
        return (lambda *a: func(self, *a)) if wants_worker else func

    def device(self, dev_type, dev_id: int = 0):
        from ..runtime.device import device
        return device(dev_type, dev_id)

    context = device

    def cpu(self, dev_id: int = 0):
        return self.device("cpu", dev_id)

    def cuda(self, dev_id: int = 0):
        return self.device("cuda", dev_id)

    gpu = cuda

    def cl(self, dev_id: int = 0):
        return self.device("cl", dev_id)

    def ext_dev(self, dev_id: int = 0):
        return self.device("ext_dev", dev_id)

    def close(self) -> None:
        self._dir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
