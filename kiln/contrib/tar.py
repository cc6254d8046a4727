"""Pack and unpack module archives. ``untar`` refuses anything that could escape its directory."""

from __future__ import annotations

import os
import tarfile

from ..errors import KilnError


def tar(output: str, files: list[str]) -> None:
    """Write ``files`` into the tar ``output``, each under its base name (flat archive)."""
    if isinstance(files, str):
        files = [files]
    names = [os.path.basename(f) for f in files]
    if len(set(names)) != len(names):
        raise ValueError(f"tar: two inputs share a file name: {names}; rename one of them")
    with tarfile.open(output, "w") as archive:
        for path, name in zip(files, names):
            archive.add(path, arcname=name, recursive=False)


def untar(path: str, directory: str) -> list[str]:
    """Extract the regular files and directories of ``path`` into ``directory``.

    Members with absolute paths, ``..`` components, links or device nodes are rejected:
    module archives come from other machines (RPC uploads) and must not write elsewhere.
    Returns the extracted member names.
    """
    try:
        archive = tarfile.open(path, "r")
    except (tarfile.TarError, OSError) as err:
        raise KilnError(f"cannot read tar archive {path}: {err}") from None
    with archive:
        members = archive.getmembers()
        for m in members:
            parts = m.name.replace("\\", "/").split("/")
            if m.name.startswith("/") or ".." in parts or os.path.isabs(m.name):
                raise KilnError(f"{path}: member {m.name!r} points outside the archive "
                                "directory; refusing to extract it")
            if not (m.isfile() or m.isdir()):
                raise KilnError(f"{path}: member {m.name!r} is a link or special file; module "
                                "archives may hold only regular files")
            if m.issparse():  # a few KB of sparse map can declare GBs of zeros to write out
                raise KilnError(f"{path}: member {m.name!r} is a sparse file (declares {m.size} bytes); module "
                                "archives hold only plain files: export the module again")
        os.makedirs(directory, exist_ok=True)
        for m in members:
            archive.extract(m, directory, set_attrs=False, **_filter_arg())
    return [m.name for m in members]


def _filter_arg() -> dict:
    # Python >= 3.11.4 has extraction filters; members were already vetted above.
    return {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
