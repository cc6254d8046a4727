"""`kiln rpc tracker|server|query` as a user runs them: --custom-addr, --load-library, the tables."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import kiln as tvm
from kiln import rpc, te, tir

import rpc_services as svc

KILN = os.path.join(os.path.dirname(sys.executable), "kiln")


def kiln_service(*args) -> svc.Service:
    service = svc.Service.__new__(svc.Service)
    service.log_path = f"/tmp/kiln-cli-{os.getpid()}-{len(args)}-{args[1]}.log"
    service.log = open(service.log_path, "w+")
    service.proc = subprocess.Popen([KILN, "rpc", *args], stdout=service.log, stderr=subprocess.STDOUT)
    service.port = int(service.wait_log(r"bind to [\d.]+:(\d+)").group(1))
    return service


def test_cli_services_custom_addr_and_load_library(tmp_path):
    # A library the server preloads: kernels uploaded later call its function.
    src = tmp_path / "helper.c"
    src.write_text("float kiln_cli_triple(float x) { return 3.0f * x; }\n")
    helper = tmp_path / "libhelper.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(helper), str(src)], check=True)

    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: tir.call_extern("float32", "kiln_cli_triple", A[i]), name="B")
    lib = tmp_path / "triple.so"
    tvm.build(te.create_schedule(B.op), [A, B], target="llvm", name="triple").export_library(str(lib))

    tracker = kiln_service("tracker", "--host", svc.HOST, "--port", str(svc.free_port()))
    server = kiln_service("server", "--host", svc.HOST, "--port", str(svc.free_port()),
                          "--tracker", f"{svc.HOST}:{tracker.port}", "--key", "cli-board",
                          "--custom-addr", svc.HOST, "--load-library", str(helper))
    try:
        svc.wait_until(lambda: "cli-board" in rpc.connect_tracker(svc.HOST, tracker.port).text_summary(),
                       what="server registered")
        out = subprocess.run([KILN, "rpc", "query", "--host", svc.HOST, "--port", str(tracker.port)],
                             capture_output=True, text=True, check=True).stdout
        assert f"{svc.HOST}:{server.port}" in out and "cli-board" in out
        row = next(line for line in out.splitlines() if line.split()[:1] == ["cli-board"])
        assert row.split()[1:3] == ["1", "1"]  # total 1, free 1

        remote = rpc.connect_tracker(svc.HOST, tracker.port).request("cli-board", session_timeout=30)
        remote.upload(str(lib))
        f = remote.load_module("triple.so")
        dev = remote.cpu()
        a = tvm.nd.array(np.arange(8, dtype="float32"), dev)
        b = tvm.nd.empty((8,), "float32", dev)
        f(a, b)
        np.testing.assert_array_equal(b.numpy(), 3 * np.arange(8, dtype="float32"))
        assert "RPCServer: loaded" in server.text()
    finally:
        server.stop()
        tracker.stop()


def test_kiln_rpc_help_lists_the_documents_flags():
    out = subprocess.run([KILN, "rpc", "server", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--host", "--port", "--port-end", "--tracker", "--key", "--through-proxy", "--custom-addr",
                 "--load-library"):
        assert flag in out
