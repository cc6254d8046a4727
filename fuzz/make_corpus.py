"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from kiln itself: .npz files
numpy writes, DEFLATE streams zlib writes, shared objects export_library links (host, aarch64,
armv7), a graph JSON and parameters relay.build writes, module metadata, RPC frame bodies the
Python client sends and CRT request sequences the micro session sends. Small on purpose (a few
KB each): the fuzzer grows them. Run from the repository root: .venv/bin/python fuzz/make_corpus.py
"""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import tempfile
import zipfile
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target: str, name: str, data: bytes) -> None:
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def npz_seeds() -> None:
    rng = np.random.default_rng(0)
    arrays = {"x": rng.standard_normal((2, 3)).astype("float32"), "i": np.arange(5, dtype="int64"),
              "b": np.array([True, False]), "h": np.ones((2, 2), "float16"), "u": np.arange(3, dtype="uint8")}
    for name, save in (("stored", np.savez), ("deflated", np.savez_compressed)):
        buf = io.BytesIO()
        save(buf, **arrays)
        put("npz", name, buf.getvalue())
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            np.save(f, arrays["x"])
    put("npz", "zip64", buf.getvalue())
    buf = io.BytesIO()
    np.savez(buf, empty=np.zeros((0, 4), "float32"))
    put("npz", "empty", buf.getvalue())


def inflate_seeds() -> None:
    data = bytes(range(256)) * 3 + b"kiln " * 50
    for level in (0, 1, 9):
        comp = zlib.compressobj(level, zlib.DEFLATED, -15)
        stream = comp.compress(data) + comp.flush()
        put("inflate", f"level{level}", struct.pack("<H", len(data)) + stream)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_FIXED)
    put("inflate", "fixed", struct.pack("<H", 40) + comp.compress(b"ab" * 20) + comp.flush())


def module_seeds() -> None:
    import kiln as tvm
    from kiln import relay, te
    from kiln.driver.tvmc.compiler import export_package

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    with tempfile.TemporaryDirectory() as tmp:
        for label, target in (("host", "llvm"), ("aarch64", "llvm -mtriple=aarch64-linux-gnu"),
                              ("armv7", "llvm -mtriple=armv7l-linux-gnueabihf")):
            f = tvm.build(te.create_schedule(B.op), [A, B], target=target, name="add_one")
            path = os.path.join(tmp, f"{label}.so")
            f.export_library(path)
            with open(path, "rb") as fh:
                put("elf", label, fh.read())
            if label == "host":
                put("metadata", "add_one", json.dumps(f.metadata).encode())
        x = relay.var("x", shape=(1, 4), dtype="float32")
        w = relay.var("w", shape=(3, 4), dtype="float32")
        func = relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w)))
        lib = relay.build(tvm.IRModule.from_expr(func), target="llvm",
                          params={"w": np.ones((3, 4), "float32")})
        pkg = os.path.join(tmp, "p.tar")
        export_package(lib, pkg)
        import tarfile
        with tarfile.open(pkg) as tar:
            graph = tar.extractfile("mod.json").read()
            params = tar.extractfile("mod.params").read()
        put("graph", "dense_relu", graph + b"\0" + params)
        # the same graph without kernels: inputs straight to the outputs, parameters loaded
        g = {"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "null", "name": "w", "inputs": []}],
             "arg_nodes": [0, 1], "node_row_ptr": [0, 1, 2], "heads": [[0, 0, 0], [1, 0, 0]],
             "attrs": {"shape": ["list_shape", [[1, 4], [3, 4]]], "dltype": ["list_str", ["float32", "float32"]],
                       "storage_id": ["list_int", [0, 1]]}}
        put("graph", "no_kernels", json.dumps(g).encode() + b"\0" + params)


def tar_seeds() -> None:
    """Module archives as export_library writes them (.tar), and a tvmc package."""
    import kiln as tvm
    from kiln import relay, te
    from kiln.driver.tvmc.compiler import export_package

    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.tar")
        tvm.build(te.create_schedule(B.op), [A, B], target="llvm", name="twice").export_library(path)
        with open(path, "rb") as fh:
            put("tar", "module", fh.read())
        x = relay.var("x", shape=(1, 4), dtype="float32")
        lib = relay.build(tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(x))), target="llvm")
        export_package(lib, os.path.join(tmp, "p.tar"))
        with open(os.path.join(tmp, "p.tar"), "rb") as fh:
            put("tar", "package", fh.read())


def json_external_seeds() -> None:
    """The __kiln_external_modules text of a library offloading to oneDNN (conv and dense)."""
    import ctypes

    import kiln as tvm
    from kiln import relay
    from kiln.relay.op.contrib.dnnl import partition_for_dnnl
    from kiln.runtime.json_runtime import read_symbol, to_library

    x = relay.var("x", shape=(1, 3, 6, 6), dtype="float32")
    w = relay.const(np.ones((4, 3, 3, 3), "float32"))
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1)))
    y = relay.nn.dense(relay.nn.batch_flatten(y), relay.const(np.ones((5, 144), "float32")))
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(partition_for_dnnl(mod, {}), target="llvm")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "net.so")
        lib.export_library(path)
        put("json_external", "dnnl_conv_dense", to_library(read_symbol(ctypes.CDLL(path))).encode())
    put("json_external", "unknown_compiler", json.dumps(
        [{"type_key": "tensorrt", "symbol": "trt_0", "source": "{}"}]).encode())


def rpc_seeds() -> None:
    from kiln.rpc import protocol
    values = [None, 1, -5, 2.5, True, "add_one", b"\x00\x01\x02", [1, "a", [2.0]], {"key": "x", "n": 3},
              protocol.Device(1, 0), {"args": [1, 2, {"nested": [None, b"z"]}]}]
    for i, v in enumerate(values):
        parts = protocol.pack_message(2, v)
        frame = b"".join(bytes(p) for p in parts)
        put("rpc_value", f"value{i}", frame[4:])  # the body: opcode and value


def crt_seeds() -> None:
    from kiln.micro.session import ALLOC, CALL, FREE, LOOKUP, READ, WRITE

    def req(seq, cmd, body=b"", same_session=True):
        payload = struct.pack("<IB", seq, cmd) + body
        return struct.pack("<HB", len(payload), 1 if same_session else 0) + payload

    handle = 1  # the first block of a fresh arena
    tensor = struct.pack("<BIBBBBq", 7, handle, 2, 32, 1, 0, 16)
    seqs = [
        req(1, ALLOC, struct.pack("<I", 64)) + req(2, WRITE, struct.pack("<II", handle, 0) + bytes(range(64)))
        + req(3, READ, struct.pack("<III", handle, 0, 64)) + req(4, CALL, struct.pack("<IB", 0, 1) + tensor)
        + req(4, CALL, struct.pack("<IB", 0, 1) + tensor) + req(5, FREE, struct.pack("<I", handle)),
        req(1, LOOKUP, b"touch") + req(2, LOOKUP, b"failing") + req(3, CALL, struct.pack("<IB", 1, 1)
                                                                     + struct.pack("<Bq", 0, 7)),
        req(1, ALLOC, struct.pack("<I", 100)) + req(1, FREE, struct.pack("<I", handle), same_session=False)
        + req(0, FREE, struct.pack("<I", handle)) + req(2, READ, struct.pack("<III", handle, 96, 4)),
    ]
    for i, s in enumerate(seqs):
        put("crt_request", f"session{i}", s)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    npz_seeds()
    inflate_seeds()
    module_seeds()
    rpc_seeds()
    crt_seeds()
    tar_seeds()
    json_external_seeds()
    for target in sorted(os.listdir(os.path.join(HERE, "corpus"))):
        folder = os.path.join(HERE, "corpus", target)
        sizes = [os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)]
        print(f"{target}: {len(sizes)} seeds, {sum(sizes)} bytes")
