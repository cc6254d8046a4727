"""Calibration data from a file: a ``.npz`` whose arrays are named after the model's inputs.

An array is one batch (the input's shape) or several stacked along a new first axis
(``(n,) + shape``). ``tvmc compile --quantize calib.npz`` reads it with ``from_npz``.
"""

from __future__ import annotations

import zipfile

import numpy as np

from kiln import limits


def from_npz(path, func) -> list:
    """The batches of ``path`` for the inputs of ``func`` (a relay Function): a list of dicts."""
    size = limits.file_size(path)
    inputs = {p.name_hint: p.type_annotation for p in func.params}
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile) as err:
        raise limits.fail(path, "file", f"is not a .npz archive ({err})",
                          "save the calibration inputs with numpy.savez(path, <input name>=array)") from None
    with archive:
        names = list(archive.files)
        unknown = sorted(set(names) - set(inputs))
        if unknown or not names:
            raise limits.fail(path, f"arrays {unknown or names}", f"do not name the model's inputs {sorted(inputs)}",
                              "name each array after a model input")
        batches = None
        stacked = {}
        for name in names:
            want = tuple(int(d) for d in inputs[name].shape)
            info = archive.zip.getinfo(f"{name}.npy")
            limits.within(info.file_size, limits.expansion_limit(size), file=path, field=f"array {name!r}")
            arr = archive[name]
            if tuple(arr.shape) == want:
                arr = arr[None]
            elif tuple(arr.shape[1:]) != want:
                raise limits.fail(path, f"array {name!r}", f"has shape {list(arr.shape)}",
                                  f"give the input's shape {list(want)} or a stack of them {['n'] + list(want)}")
            if batches not in (None, arr.shape[0]):
                raise limits.fail(path, f"array {name!r}", f"stacks {arr.shape[0]} batches, another array {batches}",
                                  "stack the same number of batches for every input")
            batches = arr.shape[0]
            stacked[name] = arr.astype(inputs[name].dtype, copy=False)
    return [{name: arr[i] for name, arr in stacked.items()} for i in range(batches)]
