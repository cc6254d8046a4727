"""``tempdir()``: a scratch directory that removes itself (``tvm.contrib.utils.tempdir``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref


class TempDirectory:
    """A directory removed when this object is collected or the interpreter exits.

    >>> temp = utils.tempdir()
    >>> lib.export_library(temp.relpath("lib.so"))
    """

    def __init__(self, custom_path: str | None = None, keep_for_debug: bool = False):
        if custom_path is not None:
            os.makedirs(custom_path, exist_ok=True)
            self.path = os.path.abspath(custom_path)
            owned = False  # a directory the caller named is the caller's to remove
        else:
            self.path = tempfile.mkdtemp(prefix="kiln-")
            owned = True
        self.keep_for_debug = keep_for_debug
        should_remove = owned and not keep_for_debug
        # weakref.finalize also runs at interpreter exit, unlike __del__.
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.path, True) if should_remove else None

    def relpath(self, name: str) -> str:
        """The absolute path of ``name`` inside this directory."""
        return os.path.join(self.path, name)

    def listdir(self) -> list[str]:
        return sorted(os.listdir(self.path))

    def __truediv__(self, name):
        """``temp / "project"``: a pathlib.Path inside this directory (TVM's microTVM tutorials)."""
        import pathlib
        return pathlib.Path(self.path) / name

    def remove(self) -> None:
        """Delete the directory now (also a directory passed as ``custom_path``)."""
        if self._finalizer is not None:
            self._finalizer()
        else:
            shutil.rmtree(self.path, ignore_errors=True)

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"TempDirectory({self.path!r})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.keep_for_debug:
            self.remove()


def tempdir(custom_path: str | None = None, keep_for_debug: bool = False) -> TempDirectory:
    return TempDirectory(custom_path, keep_for_debug)
