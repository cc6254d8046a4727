"""The graph executor: runs a compiled model from its graph JSON and its kernel library.

Needs only numpy and ctypes (no compiler), so it runs on a device and inside an RPC worker.

At creation it allocates one buffer per ``storage_id`` (as large as the largest tensor assigned
to it) and makes every node output a view into its buffer, then binds each kernel call to its
argument views once (``PackedFunc.prepare``). ``run()`` then makes one C call for each run of
consecutive CPU kernels (``function.CallList`` over the library's ``__kiln_run_list``), and
calls the others (offloaded subgraphs, GPU launches) one by one from Python; on a CUDA device,
the first run() also records the launches as one CUDA graph, which later runs replay
(kiln/runtime/cuda_graphs.py; ``use_cuda_graph(False)`` or KILN_CUDA_GRAPHS=0 to not). Inputs are
copied into their buffers by ``set_input``/``load_params``, never rebound, so the prepared
calls stay valid (``share_params`` rebinds and prepares again).

A graph output whose size depends on the data (NonMaxSuppression, NonZero, Unique) is computed
into a buffer of its largest size; the graph's ``"dynamic_heads"`` name, for such a head, the
axis and the head holding its run-time length (an int64 of shape (1,)). ``get_output`` returns
the valid part only, and the length heads are not counted as outputs.

Its functions are looked up by name like any module's (``ex["run"]()``), which is what makes a
remote executor work: the RPC client only ever calls functions of a module.
"""

from __future__ import annotations

import json
import math
from itertools import groupby

import numpy as np

from .. import limits
from . import cuda_graphs
from ..errors import KilnError
from .dlpack import DTYPES
from .function import CallList, run_list_address
from .module import Module
from .ndarray import NDArray, empty
from .params import load_params


class GraphExecutor(Module):
    """``GraphExecutor(graph_json, lib, dev)``; usually wrapped by ``contrib.graph_executor.GraphModule``."""

    type_key = "GraphExecutor"

    def __init__(self, graph_json: str, lib: Module, dev):
        super().__init__()
        if getattr(dev, "session", None) is not None:
            raise KilnError(f"GraphExecutor: {dev} is a remote device; create the executor through "
                            "kiln.contrib.graph_executor.create(graph_json, remote_lib, remote_dev)")
        self.lib, self.device = lib, dev
        graph = _parse(graph_json)
        self.nodes = graph["nodes"]
        self.row_ptr = graph["node_row_ptr"]
        self.heads = graph["heads"]
        # head -> (axis, length head): outputs valid only up to a run-time length
        self.dynamic = {h: (axis, n) for h, axis, n in graph.get("dynamic_heads", [])}
        self.num_outputs = len(self.heads) - len({n for _, n in self.dynamic.values()})
        self.input_nodes = graph["arg_nodes"]
        self.input_index = {self.nodes[n]["name"]: i for i, n in enumerate(self.input_nodes)}
        self.entries = self._allocate(graph["attrs"])
        self.kernels = self._bind_kernels()
        self._plan = self._steps = None
        # CUDA: the launches of one run() recorded as a CUDA graph and replayed (cuda_graphs.py)
        self._replay = None
        self._use_cuda_graph = dev.device_type == 2 and cuda_graphs.enabled()
        self.cuda_graph_failure: str | None = None  # why a CUDA model runs kernel by kernel
        self._functions = {
            "set_input": self.set_input, "get_input": self.get_input, "get_output": self.get_output,
            "get_num_outputs": self.get_num_outputs, "get_num_inputs": self.get_num_inputs,
            "get_input_index": self.get_input_index, "run": self.run, "load_params": self.load_params,
            "share_params": self.share_params, "get_input_names": self.get_input_names,
            "profile": self.profile, "use_cuda_graph": self.use_cuda_graph,
        }

    # -- setup ---------------------------------------------------------------------------------
    def _allocate(self, attrs) -> list:
        shapes, dtypes, storage = attrs["shape"][1], attrs["dltype"][1], attrs["storage_id"][1]
        # "storage_scope" (adreno builds): "global.texture*" entries are RGBA images (docs/adreno.md).
        scopes = attrs.get("storage_scope", ["list_str", ["global"] * len(storage)])[1]
        sizes: dict[int, int] = {}
        images: dict[int, NDArray] = {}
        for shape, dtype, sid, scope in zip(shapes, dtypes, storage, scopes):
            if scope != "global":  # entries of one image storage share shape and dtype
                if sid not in images:
                    images[sid] = self._image(shape, dtype, scope)
                continue
            sizes[sid] = max(sizes.get(sid, 0), math.prod(shape) * DTYPES[dtype][1] // 8)
        # 64-byte aligned raw buffers; a typed view per entry over the start of its buffer.
        pool = {sid: empty((max(n, 1),), "uint8", self.device) for sid, n in sizes.items()}
        return [images[sid] if scope != "global" else NDArray(pool[sid]._tensor.data, shape, dtype, self.device, pool[sid])
                for shape, dtype, sid, scope in zip(shapes, dtypes, storage, scopes)]

    def _image(self, shape, dtype: str, scope: str) -> NDArray:
        """An image folded as the library's kernels were: within its -texture_spatial_limit."""
        from . import devices

        api = devices.get_api(self.device.device_type)
        if not hasattr(api, "alloc_texture"):
            raise KilnError(f"graph executor: entry scope {scope!r} needs images; {self.device} has none "
                            "(texture scopes are for OpenCL devices)")
        data, owner = api.alloc_texture(tuple(shape), dtype, scope, self.device.device_id,
                                        limit=_texture_limit(self.lib))
        return NDArray(data, tuple(shape), dtype, self.device, owner)

    def _bind_kernels(self) -> list:
        kernels = []
        for nid, node in enumerate(self.nodes):
            if node["op"] == "null":
                continue
            if node["op"] != "tvm_op":
                raise KilnError(f"graph node {nid} ({node['name']}): op {node['op']!r} is not runnable; "
                                "the graph executor runs 'tvm_op' nodes")
            name = node.get("attrs", {}).get("func_name", node["name"])
            try:
                func = self.lib.get_function(name, query_imports=True)  # offloaded: json_runtime.py
            except AttributeError:
                raise KilnError(f"graph node {nid}: the library has no kernel {name!r}; was the graph JSON "
                                "built together with this library?") from None
            args = [self.entries[self.row_ptr[i] + k] for i, k, *_ in node.get("inputs", [])]
            args += [self.entries[e] for e in range(self.row_ptr[nid], self.row_ptr[nid + 1])]
            kernels.append((nid, name, func, args))
        return kernels

    def _prepared(self) -> list:
        if self._plan is None:
            plan = []
            for nid, name, func, args in self.kernels:
                try:
                    plan.append(func.prepare(*args))
                except (TypeError, ValueError) as err:
                    raise KilnError(f"graph node {nid} ({name}): the graph and the kernel disagree: {err}") from None
            self._plan = plan
        return self._plan

    def _run_steps(self) -> list:
        """(first kernel, callable) pairs: a CallList per stretch of CPU kernels that C can call
        in a row, a bare prepared call for each other kernel. A callable returns None, or
        (offset of the failed kernel from first, its result)."""
        if self._steps is None:
            entries = [(k, self.kernels[k][2], prepared, run_list_address(self.kernels[k][2]))
                       for k, prepared in enumerate(self._prepared())]
            steps = []
            for native, stretch in groupby(entries, key=lambda e: e[3] is not None):
                stretch = list(stretch)
                if native:
                    first, _, _, address = stretch[0]
                    steps.append((first, CallList(address, [(func, prepared) for _, func, prepared, _ in stretch])))
                else:
                    steps.extend((k, _single(*prepared[:4])) for k, _, prepared, _ in stretch)
            self._steps = steps
        return self._steps

    # -- running -------------------------------------------------------------------------------
    def run(self) -> None:
        """Execute every kernel in order (on CUDA, after the first run, as one CUDA graph)."""
        if self._replay is not None:
            return self._replay()
        self._run_each()
        if self._use_cuda_graph:
            self._record()

    def use_cuda_graph(self, enabled: bool = True) -> None:
        """On a CUDA device, replay run()'s launches as one CUDA graph (the default, unless
        KILN_CUDA_GRAPHS=0) or launch the kernels one by one."""
        self._use_cuda_graph = bool(enabled) and self.device.device_type == 2
        self._replay = None

    def _record(self) -> None:
        self._use_cuda_graph = False  # one try
        others = [name for _, name, func, _ in self.kernels if getattr(func, "_device_type", None) != 2]
        if others:
            self.cuda_graph_failure = f"{len(others)} kernels are not CUDA launches (first: {others[0]})"
            return
        self._replay, self.cuda_graph_failure = cuda_graphs.record(self._run_each, self.device.device_id)

    def _run_each(self) -> None:
        for first, call in self._run_steps():
            failed = call()
            if failed is not None:
                k, rc = first + failed[0], failed[1]
                nid, name, func, _ = self.kernels[k]
                try:
                    func._raise(rc)
                except KilnError as err:
                    raise KilnError(f"graph node {nid} ({name}) failed: {err}") from None

    def profile(self, number: int = 10, repeat: int = 3) -> str:
        """Time every kernel alone (``number`` calls per repeat, after one warm-up call); JSON list of
        ``{"node", "name", "ms"}`` with the median over repeats of the per-call mean. A string, so
        it travels over RPC as one value."""
        import time

        self.run()  # every kernel warm once, inputs in place
        sync = getattr(self.device, "sync", lambda: None)  # GPU launches return before the kernel ends
        sync()
        rows = []
        for (cfunc, args, codes, n, _), (nid, name, _, _) in zip(self._prepared(), self.kernels):
            times = []
            for _ in range(max(1, int(repeat))):
                start = time.perf_counter()
                for _ in range(max(1, int(number))):
                    cfunc(args, codes, n)
                sync()
                times.append((time.perf_counter() - start) / max(1, int(number)))
            rows.append({"node": nid, "name": name, "ms": sorted(times)[len(times) // 2] * 1e3})
        return json.dumps(rows)

    # -- inputs and outputs --------------------------------------------------------------------
    def _input_entry(self, key) -> int:
        index = self.get_input_index(key) if isinstance(key, str) else int(key)
        if not 0 <= index < len(self.input_nodes):
            names = ", ".join(self.input_index)
            raise KeyError(f"graph executor: no input {key!r}; inputs: {names}")
        return self.row_ptr[self.input_nodes[index]]

    def get_input_index(self, name: str) -> int:
        """Index of input ``name``, or -1."""
        return self.input_index.get(name, -1)

    def get_input_names(self) -> list:
        return list(self.input_index)

    def set_input(self, key, value) -> None:
        """Copy ``value`` (NDArray or numpy array) into input ``key`` (name or index)."""
        dst = self.entries[self._input_entry(key)]
        if isinstance(value, NDArray) and value.shape == dst.shape and value.dtype == dst.dtype:
            dst.copyfrom(value)
        else:
            src = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
            if src.shape != dst.shape:
                raise ValueError(f"set_input: input {key!r} has shape {dst.shape}, got {src.shape}")
            if src.dtype.name == "bfloat16" and dst.dtype == "uint16":  # ml_dtypes: its bits, as built
                src = src.view(np.uint16)
            if src.dtype != np.dtype(dst.dtype):
                hint = (" (a bfloat16 input is held as its 16-bit patterns: pass an ml_dtypes.bfloat16 array or "
                        "its .view(np.uint16))" if dst.dtype == "uint16" and src.dtype.kind == "f" else "")
                raise ValueError(f"set_input: input {key!r} has dtype {dst.dtype}, got {src.dtype}; "
                                 f"convert with .astype('{dst.dtype}'){hint}")
            dst.copyfrom(src)
        for _, _, func, args in self.kernels:  # offloaded functions may keep a converted copy (oneDNN)
            if hasattr(func, "input_changed") and any(a is dst for a in args):
                func.input_changed(dst)

    def get_input(self, key, out=None):
        arr = self.entries[self._input_entry(key)]
        return out.copyfrom(arr) if out is not None else arr

    def get_num_inputs(self) -> int:
        return len(self.input_nodes)

    def get_num_outputs(self) -> int:
        return self.num_outputs

    def get_output(self, index: int, out=None):
        """Output ``index``: the executor's own array (overwritten by the next run), or copied
        into ``out`` when given. An output of data-dependent size is its valid part: a view of
        the buffer's start when the dynamic axis is the first, else a copy."""
        if not 0 <= int(index) < self.num_outputs:
            raise IndexError(f"get_output: index {index} out of range; the graph has {self.num_outputs} outputs")
        arr = self._head(int(index))
        if int(index) in self.dynamic:
            arr = self._valid_part(arr, *self.dynamic[int(index)])
        return out.copyfrom(arr) if out is not None else arr

    def _head(self, index: int) -> NDArray:
        nid, k, *_ = self.heads[index]
        return self.entries[self.row_ptr[nid] + k]

    def _valid_part(self, arr: NDArray, axis: int, length_head: int) -> NDArray:
        length = int(self._head(length_head).numpy().reshape(-1)[0])
        if not 0 <= length <= arr.shape[axis]:
            raise KilnError(f"graph executor: a kernel reported {length} valid entries along axis {axis} of an "
                            f"output of shape {arr.shape}; the kernel or the graph JSON is corrupt")
        shape = arr.shape[:axis] + (length,) + arr.shape[axis + 1:]
        if axis == 0 or math.prod(arr.shape[:axis]) == 1:
            return NDArray(arr._tensor.data, shape, arr.dtype, arr.device, arr, arr._tensor.byte_offset)
        from .ndarray import array
        return array(np.ascontiguousarray(np.take(arr.numpy(), np.arange(length), axis=axis)), arr.device)

    def load_params(self, blob) -> None:
        """Copy the arrays of a parameter blob into the inputs of the same names (others are ignored,
        as parameters folded away at build time have no input)."""
        for name, value in load_params(blob, copy=False).items():
            if name in self.input_index:
                self.set_input(name, value)

    def share_params(self, other: "GraphExecutor", blob) -> None:
        """Use ``other``'s arrays for the parameters named in ``blob`` (no copy; both must come from
        the same graph)."""
        for name in load_params(blob, copy=False):
            if name in self.input_index and name in other.input_index:
                mine, theirs = self._input_entry(name), other._input_entry(name)
                if self.entries[mine].shape != other.entries[theirs].shape:
                    raise ValueError(f"share_params: {name!r} has shape {self.entries[mine].shape} here and "
                                     f"{other.entries[theirs].shape} in the other executor")
                self.entries[mine] = other.entries[theirs]
        self.kernels = self._bind_kernels()
        self._plan = self._steps = self._replay = None
        self._use_cuda_graph = self.device.device_type == 2 and cuda_graphs.enabled()

    # -- module interface ----------------------------------------------------------------------
    def function_names(self) -> list:
        return list(self._functions)

    def _get_function(self, name: str):
        return self._functions.get(name)

    def __repr__(self) -> str:
        return f"GraphExecutor({len(self.kernels)} kernels, inputs=[{', '.join(self.input_index)}], {self.device})"


def _single(cfunc, args, codes, n):
    """A prepared call in run()'s step form: None, or (0, result) when it fails."""
    def call():
        rc = cfunc(args, codes, n)
        return (0, rc) if rc else None
    return call


def _texture_limit(lib) -> int:
    """The -texture_spatial_limit the library's kernels were folded within (the compiler's
    default, 8192, when its target names none: kiln/tir/transform/texture.py DEFAULT_LIMIT)."""
    import re

    for mod in [lib] + list(getattr(lib, "imported_modules", [])):
        target = str((getattr(mod, "metadata", None) or {}).get("target", ""))
        found = re.search(r"-texture_spatial_limit=(\d+)", target)
        if found:
            return int(found.group(1))
    return 8192


def _parse(graph_json) -> dict:
    """The graph, once every field the executor indexes is checked (kiln/limits.py): a graph JSON
    may come from another machine, and each unchecked index was a raw KeyError/IndexError, and
    each unchecked shape a numpy allocation of any size."""
    src = "graph executor: the graph JSON"
    if isinstance(graph_json, (bytes, bytearray)):
        try:
            graph_json = bytes(graph_json).decode()
        except UnicodeDecodeError:
            raise limits.fail(src, "text", "is not UTF-8", "pass lib.get_graph_json() of relay.build") from None
    try:
        graph = json.loads(graph_json) if isinstance(graph_json, str) else graph_json
    except json.JSONDecodeError as err:
        raise KilnError(f"graph executor: the graph is not valid JSON ({err})") from None
    except RecursionError:  # the json module's depth limit
        raise limits.fail(src, "text", "nests too deeply to be a graph", "pass lib.get_graph_json()") from None
    if not isinstance(graph, dict):
        raise limits.fail(src, "top level", f"is a {type(graph).__name__}, not an object", "pass lib.get_graph_json()")
    missing = [k for k in ("nodes", "arg_nodes", "heads", "attrs", "node_row_ptr") if k not in graph]
    if missing:
        raise KilnError(f"graph executor: the graph JSON lacks {missing}; pass lib.get_graph_json() of relay.build")
    nodes, attrs, row_ptr = graph["nodes"], graph["attrs"], graph["node_row_ptr"]
    _need(isinstance(nodes, list), "nodes", "is not a list")
    _need(isinstance(attrs, dict), "attrs", "is not an object")
    for key in ("shape", "dltype", "storage_id"):
        if key not in attrs:
            raise KilnError(f"graph executor: the graph JSON attrs lack {key!r}")
    _need(isinstance(row_ptr, list) and len(row_ptr) == len(nodes) + 1, "node_row_ptr",
          f"must list {len(nodes) + 1} offsets (one per node, plus the end)")
    for i, r in enumerate(row_ptr):
        limits.count(r, file=src, field=f"node_row_ptr[{i}]")
        _need(i == 0 and r == 0 or i > 0 and r >= row_ptr[i - 1], f"node_row_ptr[{i}]",
              "must start at 0 and never decrease")
    n_entries = row_ptr[-1]
    columns = {}
    for key in ("shape", "dltype", "storage_id", "storage_scope"):
        if key not in attrs:
            continue
        value = attrs[key]
        _need(isinstance(value, list) and len(value) == 2 and isinstance(value[1], list), f"attrs.{key}",
              "must be [type, list]")
        columns[key] = value[1]
    if any(len(columns[k]) != n_entries for k in columns):
        raise KilnError("graph executor: the graph JSON attrs do not have one shape/dltype/storage_id per entry")
    storage: dict = {}
    for e, (shape, dtype, sid) in enumerate(zip(columns["shape"], columns["dltype"], columns["storage_id"])):
        _need(isinstance(dtype, str) and dtype in DTYPES, f"attrs.dltype[{e}]", f"{str(dtype)[:20]!r} is not a dtype")
        limits.count(sid, file=src, field=f"attrs.storage_id[{e}]", most=n_entries)
        nbytes = limits.tensor(shape, DTYPES[dtype][1] // 8, file=src, field=f"attrs.shape[{e}]")
        storage[sid] = max(storage.get(sid, 0), nbytes)
    limits.within(sum(storage.values()), limits.load_limit(), file=src, field="the buffers of all storage ids")
    if "storage_scope" in columns:
        _need(all(isinstance(s, str) for s in columns["storage_scope"]), "attrs.storage_scope", "must hold strings")
    for nid, node in enumerate(nodes):
        where = f"nodes[{nid}]"
        _need(isinstance(node, dict) and isinstance(node.get("op"), str) and isinstance(node.get("name"), str),
              where, "must be an object with an 'op' and a 'name' string")
        _need(isinstance(node.get("attrs", {}), dict), f"{where}.attrs", "is not an object")
        func = node.get("attrs", {}).get("func_name", node["name"])
        _need(isinstance(func, str), f"{where}.attrs.func_name", "is not a string")
        inputs = node.get("inputs", [])
        _need(isinstance(inputs, list), f"{where}.inputs", "is not a list")
        for k, entry in enumerate(inputs):
            _entry(entry, nid, row_ptr, f"{where}.inputs[{k}]")
    heads, args = graph["heads"], graph["arg_nodes"]
    _need(isinstance(heads, list) and isinstance(args, list), "heads/arg_nodes", "must be lists")
    for k, entry in enumerate(heads):
        _entry(entry, len(nodes), row_ptr, f"heads[{k}]")
    dynamic = graph.get("dynamic_heads", [])
    _need(isinstance(dynamic, list), "dynamic_heads", "is not a list")
    lengths = {d[2] for d in dynamic if isinstance(d, list) and len(d) == 3}
    for k, d in enumerate(dynamic):
        _need(isinstance(d, list) and len(d) == 3 and all(type(v) is int for v in d), f"dynamic_heads[{k}]",
              "must be [head, axis, length head]")
        _need(0 <= d[0] < len(heads) - len(lengths) <= d[2] < len(heads), f"dynamic_heads[{k}]",
              "must name an output head and a length head after the outputs")
        _need(0 <= d[1] < len(columns["shape"][row_ptr[heads[d[0]][0]] + heads[d[0]][1]]),
              f"dynamic_heads[{k}]", "names an axis the head does not have")
    for k, nid in enumerate(args):
        limits.count(nid, file=src, field=f"arg_nodes[{k}]", most=len(nodes) - 1)
        _need(row_ptr[nid + 1] > row_ptr[nid], f"arg_nodes[{k}]", f"names node {nid}, which has no output")
    return graph


def _need(ok, field: str, problem: str) -> None:
    if not ok:
        raise limits.fail("graph executor: the graph JSON", field, problem,
                          "pass lib.get_graph_json() of the relay.build that made the library")


def _entry(entry, before: int, row_ptr: list, field: str) -> None:
    """[node id, output index, version]: an output of a node before ``before``."""
    _need(isinstance(entry, list) and len(entry) >= 2 and all(type(v) is int for v in entry[:2]), field,
          f"is {str(entry)[:40]}, not [node, output, version]")
    nid, k = entry[0], entry[1]
    _need(0 <= nid < before, field, f"reads node {nid}; only nodes 0..{before - 1} come before it")
    _need(0 <= k < row_ptr[nid + 1] - row_ptr[nid], field, f"reads output {k} of node {nid}, which has "
          f"{row_ptr[nid + 1] - row_ptr[nid]}")


def create(graph_json: str, lib: Module, dev) -> GraphExecutor:
    """``create(graph_json, lib, dev)``: the executor of a graph over a kernel library on ``dev``."""
    return GraphExecutor(graph_json, lib, dev)
