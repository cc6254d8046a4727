"""``tvmc run``: run a package locally or on an RPC device, fill or read its inputs, time it.

>>> result = tvmc.run(package, device="cpu", rpc_key="android", hostname="127.0.0.1", port=9190)
>>> print(result.format_times()); result.outputs["output_0"]

Remote runs upload ``mod.so``, create the graph executor on the server next to it
(``graph_executor.create``) and load ``mod.params`` there; timings are taken where the model
runs (``time_evaluator``), or around input upload + run + output download with ``end_to_end``.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import numpy as np

from .common import Progress, TVMCException, require_file
from .compiler import TVMCPackage

DEVICES = ("cpu", "cl", "cuda")
FILL_MODES = ("zeros", "ones", "random")


class TVMCResult:
    """``outputs`` (``{"output_0": array, ...}``), ``times`` (seconds per repeat), ``profile``
    (per-kernel rows, with ``--profile``); ``format_times()``, ``get_top_results(n)``, ``save(path)``."""

    def __init__(self, outputs: dict, times, profile=None):
        self.outputs = outputs
        self.times = list(times or [])
        self.profile = profile

    def __str__(self) -> str:
        lines = [f"{name}: shape {list(np.shape(v))} {np.asarray(v).dtype}" for name, v in self.outputs.items()]
        return "\n".join(lines + [self.format_times()])

    def format_times(self) -> str:
        if not self.times:
            return "Execution time summary: not measured"
        ms = [t * 1e3 for t in self.times]
        std = statistics.pstdev(ms) if len(ms) > 1 else 0.0
        head = f"{'mean (ms)':>12} {'median (ms)':>12} {'max (ms)':>12} {'min (ms)':>12} {'std (ms)':>12}"
        row = (f"{statistics.fmean(ms):12.4f} {statistics.median(ms):12.4f} {max(ms):12.4f} "
               f"{min(ms):12.4f} {std:12.4f}")
        return "Execution time summary:\n" + head + "\n" + row

    def format_profile(self) -> str:
        if not self.profile:
            return ""
        total = sum(r["ms"] for r in self.profile) or 1.0
        width = max(len(r["name"]) for r in self.profile)
        lines = [f"{'Node':<{width}} {'Time (ms)':>10} {'Percent':>8}"]
        for r in sorted(self.profile, key=lambda r: -r["ms"]):
            lines.append(f"{r['name']:<{width}} {r['ms']:10.4f} {100 * r['ms'] / total:7.2f}%")
        lines.append(f"{'Total':<{width}} {total:10.4f}")
        return "\n".join(lines)

    def get_top_results(self, n: int) -> list:
        """``[(indices, values)]`` of the ``n`` largest entries of the first output (flattened)."""
        first = np.asarray(next(iter(self.outputs.values()))).ravel()
        order = np.argsort(first)[::-1][:n]
        return [(order, first[order])]

    def format_top(self, n: int) -> str:
        (order, values), = self.get_top_results(n)
        name = next(iter(self.outputs))
        lines = [f"Top {len(order)} of {name} (index: value):"]
        lines += [f"  {int(i):6d}: {float(v):.6g}" for i, v in zip(order, values)]
        return "\n".join(lines)

    def save(self, path: str) -> str:
        from .model import atomic_path
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **{k: np.asarray(v) for k, v in self.outputs.items()})
        return path


def _graph_inputs(graph_json: str, params_blob: bytes, where: str = "the package") -> dict:
    """``{name: (shape, dtype)}`` of the model's inputs (graph inputs that are not parameters)."""
    from kiln.runtime.params import load_params

    params = set(load_params(params_blob, copy=False, source=f"{where}'s mod.params"))
    try:
        graph = json.loads(graph_json)
        shapes, dtypes = graph["attrs"]["shape"][1], graph["attrs"]["dltype"][1]
        arg_nodes, nodes, row_ptr = graph["arg_nodes"], graph["nodes"], graph["node_row_ptr"]
        out = {}
        for nid in arg_nodes:
            name = nodes[nid]["name"]
            if name not in params:
                entry = row_ptr[nid]
                out[name] = (tuple(int(d) for d in shapes[entry]), str(dtypes[entry]))
        return out
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise TVMCException(f"{where}: mod.json does not describe a graph with inputs ({type(err).__name__}: "
                            f"{err}); make the package with tvmc compile") from None


def make_inputs(wanted: dict, given: dict | None, fill_mode: str, seed: int = 0) -> dict:
    """Inputs for every model input: ``given`` ones (checked), the rest filled by ``fill_mode``."""
    if fill_mode not in FILL_MODES:
        raise TVMCException(f"--fill-mode {fill_mode!r}: use one of {', '.join(FILL_MODES)}")
    given = dict(given or {})
    unknown = set(given) - set(wanted)
    if unknown:
        raise TVMCException(f"--inputs has {sorted(unknown)}, but the model's inputs are {sorted(wanted)}; "
                            "name the arrays of the .npz after them")
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, dtype) in wanted.items():
        if name in given:
            arr = np.asarray(given[name])
            if arr.shape != shape:
                raise TVMCException(f"input {name!r} has shape {list(arr.shape)} in --inputs, but the model "
                                    f"takes {list(shape)}")
            out[name] = arr.astype(dtype, copy=False)
        elif fill_mode == "zeros":
            out[name] = np.zeros(shape, dtype)
        elif fill_mode == "ones":
            out[name] = np.ones(shape, dtype)
        elif np.issubdtype(np.dtype(dtype), np.floating):
            out[name] = rng.uniform(-1, 1, shape).astype(dtype)
        else:
            out[name] = rng.integers(0, 2, shape).astype(dtype)
    return out


def _load_npz(path: str) -> dict:
    require_file(path, "--inputs file", "pass an .npz written by numpy.savez with one array per model input")
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
        raise TVMCException(f"--inputs {path!r} is not an .npz file ({err}); write it with numpy.savez") from None


def _session(hostname, port, rpc_key):
    from kiln import rpc
    from kiln.errors import RPCError

    if rpc_key:
        if not hostname:
            raise TVMCException("--rpc-key needs the tracker's address: --rpc-tracker HOST:PORT")
        try:
            tracker = rpc.connect_tracker(hostname, port)
            keys = tracker.summary()["queue_info"]
        except (OSError, RPCError) as err:
            raise TVMCException(f"the RPC tracker at {hostname}:{port} does not answer ({err}); start one "
                                f"(python -m kiln.exec.rpc_tracker --port {port}) or fix --rpc-tracker") from None
        if rpc_key not in keys:
            raise TVMCException(f"the tracker at {hostname}:{port} has no server with key {rpc_key!r} (keys: "
                                f"{', '.join(keys) or 'none'}); start one with --key {rpc_key} or fix --rpc-key")
        try:
            return tracker.request(rpc_key, timeout=60)
        except (OSError, RPCError) as err:
            raise TVMCException(f"no server with key {rpc_key!r} became free at {hostname}:{port} ({err})") from None
    try:
        return rpc.connect(hostname, port)
    except (OSError, RPCError) as err:
        raise TVMCException(f"the RPC server at {hostname}:{port} does not answer ({err}); start one "
                            f"(python -m kiln.exec.rpc_server --port {port}) or fix --hostname/--port") from None


def _device(where, device: str):
    if device not in DEVICES:
        raise TVMCException(f"--device {device!r}: use one of {', '.join(DEVICES)}")
    return getattr(where, device)(0)


def _executor(package: TVMCPackage, session, device: str, progress=lambda message: None):
    """(GraphModule, device) with the package loaded, locally or in ``session``."""
    import kiln as tvm
    from kiln.contrib import graph_executor

    if session is None:
        dev = _device(tvm, device)
        try:
            lib = tvm.runtime.load_module(package.lib_path)
        except (OSError, tvm.TVMError) as err:
            raise TVMCException(f"cannot load {package.package_path}'s mod.so here ({err}); a package built "
                                "for another device runs there: pass --rpc-key/--rpc-tracker or --hostname/--port") from None
    else:
        from .remote_graph import KernelByKernel, server_has_graph_executor
        dev = _device(session, device)
        progress(f"uploading mod.so ({os.path.getsize(package.lib_path) / 1e6:.1f} MB)")
        session.upload(package.lib_path, "mod.so")
        progress("loading mod.so on the device")
        lib = session.load_module("mod.so")
        if not server_has_graph_executor(session):  # the C server of a board: tvmc walks the graph
            module = KernelByKernel(package.graph, lib, dev)
            module.load_params(package.params)
            return module, dev
    module = graph_executor.create(package.graph, lib, dev)
    progress(f"loading the parameters ({len(package.params) / 1e6:.1f} MB)")
    module.load_params(package.params)
    return module, dev


def run_module(tvmc_package, device: str = "cpu", hostname: str | None = None, port: int = 9090,
               rpc_key: str | None = None, inputs=None, fill_mode: str = "random", benchmark: bool = True,
               repeat: int = 10, number: int = 10, end_to_end: bool = False, profile: bool = False,
               seed: int = 0) -> TVMCResult:
    """Run ``tvmc_package`` (a TVMCPackage or a path) once for its outputs, then time it."""
    if isinstance(tvmc_package, TVMCPackage):
        return _run(tvmc_package, device, hostname, port, rpc_key, inputs, fill_mode, benchmark, repeat, number,
                    end_to_end, profile, seed)
    with TVMCPackage(tvmc_package) as package:  # its mod.so folder goes when the run ends, however
        return _run(package, device, hostname, port, rpc_key, inputs, fill_mode, benchmark, repeat, number,
                    end_to_end, profile, seed)


def _run(tvmc_package, device, hostname, port, rpc_key, inputs, fill_mode, benchmark, repeat, number,
         end_to_end, profile, seed) -> TVMCResult:
    if repeat < 1 or number < 1:
        raise TVMCException(f"--repeat {repeat} and --number {number} must be >= 1")
    if isinstance(inputs, (str, os.PathLike)):
        inputs = _load_npz(os.fspath(inputs))
    values = make_inputs(_graph_inputs(tvmc_package.graph, tvmc_package.params, repr(tvmc_package.package_path)),
                         inputs, fill_mode, seed)
    progress = Progress("run")
    if rpc_key or hostname:
        progress(f"connecting to {'the tracker' if rpc_key else 'the server'} at {hostname}:{port}")
    session = _session(hostname, port, rpc_key) if (rpc_key or hostname) else None
    try:
        module, dev = _executor(tvmc_package, session, device, progress)
        progress("running the model once")
        for name, value in values.items():
            module.set_input(name, value)
        module.run()
        outputs = {f"output_{i}": module.get_output(i).numpy() for i in range(module.get_num_outputs())}
        times = []
        if benchmark:
            progress(f"timing {repeat} x {number} runs")
        if benchmark and end_to_end:
            times = _end_to_end(module, values, number, repeat)
        elif benchmark:
            times = _device_times(module, dev, number, repeat)
        if profile:
            progress("profiling every kernel")
        rows = _profile(module, number) if profile else None
        return TVMCResult(outputs, times, rows)
    finally:
        if session is not None:
            session.close()


def _device_times(module, dev, number: int, repeat: int) -> list:
    """Seconds per run, one per repeat, measured where the model runs."""
    if hasattr(module, "run_times"):
        return module.run_times(number, repeat)
    return list(module.module.time_evaluator("run", dev, number=number, repeat=repeat)().results)


def _profile(module, number: int) -> list:
    if hasattr(module, "profile"):
        return module.profile(number, 3)
    return json.loads(module["profile"](number, 3))


def _end_to_end(module, values: dict, number: int, repeat: int) -> list:
    """Seconds per run including input upload and output download, timed where tvmc runs."""
    times = []
    count = module.get_num_outputs()
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            for name, value in values.items():
                module.set_input(name, value)
            module.run()
            for i in range(count):
                module.get_output(i).numpy()
        times.append((time.perf_counter() - start) / number)
    return times
