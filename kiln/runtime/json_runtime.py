"""JSON runtime modules: run the subgraphs a library offloads to an external compiler.

``relay.build`` of a partitioned model links one extra data symbol into the library:

    __kiln_external_modules   NUL-terminated JSON list of {"type_key", "symbol", "source"}

(``source`` is the JSON graph, kiln/relay/backend/contrib/json_graph.py). Every loader (the
CompiledModule ``relay.build`` returns, a ``.so``/``.tar`` from ``load_module``, an RPC server)
turns each entry into a ``JSONRuntimeModule`` among ``imported_modules``: its ``type_key`` is
the compiler ("dnnl") and ``get_source()`` the JSON. The graph JSON names the function by its
symbol, and the graph executor finds it there (``get_function(name, query_imports=True)``).

The oneDNN executor calls a small C++ shim (src/contrib/dnnl_json_runtime.cc) compiled on
first use against the system's oneDNN headers (Debian: ``libdnnl-dev``) and cached.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..errors import KilnError
from .module import Module

SYMBOL = "__kiln_external_modules"
INSTALL_HINT = ("oneDNN is not installed: install Debian's libdnnl-dev (apt-get install -y libdnnl-dev; "
                "'make system-packages' does it) and a C++ compiler")


class JSONRuntimeModule(Module):
    """One offloaded function: ``type_key`` names its compiler, ``get_source()`` is its JSON."""

    def __init__(self, type_key: str, symbol: str, source: str):
        super().__init__()
        self.type_key = type_key
        self.symbol = symbol
        self.source = source
        self._graph = None

    @property
    def graph(self) -> dict:
        if self._graph is None:
            self._graph = json.loads(self.source)
        return self._graph

    @property
    def entry_name(self) -> str:
        return self.symbol

    def function_names(self) -> list[str]:
        return [self.symbol]

    def get_source(self, fmt: str = "") -> str:
        return self.source

    def _get_function(self, name: str):
        if name != self.symbol:
            return None
        executor = EXECUTORS.get(self.type_key)
        if executor is None:
            raise KilnError(f"{self.symbol}: this runtime cannot run '{self.type_key}' subgraphs "
                            f"(it runs {sorted(EXECUTORS)})")
        return JSONFunction(self.symbol, executor(self.graph))

    def __repr__(self) -> str:
        return f"JSONRuntimeModule({self.type_key}, {self.symbol}, {len(self.graph['nodes'])} nodes)"


class JSONFunction:
    """The graph executor's view of an offloaded function: ``f(*inputs, *constants, *outputs)``
    and ``prepare`` (a callable taking the executor's (args, codes, n) and returning 0 or -1)."""

    def __init__(self, name: str, executor):
        self.name = name
        self.executor = executor
        self._error = None

    def __call__(self, *arrays) -> None:
        self.executor.bind(arrays)()

    def input_changed(self, array) -> None:
        """``array`` (one of the tensors this function reads) was overwritten in place: the graph
        executor's ``set_input``. Executors that keep converted copies (oneDNN's reordered
        weights) convert it again on the next run."""
        changed = getattr(self.executor, "input_changed", None)
        if changed is not None:
            changed(_address(array))

    def prepare(self, *arrays):
        run = self.executor.bind(arrays)

        def call(_args, _codes, _n):
            try:
                run()
                return 0
            except Exception as err:  # noqa: BLE001 - re-raised by _raise in the caller
                self._error = err
                return -1

        return call, None, None, 0, arrays

    def _raise(self, rc: int):
        err, self._error = self._error, None
        raise KilnError(f"{self.name}: {err}" if err else f"{self.name} returned {rc}")


def from_library(text: str) -> list[JSONRuntimeModule]:
    return [JSONRuntimeModule(e["type_key"], e["symbol"], e["source"]) for e in json.loads(text)]


def to_library(modules) -> str:
    return json.dumps([{"type_key": m.type_key, "symbol": m.symbol, "source": m.source} for m in modules])


def read_symbol(lib: ctypes.CDLL) -> list[JSONRuntimeModule]:
    """The modules a loaded library carries (none when it has no ``__kiln_external_modules``)."""
    try:
        address = ctypes.addressof(ctypes.c_char.in_dll(lib, SYMBOL))
    except ValueError:
        return []
    return from_library(ctypes.string_at(address).decode())


# -- oneDNN ---------------------------------------------------------------------------------------
_shim = None


def dnnl_shim() -> ctypes.CDLL:
    """The compiled shim (built once per source version into the kiln cache directory)."""
    global _shim
    if _shim is not None:
        return _shim
    src = Path(__file__).resolve().parents[2] / "src" / "contrib" / "dnnl_json_runtime.cc"
    if not src.is_file():
        raise KilnError(f"the oneDNN runtime shim {src} is missing; run kiln from its source tree")
    text = src.read_bytes()
    cache = os.environ.get("KILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kiln")
    if cache in ("off", ""):
        cache = tempfile.gettempdir()
    os.makedirs(cache, exist_ok=True)
    so = os.path.join(cache, f"kiln-dnnl-{hashlib.sha256(text).hexdigest()[:16]}.so")
    if not os.path.exists(so):
        if not any(os.path.exists(os.path.join(d, "dnnl.hpp")) for d in ("/usr/include", "/usr/local/include")):
            raise KilnError(INSTALL_HINT)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
        os.close(fd)
        try:
            proc = subprocess.run(["c++", "-O2", "-std=c++17", "-shared", "-fPIC", str(src), "-o", tmp, "-ldnnl"],
                                  capture_output=True, text=True)
            if proc.returncode:
                raise KilnError(f"{INSTALL_HINT}. Compiling {src.name} failed:\n{proc.stderr[-2000:]}")
            os.replace(tmp, so)
        except FileNotFoundError:
            raise KilnError(INSTALL_HINT) from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    # oneDNN's OpenMP threads otherwise spin between primitives, fighting kiln's own pool (which
    # spins between its kernels) for the same cores: ResNet-18 on 2 busy cores ran 7x slower.
    # libgomp reads this once, when the shim loads it.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    lib = ctypes.CDLL(so)
    vp, i64p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
    lib.kd_last_error.restype = ctypes.c_char_p
    f32, i32 = ctypes.c_float, ctypes.c_int
    for name, args in (("kd_conv2d_create", [i64p, i32, ctypes.c_char_p, f32, f32, i32]),
                       ("kd_dense_create", [ctypes.c_int64] * 3 + [i32, ctypes.c_char_p, f32, f32]),
                       ("kd_pool2d_create", [i64p, i32, i32]),
                       ("kd_eltwise_create", [i32, i64p, i32, f32, f32, i32]),
                       ("kd_binary_create", [i32, i64p, i64p, i32, i32]),
                       ("kd_reorder_create", [i64p, i32]),
                       ("kd_softmax_create", [i32, i64p, i32, i32]),
                       ("kd_matmul_create", [ctypes.c_int64] * 4 + [i32])):
        getattr(lib, name).restype = vp
        getattr(lib, name).argtypes = args
    lib.kd_layer_exec.argtypes = [vp] * 6
    lib.kd_layer_forget.argtypes = [vp]
    lib.kd_simple_exec.argtypes = [vp] * 4
    lib.kd_layer_free.argtypes = lib.kd_simple_free.argtypes = [vp]
    _shim = lib
    return lib


def _omp_set_num_threads(n: int) -> None:
    fn = getattr(dnnl_shim(), "omp_set_num_threads", None)  # libgomp, which libdnnl links
    if fn is not None:
        fn(int(n))


def entry_shape(graph: dict, entry: int) -> list:
    """The shape of graph entry ``entry`` of an offloaded subgraph: inputs, then constants, then
    one per node."""
    n_inputs, n_in = len(graph["inputs"]), len(graph["inputs"]) + len(graph["constants"])
    if entry < n_inputs:
        return graph["inputs"][entry]["shape"]
    if entry < n_in:
        return graph["constants"][entry - n_inputs]["shape"]
    return graph["nodes"][entry - n_in]["shape"]


def load_error(load) -> str | None:
    """None when ``load()`` (a library loader that raises KilnError) succeeds, else its message."""
    try:
        load()
        return None
    except KilnError as err:
        return str(err)


def dnnl_available() -> str | None:
    """None when oneDNN runs here, else the reason it does not."""
    return load_error(dnnl_shim)


def _dims(values) -> ctypes.Array:
    return (ctypes.c_int64 * len(values))(*[int(v) for v in values])


_ELTWISE = {"relu": 0, "sigmoid": 1, "tanh": 2, "clip": 3, "exp": 4, "sqrt": 5, "abs": 6, "gelu": 7}
_BINARY = {"add": 0, "mul": 1, "sub": 2, "max": 3, "min": 4, "div": 5}
_POOL = {"max": 0, "avg_pad": 1, "avg": 2}


class DNNLExecutor:
    """Creates one oneDNN primitive per JSON node (at load) and runs them in order.

    Values inside the subgraph live in private buffers; 4-d ones computed by convolutions (and
    the pools, elementwise and binary ops after them) are channels-last, which oneDNN's
    convolutions run on, so only the subgraph's inputs and outputs change layout. An output
    computed channels-last is reordered into the caller's NCHW tensor at the end."""

    def __init__(self, graph: dict):
        from .. import config

        self.lib = dnnl_shim()
        self.graph = graph
        # kiln's thread setting (KILN_NUM_THREADS, config.override) when the module is loaded;
        # 0 leaves oneDNN to OpenMP (OMP_NUM_THREADS, else one thread per core).
        self.threads = int(config.get().num_threads)
        self.n_in = len(graph["inputs"]) + len(graph["constants"])
        self.ops = []  # (exec function, handle, entry ids...)
        self._bound_weights: list = []  # (layer handle, weight pointer) of the last bind
        self._buffers = {}
        self.nhwc = {}  # entry -> channels-last?
        outputs = list(graph["outputs"])
        self.out_entry = {}  # graph output entry -> where the node writes it
        for k, node in enumerate(graph["nodes"]):
            entry = self.n_in + k
            self.nhwc[entry] = self._layout(node)
            if entry not in outputs or self.nhwc[entry]:
                self._buffers[entry] = np.empty(int(np.prod(node["shape"])) + 16, "float32")
            self.ops.append(self._create(node, entry))
        for k, entry in enumerate(outputs):
            if self.nhwc.get(entry):  # the caller's tensor is NCHW: one reorder into it
                handle = self.lib.kd_reorder_create(_dims(self._shape(entry)), 0)
                self._check(handle, {"name": "reorder", "attrs": {}})
                self.ops.append((self.lib.kd_simple_exec, handle, entry, None, ("out", k)))

    def _layout(self, node) -> bool:
        if len(node["shape"]) != 4:
            return False
        if node["kind"] == "conv2d":
            return True
        if node["kind"] in ("pool2d", "eltwise", "binary", "softmax"):
            return self.nhwc.get(node["inputs"][0], False)
        return False

    def _create(self, node: dict, entry: int):
        lib, a, ins = self.lib, node["attrs"], node["inputs"]
        if node["dtype"] != "float32":
            raise KilnError(f"{node['name']}: oneDNN runs float32 here, not {node['dtype']}")
        kind = node["kind"]
        if kind in ("conv2d", "dense"):
            shapes = {i: self._shape(i) for i in ins}
            post = a["post"].encode()
            if kind == "conv2d":
                n, c, h, w = shapes[ins[0]]
                o = shapes[ins[1]][0]
                oh, ow = node["shape"][2:]
                pt, pl, pb, pr = a["padding"]
                dims = [n, c, h, w, o, *a["kernel"], oh, ow, *a["strides"], pt, pl, pb, pr, *a["dilation"], a["groups"]]
                flags = (self._nhwc(ins[0]) | 2 * self.nhwc[entry]
                         | (4 * self._nhwc(ins[-1]) if "s" in a["post"] else 0))
                handle = lib.kd_conv2d_create(_dims(dims), int(a["bias"]), post, 0.0, 0.0, flags)
            else:
                (m, k_), units = shapes[ins[0]], shapes[ins[1]][0]
                handle = lib.kd_dense_create(m, k_, units, int(a["bias"]), post, 0.0, 0.0)
            self._check(handle, node)
            bias = ins[2] if a["bias"] else None
            addend = ins[-1] if "s" in a["post"] else None
            if not len(self.graph["inputs"]) <= ins[1] < self.n_in:
                # a weight that is not one of the function's constants may change from run to run
                # at the same address (a graph input, a value computed before the layer): the
                # shim's copy in oneDNN's layout is made again every run
                self.ops.append((lib.kd_layer_forget, handle))
            return (lib.kd_layer_exec, handle, ins[0], ins[1], bias, addend, entry)
        if kind == "pool2d":
            n, c, h, w = self._shape(ins[0])
            oh, ow = node["shape"][2:]
            dims = [n, c, h, w, oh, ow, *a["pool_size"], *a["strides"], *a["padding"]]
            handle = lib.kd_pool2d_create(_dims(dims), _POOL[a["alg"]], self.nhwc[entry])
        elif kind == "eltwise":
            out = node["shape"]
            handle = lib.kd_eltwise_create(len(out), _dims(out), _ELTWISE[a["alg"]], a["alpha"], a["beta"],
                                           self.nhwc[entry])
        elif kind == "binary":
            out = node["shape"]
            b_nhwc = self._nhwc(ins[1]) and list(a["b_shape"]) == list(out)
            handle = lib.kd_binary_create(len(out), _dims(out), _dims(a["b_shape"]), _BINARY[a["alg"]],
                                          self.nhwc[entry] | 2 * b_nhwc)
        elif kind == "softmax":
            out = node["shape"]
            handle = lib.kd_softmax_create(len(out), _dims(out), int(a["axis"]) % len(out), self.nhwc[entry])
        elif kind == "matmul":
            batch, m, k_ = self._shape(ins[0])
            n = node["shape"][2]
            handle = lib.kd_matmul_create(batch, m, k_, n, int(a["transpose_b"]))
        else:
            raise KilnError(f"{node['name']}: the oneDNN runtime has no node kind {kind!r}")
        self._check(handle, node)
        return (lib.kd_simple_exec, handle, ins[0], ins[1] if len(ins) > 1 else None, entry)

    def _nhwc(self, entry: int) -> int:
        return int(self.nhwc.get(entry, False))

    def _shape(self, entry: int) -> list:
        return entry_shape(self.graph, entry)

    def _check(self, handle, node) -> None:
        if not handle:
            raise KilnError(f"oneDNN cannot run {node['name']} {node['attrs']}: "
                            f"{self.lib.kd_last_error().decode()}")

    def bind(self, arrays):
        """A function running the graph on ``arrays`` (inputs, constants, outputs: NDArrays)."""
        n_out = len(self.graph["outputs"])
        if len(arrays) != self.n_in + n_out:
            raise KilnError(f"{self.graph['symbol']} takes {self.n_in + n_out} tensors, got {len(arrays)}")
        ptr = {i: _address(a) for i, a in enumerate(arrays[:self.n_in])}
        for k, (e, a) in enumerate(zip(self.graph["outputs"], arrays[self.n_in:])):
            ptr[e] = ptr[("out", k)] = _address(a)
        ptr.update({e: b.ctypes.data for e, b in self._buffers.items()})
        calls = [(op[0], op[1], *[ptr.get(e) if e is not None else None for e in op[2:]]) for op in self.ops]
        self._bound_weights = [(c[1], c[3]) for c in calls if c[0] is self.lib.kd_layer_exec]
        lib = self.lib
        threads = self.threads

        def run():
            if threads:  # OpenMP's thread count is per calling thread: set it where the run happens
                _omp_set_num_threads(threads)
            for fn, *args in calls:
                if fn(*args):
                    raise KilnError(lib.kd_last_error().decode())
        return run

    def input_changed(self, address: int) -> None:
        """The tensor at ``address`` was overwritten: layers whose weight it is reorder it again."""
        for handle, weight in self._bound_weights:
            if weight == address:
                self.lib.kd_layer_forget(handle)

    def __del__(self):
        for op in getattr(self, "ops", []):
            if op[0] is self.lib.kd_layer_exec:
                self.lib.kd_layer_free(op[1])
            elif op[0] is not self.lib.kd_layer_forget:
                self.lib.kd_simple_free(op[1])


def _address(array) -> int:
    if hasattr(array, "_address"):
        return array._address()
    return np.ascontiguousarray(array).ctypes.data


def _cublas(graph):
    from .json_cublas import CuBLASExecutor
    return CuBLASExecutor(graph)


def _cudnn(graph):
    from .json_cudnn import CuDNNExecutor
    return CuDNNExecutor(graph)


EXECUTORS = {"dnnl": DNNLExecutor, "cublas": _cublas, "cudnn": _cudnn}
