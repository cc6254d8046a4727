"""The oneDNN executor of JSON runtime modules (json_runtime.py).

It calls a small C++ shim over oneDNN (src/contrib/dnnl_json_runtime.cc). The runtime never
compiles it: the compiler builds it (kiln/contrib/dnnl_shim.py) and embeds the shared object
in every library with oneDNN subgraphs (data symbol ``__kiln_dnnl_runtime``: 8-byte length,
then the bytes), so the device needs only oneDNN itself (Debian: ``libdnnl3``/``libdnnl2``).
A runtime package built where oneDNN is installed also ships the shim for its own triple
(``kiln_runtime/host/libkiln_dnnl.so``), which serves libraries exported without it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

from ..errors import KilnError
from .json_graph import address as _address
from .json_graph import entry_shape, load_error

SHIM_SYMBOL = "__kiln_dnnl_runtime"
INSTALL_HINT = ("oneDNN is not installed: install Debian's libdnnl-dev (apt-get install -y libdnnl-dev; "
                "'make system-packages' does it) and a C++ compiler")
_RUNTIME_HINT = ("oneDNN is not installed on this machine: install its runtime library "
                 "(Debian: apt-get install -y libdnnl2, or libdnnl-dev)")


# -- oneDNN ---------------------------------------------------------------------------------------
_loaded: dict[str, ctypes.CDLL] = {}  # shim file -> the loaded shim


def dnnl_available() -> str | None:
    """None when oneDNN runs here (its library loads), else the reason it does not."""
    return load_error(_dnnl_library)


def _dnnl_library() -> None:
    for name in (ctypes.util.find_library("dnnl"), "libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"):
        if name:
            try:
                ctypes.CDLL(name)
                return
            except OSError:
                continue
    raise KilnError(_RUNTIME_HINT)


def read_shim(lib: ctypes.CDLL) -> bytes | None:
    """The shim a loaded library carries (None when it has no ``__kiln_dnnl_runtime``)."""
    try:
        at = ctypes.addressof(ctypes.c_char.in_dll(lib, SHIM_SYMBOL))
    except ValueError:
        return None
    size = int.from_bytes(ctypes.string_at(at, 8), "little")
    return ctypes.string_at(at + 8, size)


def shipped_shim() -> str | None:
    """The shim of this runtime package (kiln_runtime/host/libkiln_dnnl.so), if it has one."""
    path = Path(__file__).resolve().parents[3] / "host" / "libkiln_dnnl.so"
    return str(path) if path.is_file() else None


def _shim_file(blob: bytes) -> str:
    """A file holding ``blob`` (the kiln cache directory, else the temp directory), named by its
    hash; a file of that name with other bytes is written again, never trusted."""
    name = f"kiln-dnnl-{hashlib.sha256(blob).hexdigest()[:16]}.so"
    cache = os.environ.get("KILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kiln")
    for folder in ([cache] if cache not in ("off", "") else []) + [tempfile.gettempdir()]:
        so = os.path.join(folder, name)
        try:
            with open(so, "rb") as f:
                if f.read() == blob:
                    return so
        except OSError:
            pass
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, so)
            return so
        except OSError:
            continue
    raise KilnError(f"cannot write the library's oneDNN shim to {cache} or {tempfile.gettempdir()}: "
                    "set KILN_CACHE_DIR to a writable folder")


def dnnl_shim(blob: bytes | None = None) -> ctypes.CDLL:
    """The shim a library carried (``blob``), else the one this runtime package ships; loaded
    once per content. Never compiled here."""
    if blob:
        so = _shim_file(blob)
    else:
        so = shipped_shim()
        if so is None:
            raise KilnError("this library's oneDNN subgraphs came without their runtime (the oneDNN shim): "
                            "export the library again with this kiln version, which embeds it, or use a "
                            "runtime package built where oneDNN is installed (it ships kiln_runtime/host/"
                            "libkiln_dnnl.so)")
    lib = _loaded.get(so)
    if lib is not None:
        return lib
    problem = dnnl_available()
    if problem:
        raise KilnError(problem)
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
    _loaded[so] = lib
    return lib


def _omp_set_num_threads(shim: ctypes.CDLL, n: int) -> None:
    fn = getattr(shim, "omp_set_num_threads", None)  # libgomp, which libdnnl links
    if fn is not None:
        fn(int(n))


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

    def __init__(self, graph: dict, shim: bytes | None = None):
        from .. import config

        self.lib = dnnl_shim(shim)
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
                _omp_set_num_threads(lib, threads)
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


