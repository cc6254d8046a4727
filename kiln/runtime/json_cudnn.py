"""The cuDNN executor of JSON runtime modules (json_runtime.py): conv2d with its epilogue, pools,
activations and softmax, through cuDNN's legacy (descriptor) API loaded with ctypes.

cuDNN 9 comes from NVIDIA's wheel (``pip install nvidia-cudnn-cu13``, under
``site-packages/nvidia/cudnn/lib``) or the system (``libcudnn.so.9``). Tensors are the caller's
NCHW CUDA NDArrays; values inside the subgraph get device buffers of their own. Every call goes
on the legacy default stream, the one kiln's CUDA kernels launch on, so the subgraph is ordered
with them. Convolutions use FMA math (no TF32), so results agree with fp32 references.

A ``conv2d`` node with relu runs as one ``cudnnConvolutionBiasActivationForward``
(y = relu(conv(x) + z + bias)), as does one with a bias or residual and no relu when the chosen
algorithm is implicit precomputed GEMM (the identity activation needs it); otherwise, or where
cuDNN refuses the fused call, as ``cudnnConvolutionForward`` followed by ``cudnnAddTensor``
(bias, residual) and ``cudnnActivationForward``.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

import numpy as np

from ..errors import KilnError
from . import cuda_graphs
from .json_graph import entry_shape, load_error

INSTALL_HINT = ("cuDNN is not installed: pip install nvidia-cudnn-cu13 (or nvidia-cudnn-cu12 with CUDA 12), "
                "or install the system's libcudnn9")
_NCHW, _FLOAT, _CROSS_CORRELATION, _FMA_MATH = 0, 0, 1, 3
_ACT = {"sigmoid": 0, "relu": 1, "tanh": 2, "identity": 5}
_PRECOMP_GEMM = 1  # the one algorithm cuDNN's fused call runs with the identity activation
_POOL = {"max": 0, "avg_pad": 1, "avg": 2}
_SOFTMAX_ACCURATE, _SOFTMAX_CHANNEL = 1, 1
# Heuristic picks restricted to the GEMM-like algorithms (implicit precomputed, implicit, explicit):
# FFT and Winograd trade accuracy for speed, and results must match fp32 references.
_ALGOS = (1, 0, 2)
_lib = None


class _AlgoPerf(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int), ("mathType", ctypes.c_int),
                ("reserved", ctypes.c_int * 3)]


def cudnn_library():
    """libcudnn (cuDNN 9) loaded once, with the argument types of the calls used here."""
    global _lib
    if _lib is not None:
        return _lib
    candidates = []
    for base in sys.path:
        candidates += sorted(glob.glob(os.path.join(base, "nvidia", "cudnn", "lib", "libcudnn.so.9")))
    candidates += ["libcudnn.so.9", "/usr/lib/x86_64-linux-gnu/libcudnn.so.9", "libcudnn.so"]
    lib = None
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        raise KilnError(INSTALL_HINT)
    vp, i32, sz, f64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_double
    vpp, i32p = ctypes.POINTER(vp), ctypes.POINTER(i32)
    signatures = {
        "cudnnCreate": [vpp], "cudnnSetStream": [vp, vp],
        "cudnnCreateTensorDescriptor": [vpp], "cudnnSetTensor4dDescriptor": [vp, i32, i32] + [i32] * 4,
        "cudnnCreateFilterDescriptor": [vpp], "cudnnSetFilter4dDescriptor": [vp, i32, i32] + [i32] * 4,
        "cudnnCreateConvolutionDescriptor": [vpp],
        "cudnnSetConvolution2dDescriptor": [vp] + [i32] * 6 + [i32, i32],
        "cudnnSetConvolutionGroupCount": [vp, i32], "cudnnSetConvolutionMathType": [vp, i32],
        "cudnnGetConvolution2dForwardOutputDim": [vp, vp, vp, i32p, i32p, i32p, i32p],
        "cudnnGetConvolutionForwardAlgorithm_v7": [vp, vp, vp, vp, vp, i32, i32p, ctypes.POINTER(_AlgoPerf)],
        "cudnnGetConvolutionForwardWorkspaceSize": [vp, vp, vp, vp, vp, i32, ctypes.POINTER(sz)],
        "cudnnConvolutionForward": [vp, vp, vp, vp, vp, vp, vp, i32, vp, sz, vp, vp, vp],
        "cudnnConvolutionBiasActivationForward": [vp, vp, vp, vp, vp, vp, vp, i32, vp, sz, vp, vp, vp, vp, vp,
                                                  vp, vp, vp],
        "cudnnAddTensor": [vp, vp, vp, vp, vp, vp, vp],
        "cudnnCreateActivationDescriptor": [vpp], "cudnnSetActivationDescriptor": [vp, i32, i32, f64],
        "cudnnActivationForward": [vp, vp, vp, vp, vp, vp, vp, vp],
        "cudnnCreatePoolingDescriptor": [vpp], "cudnnSetPooling2dDescriptor": [vp] + [i32] * 8,
        "cudnnPoolingForward": [vp, vp, vp, vp, vp, vp, vp, vp],
        "cudnnSoftmaxForward": [vp, i32, i32, vp, vp, vp, vp, vp, vp],
    }
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    lib.cudnnGetErrorString.argtypes, lib.cudnnGetErrorString.restype = [i32], ctypes.c_char_p
    lib.cudnnGetVersion.argtypes, lib.cudnnGetVersion.restype = [], sz
    if lib.cudnnGetVersion() < 8000:
        raise KilnError(f"cuDNN {lib.cudnnGetVersion()} is too old: kiln needs cuDNN 8 or 9 ({INSTALL_HINT})")
    _lib = lib
    return lib


def cudnn_available() -> str | None:
    """None when libcudnn loads here, else the reason it does not."""
    return load_error(cudnn_library)


def _check(lib, status: int, what: str) -> None:
    if status:
        raise KilnError(f"cuDNN {what} failed: {lib.cudnnGetErrorString(status).decode()} (status {status})")


def _create(lib, kind: str) -> ctypes.c_void_p:
    handle = ctypes.c_void_p()
    _check(lib, getattr(lib, f"cudnnCreate{kind}Descriptor")(ctypes.byref(handle)), f"cudnnCreate{kind}Descriptor")
    return handle


def _tensor(lib, shape) -> ctypes.c_void_p:
    """An NCHW float32 descriptor; shapes of fewer dims are padded with 1s (2-d (N, C) -> N, C, 1, 1)."""
    dims = [int(d) for d in shape]
    if len(dims) > 4:
        raise KilnError(f"cuDNN descriptors here are 4-d; got shape {dims}")
    dims = dims + [1] * (4 - len(dims))
    desc = _create(lib, "Tensor")
    _check(lib, lib.cudnnSetTensor4dDescriptor(desc, _NCHW, _FLOAT, *dims), f"cudnnSetTensor4dDescriptor{dims}")
    return desc


def _flat(lib, shape) -> ctypes.c_void_p:
    """An elementwise op's descriptor: the tensor as one row (any rank)."""
    return _tensor(lib, [1, 1, 1, int(np.prod(shape))])


class CuDNNExecutor:
    """Descriptors for every node are made when the module is loaded; the cuDNN handle, the
    algorithm choice, the workspace and the buffers of inner values on the first ``bind`` (they
    need the device)."""

    def __init__(self, graph: dict):
        self.lib = lib = cudnn_library()
        self.graph = graph
        self.n_in = len(graph["inputs"]) + len(graph["constants"])
        self.handle = None
        self.device = None
        self._buffers: dict = {}
        self.fused_ok: dict[int, bool] = {}  # conv node -> cuDNN accepted the fused call
        self.capture_failure = None  # why the last bind's calls could not become a CUDA graph
        self.captured = False  # the last bind replays a CUDA graph
        self.one, self.zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.steps = []
        for k, node in enumerate(graph["nodes"]):
            if node["dtype"] != "float32":
                raise KilnError(f"{node['name']}: cuDNN runs float32 here, not {node['dtype']}")
            make = getattr(self, f"_make_{node['kind']}", None)
            if make is None:
                raise KilnError(f"{node['name']}: the cuDNN runtime has no node kind {node['kind']!r}")
            self.steps.append(make(lib, node, self.n_in + k))

    def _shape(self, entry: int) -> list:
        return entry_shape(self.graph, entry)

    # -- descriptors, per node kind -------------------------------------------------------------
    def _make_conv2d(self, lib, node, entry):
        a, ins = node["attrs"], node["inputs"]
        x_shape, w_shape = self._shape(ins[0]), self._shape(ins[1])
        pt, pl, pb, pr = a["padding"]
        if (pt, pl) != (pb, pr):
            raise KilnError(f"{node['name']}: cuDNN pads symmetrically; got padding {a['padding']}")
        x, y = _tensor(lib, x_shape), _tensor(lib, node["shape"])
        w = _create(lib, "Filter")
        _check(lib, lib.cudnnSetFilter4dDescriptor(w, _FLOAT, _NCHW, *[int(d) for d in w_shape]),
               "cudnnSetFilter4dDescriptor")
        conv = _create(lib, "Convolution")
        _check(lib, lib.cudnnSetConvolution2dDescriptor(conv, pt, pl, *a["strides"], *a["dilation"],
                                                        _CROSS_CORRELATION, _FLOAT), "cudnnSetConvolution2dDescriptor")
        _check(lib, lib.cudnnSetConvolutionGroupCount(conv, int(a["groups"])), "cudnnSetConvolutionGroupCount")
        _check(lib, lib.cudnnSetConvolutionMathType(conv, _FMA_MATH), "cudnnSetConvolutionMathType")
        dims = [ctypes.c_int() for _ in range(4)]
        _check(lib, lib.cudnnGetConvolution2dForwardOutputDim(conv, x, w, *[ctypes.byref(d) for d in dims]),
               "cudnnGetConvolution2dForwardOutputDim")
        if [d.value for d in dims] != list(node["shape"]):
            raise KilnError(f"{node['name']}: cuDNN computes shape {[d.value for d in dims]}, the graph says "
                            f"{node['shape']}")
        bias = _tensor(lib, [1, node["shape"][1], 1, 1])
        act = _create(lib, "Activation")  # relu, or identity for a fused bias/residual without relu
        mode = _ACT["relu" if "r" in a["post"] else "identity"]
        _check(lib, lib.cudnnSetActivationDescriptor(act, mode, 0, 0.0), "cudnnSetActivationDescriptor")
        relu = _create(lib, "Activation")
        _check(lib, lib.cudnnSetActivationDescriptor(relu, _ACT["relu"], 0, 0.0), "cudnnSetActivationDescriptor")
        return {"kind": "conv2d", "node": node, "entry": entry, "x": x, "w": w, "y": y, "conv": conv,
                "bias": bias, "act": act, "relu": relu, "algo": None, "workspace": 0}

    def _make_pool2d(self, lib, node, entry):
        a = node["attrs"]
        pt, pl, pb, pr = a["padding"]
        if (pt, pl) != (pb, pr):
            raise KilnError(f"{node['name']}: cuDNN pads symmetrically; got padding {a['padding']}")
        pool = _create(lib, "Pooling")
        _check(lib, lib.cudnnSetPooling2dDescriptor(pool, _POOL[a["alg"]], 0, *a["pool_size"], pt, pl,
                                                    *a["strides"]), "cudnnSetPooling2dDescriptor")
        return {"kind": "pool2d", "node": node, "entry": entry, "pool": pool,
                "x": _tensor(lib, self._shape(node["inputs"][0])), "y": _tensor(lib, node["shape"])}

    def _make_eltwise(self, lib, node, entry):
        act = _create(lib, "Activation")
        _check(lib, lib.cudnnSetActivationDescriptor(act, _ACT[node["attrs"]["alg"]], 0, 0.0),
               "cudnnSetActivationDescriptor")
        return {"kind": "eltwise", "node": node, "entry": entry, "act": act, "y": _flat(lib, node["shape"])}

    def _make_softmax(self, lib, node, entry):
        shape = node["shape"]
        if int(node["attrs"]["axis"]) % len(shape) != 1:
            raise KilnError(f"{node['name']}: cuDNN's softmax runs over axis 1 (channels), not {node['attrs']['axis']}")
        return {"kind": "softmax", "node": node, "entry": entry, "y": _tensor(lib, shape)}

    # -- binding and running --------------------------------------------------------------------
    def _setup(self, dev) -> None:
        """Handle, algorithms, workspace and inner buffers: once, on the first bind."""
        from .ndarray import array, empty

        lib = self.lib
        handle = ctypes.c_void_p()
        status = lib.cudnnCreate(ctypes.byref(handle))
        if status:
            raise KilnError(f"cudnnCreate failed ({lib.cudnnGetErrorString(status).decode()}): is a CUDA device "
                            "present and its driver loaded?")
        _check(lib, lib.cudnnSetStream(handle, None), "cudnnSetStream")  # the legacy default stream
        self.handle, self.device = handle, dev
        workspace = 0
        outputs = set(self.graph["outputs"])
        for step in self.steps:
            if step["kind"] == "conv2d":
                self._choose_algo(step)
                workspace = max(workspace, step["workspace"])
                node = step["node"]
                if not node["attrs"]["bias"]:  # the fused call always reads a bias
                    step["zeros"] = array(np.zeros(node["shape"][1], "float32"), dev)
            if step["entry"] not in outputs:
                self._buffers[step["entry"]] = empty(tuple(step["node"]["shape"]), "float32", dev)
        self._workspace = empty((max(workspace, 1),), "uint8", dev)

    def _choose_algo(self, step) -> None:
        lib, count = self.lib, ctypes.c_int()
        perf = (_AlgoPerf * 16)()
        _check(lib, lib.cudnnGetConvolutionForwardAlgorithm_v7(self.handle, step["x"], step["w"], step["conv"],
                                                               step["y"], 16, ctypes.byref(count), perf),
               "cudnnGetConvolutionForwardAlgorithm_v7")
        found = [p.algo for p in perf[:count.value] if p.status == 0]
        # implicit GEMM (0) runs every FMA convolution: the choice when the heuristic offers nothing
        algo = next((a for a in found if a in _ALGOS), found[0] if found else 0)
        size = ctypes.c_size_t()
        _check(lib, lib.cudnnGetConvolutionForwardWorkspaceSize(self.handle, step["x"], step["w"], step["conv"],
                                                                step["y"], algo, ctypes.byref(size)),
               f"cudnnGetConvolutionForwardWorkspaceSize ({step['node']['name']}, algorithm {algo})")
        step["algo"], step["workspace"] = algo, size.value

    def bind(self, arrays):
        """A function running the graph on ``arrays`` (inputs, constants, outputs: CUDA NDArrays)."""
        from .json_graph import address as _address

        g = self.graph
        n_out = len(g["outputs"])
        if len(arrays) != self.n_in + n_out:
            raise KilnError(f"{g['symbol']} takes {self.n_in + n_out} tensors, got {len(arrays)}")
        dev = getattr(arrays[0], "device", None)
        if dev is None or getattr(dev, "device_type", None) != 2:
            raise KilnError(f"{g['symbol']}: cuDNN subgraphs run on a CUDA device; build for target 'cuda' "
                            f"(tvmc: --target \"cudnn, cuda, llvm\") and run on kiln.cuda(), not {dev}")
        if self.handle is None:
            self._setup(dev)
        ptr = {i: _address(a) for i, a in enumerate(arrays[:self.n_in])}
        for e, a in zip(g["outputs"], arrays[self.n_in:]):
            ptr[e] = _address(a)
        ptr.update({e: b._address() for e, b in self._buffers.items()})
        calls = [self._call(step, ptr) for step in self.steps]
        steps = [(step["node"], call) for step, call in zip(self.steps, calls)]  # bench/byoc.py --profile
        if cuda_graphs.enabled():  # one graph launch per run instead of the calls' host time
            lib = self.lib
            launch, self.capture_failure = cuda_graphs.capture(
                lambda stream: _check(lib, lib.cudnnSetStream(self.handle, stream or None), "cudnnSetStream"), calls)
            self.captured = launch is not None
            if launch is not None:
                launch.steps = steps
                return launch

        def run():
            for call in calls:
                call()
        run.steps = steps
        return run

    def _call(self, step, ptr):
        lib, h, one, zero = self.lib, self.handle, ctypes.byref(self.one), ctypes.byref(self.zero)
        node, kind = step["node"], step["kind"]
        ins, y = node["inputs"], ptr[step["entry"]]
        if kind == "pool2d":
            return lambda: _check(lib, lib.cudnnPoolingForward(h, step["pool"], one, step["x"], ptr[ins[0]], zero,
                                                                 step["y"], y), "cudnnPoolingForward")
        if kind == "eltwise":
            return lambda: _check(lib, lib.cudnnActivationForward(h, step["act"], one, step["y"], ptr[ins[0]], zero,
                                                                    step["y"], y), "cudnnActivationForward")
        if kind == "softmax":
            return lambda: _check(lib, lib.cudnnSoftmaxForward(h, _SOFTMAX_ACCURATE, _SOFTMAX_CHANNEL, one,
                                                                 step["y"], ptr[ins[0]], zero, step["y"], y),
                                  "cudnnSoftmaxForward")
        return self._conv_call(step, ptr, y)

    def _conv_call(self, step, ptr, y):
        lib, h, one, zero = self.lib, self.handle, ctypes.byref(self.one), ctypes.byref(self.zero)
        a, ins = step["node"]["attrs"], step["node"]["inputs"]
        x, w = ptr[ins[0]], ptr[ins[1]]
        bias = ptr[ins[2]] if a["bias"] else step["zeros"]._address()
        addend = ptr[ins[-1]] if "s" in a["post"] else None
        ws, ws_size = self._workspace._address(), step["workspace"]
        algo, entry = step["algo"], step["entry"]
        alpha2 = ctypes.c_float(1.0 if addend is not None else 0.0)

        def fused() -> int:  # y = act(conv(x) + alpha2 * z + bias); z = y is not read when alpha2 is 0
            return lib.cudnnConvolutionBiasActivationForward(
                h, one, step["x"], x, step["w"], w, step["conv"], algo, ws, ws_size, ctypes.byref(alpha2),
                step["y"], addend if addend is not None else y, step["bias"], bias, step["act"], step["y"], y)

        def separate() -> None:
            _check(lib, lib.cudnnConvolutionForward(h, one, step["x"], x, step["w"], w, step["conv"], algo, ws,
                                                    ws_size, zero, step["y"], y), "cudnnConvolutionForward")
            if a["bias"]:
                _check(lib, lib.cudnnAddTensor(h, one, step["bias"], bias, one, step["y"], y), "cudnnAddTensor (bias)")
            if addend is not None:
                _check(lib, lib.cudnnAddTensor(h, one, step["y"], addend, one, step["y"], y),
                       "cudnnAddTensor (residual)")
            if "r" in a["post"]:
                _check(lib, lib.cudnnActivationForward(h, step["relu"], one, step["y"], y, zero, step["y"], y),
                       "cudnnActivationForward (relu)")

        # One call where cuDNN fuses: relu with any algorithm; a bias or residual alone (the identity
        # activation) with implicit precomputed GEMM only. A bare convolution is one call anyway.
        if "r" not in a["post"] and (algo != _PRECOMP_GEMM or not (a["bias"] or addend is not None)):
            return separate

        def run() -> None:
            if self.fused_ok.get(entry, True):
                if fused() == 0:
                    return
                # no fused kernel for this algorithm and shape (cuDNN 8 and 9 number "not supported"
                # differently): the separate calls from now on, which report a real failure themselves
                self.fused_ok[entry] = False
            separate()
        return run
