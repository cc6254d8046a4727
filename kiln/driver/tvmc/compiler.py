"""``tvmc compile``: a model -> one package ``.tar`` holding ``mod.so`` (kernels), ``mod.json``
(graph) and ``mod.params`` (weights), the three files 002's devices load.

>>> package = tvmc.compile(model, target="llvm", tuning_records="resnet.log", package_path="resnet.tar")

``cross`` links ``mod.so`` with that compiler (002: the NDK's clang); without it, a target for
another triple links with ld.lld (no cross toolchain needed). ``dump_code`` writes the
requested sources next to the package (``<package>.relay``, ``.ll``, ``.asm``, ``.cl``).
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tarfile
import time

from kiln.errors import KilnError

from .common import Progress, TVMCException, require_file
from .model import TVMCModel, TVMCPackage, atomic_path  # noqa: F401 (TVMCPackage: tvmc.compiler.TVMCPackage)
from .target import byoc_from_cli, target_from_cli
from .transform import apply_graph_transforms

logger = logging.getLogger("kiln.tvmc")

DUMP_FORMATS = {"relay": "relay", "ll": "ll", "llvm": "ll", "asm": "asm", "s": "asm", "cl": "cl",
                "opencl": "cl", "json": "json"}


def _fcompile(cross: str | None, cross_options: str | None):
    if not cross:
        return None
    import shlex
    import shutil

    from kiln.contrib import cc
    if shutil.which(cross) is None and not os.path.isfile(cross):
        raise TVMCException(f"--cross-compiler {cross!r} is not an executable; give the path of the device's "
                            "C compiler (e.g. aarch64-linux-gnu-gcc or the NDK's aarch64-linux-android28-clang)")
    return cc.cross_compiler(cross, options=shlex.split(cross_options or ""))


def _dump(lib, mod, package_path: str, formats) -> dict:
    """Write each requested source to ``<package_path>.<fmt>``; returns {fmt: text}."""
    out = {}
    for fmt in formats:
        key = DUMP_FORMATS.get(fmt.strip().lower())
        if key is None:
            raise TVMCException(f"--dump-code {fmt!r}: use some of {', '.join(sorted(set(DUMP_FORMATS)))}")
        if key == "relay":
            text = str(mod)
        elif key == "json":
            text = lib.get_graph_json()
        else:
            modules = [lib.get_lib(), *getattr(lib.get_lib(), "imported_modules", [])]
            found = [m.get_source(key) for m in modules if key in getattr(m, "sources", {})]
            if not found:
                raise TVMCException(f"--dump-code {fmt}: the compiled module has no {fmt} source "
                                    "(OpenCL sources exist for opencl targets only)")
            text = "\n".join(found)
        out[fmt] = text
    return out


def compile_model(tvmc_model: TVMCModel, target: str, opt_level: int = 3, target_host: str | None = None,
                  tuning_records: str | None = None, package_path: str | None = None, cross: str | None = None,
                  cross_options: str | None = None, desired_layout: str | None = None, dump_code=None,
                  mixed_precision: bool = False, mixed_precision_ops=None,
                  mixed_precision_calculation_type: str = "float16", mixed_precision_acc_type: str = "float32",
                  pass_context_configs: dict | None = None, disabled_pass=None, target_options: dict | None = None,
                  mod_name: str = "default", additional_target_options: dict | None = None,
                  output_format: str = "so", quantize: str | None = None, executor=None,
                  runtime=None) -> TVMCPackage:
    """Compile ``tvmc_model`` for ``target`` into ``package_path`` (default ``module.tar``).

    ``target_options`` (TVM's ``additional_target_options``): ``{"llvm": {"mtriple": ...}}``.
    ``executor``/``runtime``: relay.backend ``Executor``/``Runtime`` (TVM 0.13's arguments);
    ``output_format="mlf"`` writes the Model Library Format tar a micro project builds (target
    ``c``, e.g. ``Executor("aot")``, ``Runtime("crt")``)."""
    if output_format not in ("so", "mlf"):
        raise TVMCException(f"output_format {output_format!r}: use 'so' (mod.so + mod.json + mod.params) or "
                            "'mlf' (Model Library Format, for microcontrollers)")
    if getattr(executor, "name", "graph") == "aot" and output_format != "mlf":
        raise TVMCException("executor 'aot' makes C for a microcontroller: compile with output_format='mlf' "
                            "(tvmc compile --output-format mlf) and build it with micro.generate_project")
    target_options = target_options or additional_target_options
    from kiln import autotvm, relay
    from kiln import transform as pass_infra

    if isinstance(tvmc_model, (str, os.PathLike)):
        from .model import load
        tvmc_model = load(tvmc_model)
    tgt = target_from_cli(target, target_host, target_options)
    if tuning_records and not os.path.exists(tuning_records):
        logger.warning("tvmc compile: the tuning records %s do not exist; building with the default "
                       "(untuned) schedules -- tune first (tvmc tune -o %s) or fix the path",
                       tuning_records, tuning_records)
        tuning_records = None
    if tuning_records:
        require_file(tuning_records, "tuning records", "pass the log written by tvmc tune -o LOG")
    if isinstance(dump_code, str):
        dump_code = [f for f in dump_code.split(",") if f.strip()]
    package_path = os.fspath(package_path or "module.tar")
    fcompile = _fcompile(cross, cross_options)
    if not (0 <= int(opt_level) <= 3):
        raise TVMCException(f"--opt-level {opt_level}: use 0, 1, 2 or 3")

    progress = Progress("compile")
    progress(f"compiling {tvmc_model.model_path or 'the model'} for {tgt}")
    mod = apply_graph_transforms(tvmc_model.mod, {
        "mixed_precision": mixed_precision, "mixed_precision_ops": mixed_precision_ops,
        "mixed_precision_calculation_type": mixed_precision_calculation_type,
        "mixed_precision_acc_type": mixed_precision_acc_type, "desired_layout": desired_layout},
        params=tvmc_model.params)
    if quantize:  # int8 post-training quantization calibrated on a .npz (docs/quantization.md)
        mod = _quantize(mod, quantize, progress)
    for name in byoc_from_cli(target):  # "dnnl, llvm": oneDNN takes what it runs, kiln the rest
        import importlib
        contrib = importlib.import_module(f"kiln.relay.op.contrib.{name}")
        mod = getattr(contrib, f"partition_for_{name}")(mod, tvmc_model.params)
    ctx = pass_infra.PassContext(opt_level=int(opt_level), config=pass_context_configs or {},
                                 disabled_pass=disabled_pass or [])
    progress("relay.build: optimizing, lowering and compiling the kernels (a minute for a ResNet-50)")
    build = {k: v for k, v in (("executor", executor), ("runtime", runtime)) if v is not None}
    with ctx:
        if tuning_records:
            with autotvm.apply_history_best(tuning_records):
                lib = relay.build(mod, target=tgt, mod_name=mod_name, **build)
        else:
            lib = relay.build(mod, target=tgt, mod_name=mod_name, **build)
    if output_format == "mlf":
        from kiln.micro import export_model_library_format
        progress(f"writing the Model Library Format {package_path}")
        try:
            export_model_library_format(lib, package_path)
        except KilnError as err:
            raise TVMCException(f"output_format='mlf': {err}") from None
        progress("done")
        return TVMCPackage(package_path)
    progress(f"linking mod.so and writing {package_path}")
    export_package(lib, package_path, fcompile)
    progress("done")
    if dump_code:
        for fmt, text in _dump(lib, mod, package_path, dump_code).items():
            with atomic_path(f"{package_path}.{fmt}") as tmp, open(tmp, "w") as f:
                f.write(text)
    return TVMCPackage(package_path)  # mod.so is extracted only if the caller asks for lib_path


def export_package(lib, package_path: str, fcompile=None) -> None:
    """Write ``mod.so`` + ``mod.json`` + ``mod.params`` of ``relay.build``'s result into one .tar."""
    from kiln.contrib.utils import tempdir

    if lib.get_lib() is None:
        raise TVMCException("the model has no kernels (it only forwards its inputs); nothing to package")
    with tempdir() as work:
        so = work.relpath("mod.so")
        if fcompile is not None:
            lib.get_lib().export_library(so, fcompile)
        else:
            lib.get_lib().export_library(so)
        members = {"mod.json": lib.get_graph_json().encode(), "mod.params": lib.save_params()}
        with atomic_path(package_path) as tmp, tarfile.open(tmp, "w") as tar:
            tar.add(so, arcname="mod.so")
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))


def _quantize(mod, calibration: str, progress):
    from kiln import relay
    from kiln.relay.quantize.dataset import from_npz

    batches = from_npz(calibration, mod["main"])
    progress(f"relay.quantize: calibrating int8 scales on {len(batches)} batch(es) of {calibration}")
    with relay.quantize.qconfig(calibrate_mode="kl_divergence", weight_scale="max", per_channel=True):
        return relay.quantize.quantize(mod, dataset=batches)
