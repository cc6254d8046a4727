"""Load a model file into relay: ``tvmc.load(path, shape_dict=, model_format=)`` -> TVMCModel.

The frontend is chosen by ``model_format`` or else by the file's extension, from FRONTENDS.
A frontend is a function of ``kiln.relay.frontend``; formats whose function kiln does not have
yet give a one-line "not supported yet" error, and start working as soon as that function
exists (the table names it, nothing else needs to change).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import sys
import tarfile
import time
import weakref
import tempfile

from .common import TVMCException, require_file


@dataclasses.dataclass(frozen=True)
class Frontend:
    name: str
    extensions: tuple
    function: str        # name in kiln.relay.frontend: f(path, shape_dict) -> (mod, params)
    needs: str           # what to install for it
    options: tuple = ()  # (keyword, value) pairs tvmc passes to the function

    def available(self) -> bool:
        from kiln.relay import frontend
        return hasattr(frontend, self.function)


FRONTENDS = {
    "onnx": Frontend("onnx", (".onnx",), "from_onnx", "pip install onnx"),
    # channels-last inputs, as the Keras model (and TVM's tvmc) has them
    "keras": Frontend("keras", (".h5", ".keras"), "from_keras", "pip install h5py", (("layout", "NHWC"),)),
    "tflite": Frontend("tflite", (".tflite",), "from_tflite", "pip install tflite"),
    "pytorch": Frontend("pytorch", (".pt", ".pth"), "from_pytorch", "pip install torch"),
}


def guess_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    for fe in FRONTENDS.values():
        if ext in fe.extensions:
            return fe.name
    known = ", ".join(f"{e} ({fe.name})" for fe in FRONTENDS.values() for e in fe.extensions)
    raise TVMCException(f"cannot tell the format of {path!r} from its extension {ext or '(none)'!r}; "
                        f"pass --model-format (one of {', '.join(FRONTENDS)}); known extensions: {known}")


def _import(fe: Frontend, path: str, shape_dict: dict | None):
    from kiln.relay import frontend
    if not fe.available():
        raise TVMCException(f"{fe.name} models are not supported yet (kiln.relay.frontend.{fe.function} does "
                            f"not exist in this kiln); convert {os.path.basename(path)} to ONNX and pass the .onnx file")
    if fe.name == "onnx":
        return _load_onnx(path, shape_dict)
    return getattr(frontend, fe.function)(path, shape_dict, **dict(fe.options))


def _load_onnx(path: str, shape_dict: dict | None):
    try:
        import onnx
    except ImportError:
        raise TVMCException("loading .onnx files needs the onnx package: pip install onnx") from None
    from kiln.relay import frontend
    try:
        model = onnx.load(path)
    except Exception as err:  # protobuf's DecodeError and friends
        raise TVMCException(f"{path!r} is not a readable ONNX model ({type(err).__name__}: {err})") from None
    weights = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in weights]
    for name in shape_dict or {}:
        if name not in inputs:
            raise TVMCException(f"--input-shapes names {name!r}, but the model's inputs are {inputs}; "
                                "use one of those names")
    return frontend.from_onnx(model, shape=shape_dict or None)


class TVMCModel:
    """A model in relay: ``mod`` (IRModule), ``params`` (``{name: array}``), ``summary()``, ``save()``."""

    def __init__(self, mod=None, params=None, model_path: str | None = None, model_format: str | None = None,
                 shape_dict: dict | None = None):
        self.mod = mod
        self.params = dict(params or {})
        self.model_path = model_path
        self.model_format = model_format
        self.shape_dict = dict(shape_dict or {})

    def summary(self, file=None) -> str:
        """Prints the model's inputs, output, parameter size, op counts and relay text to ``file``
        (default stdout) and returns that text."""
        from collections import Counter

        import numpy as np

        from kiln.relay.transform import infer
        from kiln.relay.visitor import post_order

        func = infer(self.mod["main"])
        ops = Counter(getattr(n.op, "name", "call") for n in post_order(func.body)
                      if type(n).__name__ == "Call")
        size = sum(np.asarray(v.numpy() if hasattr(v, "numpy") else v).nbytes for v in self.params.values())
        lines = [f"model: {self.model_path or '(in memory)'} ({self.model_format or 'relay'})"]
        lines += [f"input  {p.name_hint}: {p.checked_type}" for p in func.params if p.name_hint not in self.params]
        lines.append(f"output: {func.body.checked_type}")
        lines.append(f"params: {len(self.params)} arrays, {size / 1e6:.2f} MB")
        lines += [f"  {count:5d}  {name}" for name, count in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))]
        lines += ["relay:", str(self.mod)]
        text = "\n".join(lines)
        print(text, file=file if file is not None else sys.stdout)
        return text

    def save(self, path: str) -> str:
        """A ``.tar`` with the source model file, its format and shapes (``meta.json``), the relay
        text (``mod.txt``, for reading) and the parameters (``mod.params``); ``tvmc.load`` reads it
        back by importing the source again."""
        from kiln.runtime.params import save_params

        if not self.model_path or not os.path.isfile(self.model_path):
            raise TVMCException("TVMCModel.save: this model was not loaded from a file, so there is no source "
                                "to keep; save the relay module yourself")
        meta = {"format": self.model_format, "shape_dict": self.shape_dict,
                "source": os.path.basename(self.model_path)}
        blob = save_params({k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in self.params.items()})
        members = {"meta.json": json.dumps(meta).encode(), "mod.txt": str(self.mod).encode(), "mod.params": blob}
        with atomic_path(path) as tmp, tarfile.open(tmp, "w") as tar:
            tar.add(self.model_path, arcname="source/" + meta["source"])
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))
        return path


def _load_saved(path: str) -> TVMCModel:
    work = tempfile.mkdtemp(prefix="kiln-tvmc-model-")
    try:
        with tarfile.open(path) as tar:
            tar.extractall(work, filter="data")
        with open(os.path.join(work, "meta.json")) as f:
            meta = json.load(f)
        source = os.path.join(work, "source", meta["source"])
        model = load(source, meta["shape_dict"] or None, meta["format"])
        model.model_path = path
        return model
    except (KeyError, OSError, tarfile.TarError, json.JSONDecodeError) as err:
        raise TVMCException(f"{path!r} is not a model saved by TVMCModel.save ({err})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load(path, shape_dict: dict | None = None, model_format: str | None = None, **kwargs) -> TVMCModel:
    """Import a model file: ``tvmc.load("resnet50.onnx", shape_dict={"data": [1, 3, 224, 224]})``.

    ``model_format``: one of FRONTENDS (default: from the extension). A ``.tar`` written by
    ``TVMCModel.save`` loads too.
    """
    del kwargs
    path = require_file(path, "model file", "check the path (tvmc takes a model file: .onnx, .h5, .tflite, .pt)")
    if model_format is None and path.endswith(".tar"):
        return _load_saved(path)
    fmt = model_format or guess_format(path)
    if fmt not in FRONTENDS:
        raise TVMCException(f"unknown model format {fmt!r}; use one of {', '.join(FRONTENDS)}")
    mod, params = _import(FRONTENDS[fmt], path, shape_dict)
    return TVMCModel(mod, params, path, fmt, shape_dict)


class atomic_path:
    """``with atomic_path("x.tar") as tmp:`` write tmp; it becomes x.tar only if the block succeeds,
    so a failed command leaves no partial file behind."""

    def __init__(self, path: str):
        self.path = os.path.abspath(os.fspath(path))
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise TVMCException(f"cannot write {path!r}: the folder {folder!r} does not exist; create it first")
        fd, self.tmp = tempfile.mkstemp(prefix=".tvmc-", suffix=os.path.basename(self.path), dir=folder)
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o666 & ~umask)  # mkstemp makes it 0600; the result is an ordinary file

    def __enter__(self) -> str:
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            os.replace(self.tmp, self.path)
        elif os.path.exists(self.tmp):
            os.remove(self.tmp)


class TVMCPackage:
    """A compiled package: ``package_path``, ``graph`` (JSON text), ``params`` (bytes),
    ``lib_name`` and ``lib_path`` (``mod.so``, extracted when first asked for).

    ``mod.so`` goes to ``project_dir`` when given, else to a temporary folder that ``close()``
    (or leaving a ``with`` block, or the object's collection, or the interpreter's exit) removes:
    a compile or a run leaves no ``kiln-tvmc-pkg-*`` folder behind, also on error or Ctrl-C."""

    def __init__(self, package_path: str, project_dir: str | None = None):
        self.package_path = require_file(package_path, "package", "compile one first: tvmc compile MODEL -o PKG.tar")
        self.lib_name = "mod.so"
        self.type = "mod"  # "mlf": a Model Library Format tar (output_format="mlf"), C sources for a board
        self._project_dir = project_dir
        self._dir = None
        self._cleanup = None
        try:
            with tarfile.open(self.package_path) as tar:
                members = {m.name: m for m in tar.getmembers()}
                if "metadata.json" in members and "mod.so" not in members:
                    self._read_mlf(tar, members)
                    return
                missing = {"mod.so", "mod.json", "mod.params"} - set(members)
                if missing:
                    raise TVMCException(f"{package_path!r} is not a tvmc package (it lacks {sorted(missing)}); "
                                        "make one with tvmc compile")
                self.graph = self._read(tar, members["mod.json"]).decode("utf-8", "replace")
                self.params = self._read(tar, members["mod.params"])
        except tarfile.TarError as err:
            raise TVMCException(f"{package_path!r} is not a tvmc package .tar ({err}); make one with "
                                "tvmc compile") from None

    def _read_mlf(self, tar, members) -> None:
        import json
        meta = json.loads(self._read(tar, members["metadata.json"]))
        name = meta.get("model_name", "default")
        self.type, self.lib_name = "mlf", None
        graph = members.get(f"executor-config/graph/{name}.graph")
        self.graph = self._read(tar, graph).decode("utf-8", "replace") if graph is not None else None
        params = members.get(f"parameters/{name}.params")
        self.params = self._read(tar, params) if params is not None else None

    def _read(self, tar, member) -> bytes:
        f = tar.extractfile(member) if member.isfile() else None
        if f is None:
            raise TVMCException(f"{self.package_path!r}: {member.name} is not a regular file in the package; "
                                "make the package with tvmc compile")
        return f.read()

    @property
    def lib_path(self) -> str:
        if self.type == "mlf":
            raise TVMCException(f"{self.package_path!r} is a Model Library Format package (C sources, no mod.so): "
                                "build it for a board with micro.generate_project(template, package_path, dir)")
        if self._dir is None:
            folder = self._project_dir or tempfile.mkdtemp(prefix="kiln-tvmc-pkg-")
            if self._project_dir is None:
                self._cleanup = weakref.finalize(self, shutil.rmtree, folder, True)
            try:
                with tarfile.open(self.package_path) as tar:
                    tar.extract("mod.so", folder, filter="data")
            except (tarfile.TarError, KeyError) as err:
                self.close()
                raise TVMCException(f"cannot extract mod.so from {self.package_path!r} ({err}); make the "
                                    "package with tvmc compile") from None
            self._dir = folder
        return os.path.join(self._dir, self.lib_name)

    def close(self) -> None:
        """Remove the temporary folder of ``mod.so`` (nothing when ``project_dir`` was given)."""
        if self._cleanup is not None:
            self._cleanup()
        self._dir = None if self._project_dir is None else self._dir

    def __enter__(self) -> "TVMCPackage":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TVMCPackage({self.package_path})"
