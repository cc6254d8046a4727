"""Issue 3 acceptance: a tracker, two servers (key local), one server behind a proxy (key
proxied), four concurrent clients, query tables, a killed server, a restarted tracker, and a
segfaulting kernel. Real processes on 127.0.0.1."""

import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc
from kiln.errors import RPCError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "rpc"))
import rpc_services as svc  # noqa: E402


def query(port) -> str:
    out = subprocess.run([sys.executable, "-m", "kiln.exec.query_rpc_tracker", "--host", svc.HOST,
                          "--port", str(port)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def queue_row(text, key):
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == key:
            return tuple(int(x) for x in parts[1:])
    return None


@pytest.fixture(scope="module")
def kernel_files(c_kernels, tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet-kernels")
    c_kernels.module().export_library(str(d / "kernels.so"))
    c_kernels.module().export_library(str(d / "kernels.tar"))
    return d


@pytest.fixture
def fleet(tmp_path):
    tracker = svc.tracker()
    taddr = f"{svc.HOST}:{tracker.port}"
    servers = [svc.server("--tracker", taddr, "--key", "local") for _ in range(2)]
    proxy = svc.proxy("--tracker", taddr)
    behind = svc.Service("rpc_server", "--host", svc.HOST, "--port", str(proxy.port), "--through-proxy",
                         "--key", "proxied", wait_for=None)
    t = rpc.connect_tracker(svc.HOST, tracker.port)
    svc.wait_until(lambda: queue_row(t.text_summary(), "local") == (2, 2, 0)
                   and queue_row(t.text_summary(), "proxied") == (1, 1, 0), what="fleet registered")
    state = {"tracker": tracker, "servers": servers, "proxy": proxy, "behind": behind, "client": t}
    yield state
    # state["tracker"]: the test restarts the tracker; stop the one running now (the first is
    # stopped already), or it outlives the test run.
    for s in [*servers, behind, proxy, state["tracker"]]:
        s.stop()


def test_fleet(fleet, kernel_files):
    tracker, t = fleet["tracker"], fleet["client"]
    text = query(tracker.port)
    assert "Server List" in text and "Queue Status" in text
    assert queue_row(text, "local") == (2, 2, 0) and queue_row(text, "proxied") == (1, 1, 0)
    assert "server:proxy[proxied]" in text

    # Four clients want the two `local` servers: two run, two wait in the queue.
    hold = threading.Event()
    errors, done = [], []

    def client(i):
        try:
            sess = rpc.connect_tracker(svc.HOST, tracker.port).request("local", session_timeout=60)
            sess.upload(str(kernel_files / "kernels.tar"))
            f = sess.load_module("kernels.tar")
            dev = sess.cpu()
            a = tvm.nd.array(np.full(64, i, dtype="float32"), dev)
            b = tvm.nd.empty((64,), "float32", dev)
            f(a, b)
            np.testing.assert_equal(b.numpy(), i + 1)
            hold.wait(30)
            sess.close()
            done.append(i)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    svc.wait_until(lambda: queue_row(query(tracker.port), "local") == (2, 0, 2), what="two clients queued")
    hold.set()
    for th in threads:
        th.join(60)
    assert not errors and sorted(done) == [0, 1, 2, 3]
    svc.wait_until(lambda: queue_row(t.text_summary(), "local") == (2, 2, 0), what="servers back in the pool")

    # The proxied server is reachable by key through the tracker.
    sess = t.request("proxied")
    sess.upload(str(kernel_files / "kernels.so"))
    a = tvm.nd.array(np.arange(8, dtype="float32"), sess.cpu())
    b = tvm.nd.empty((8,), "float32", sess.cpu())
    sess.load_module("kernels.so")(a, b)
    np.testing.assert_equal(b.numpy(), np.arange(8) + 1)
    sess.close()

    # A segfaulting kernel: that client gets an error, the server serves the next session.
    sess = t.request("local")
    sess.upload(str(kernel_files / "kernels.so"))
    with pytest.raises(RPCError, match="SIGSEGV"):
        sess.load_module("kernels.so")["crash"](tvm.nd.empty((4,), "float32", sess.cpu()))
    svc.wait_until(lambda: queue_row(t.text_summary(), "local") == (2, 2, 0), what="crashed server free")
    ok = t.request("local")
    assert ok.get_function("rpc.echo")(5) == 5
    ok.close()

    # Kill a server mid-session: the client gets an error and the tracker drops the server.
    sess = t.request("local")
    victim = next(s for s in fleet["servers"] if f":{s.port}" in sess.peer)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    with pytest.raises(RPCError):  # the worker dies with its server (PR_SET_PDEATHSIG)
        svc.wait_until(lambda: sess.get_function("rpc.echo")(1) != 1, timeout=5, what="session lost")
    svc.wait_until(lambda: queue_row(t.text_summary(), "local") == (1, 1, 0), what="dead server dropped")

    # Restart the tracker on the same port: everyone re-registers by themselves. They retry
    # every 0.5 s (tracker_link.RETRY); the 30 s bound only has to catch a retry loop that
    # gave up, with room for a busy 2-core machine.
    port = tracker.port
    tracker.stop()
    fleet["tracker"] = svc.Service("rpc_tracker", "--host", svc.HOST, "--port", str(port))
    t2 = rpc.connect_tracker(svc.HOST, port)
    svc.wait_until(lambda: queue_row(t2.text_summary(), "local") == (1, 1, 0)
                   and queue_row(t2.text_summary(), "proxied") == (1, 1, 0), timeout=30, what="re-registered")


def test_unknown_key_waits_visibly_then_lists_known_keys(fleet):
    t = fleet["client"]
    result = {}

    def ask():
        try:
            t.request("lcoal", timeout=2)
        except RPCError as e:
            result["error"] = str(e)

    th = threading.Thread(target=ask)
    th.start()
    svc.wait_until(lambda: queue_row(t.text_summary(), "lcoal") == (0, 0, 1), what="pending request visible")
    th.join(10)
    assert "lcoal" in result["error"] and "local" in result["error"] and "proxied" in result["error"]


def test_priority_and_lease_expiry(fleet):
    t = fleet["client"]
    # Take both local servers, then queue a low- and a high-priority request.
    held = [t.request("local"), t.request("local")]
    order = []

    def ask(prio):
        s = rpc.connect_tracker(svc.HOST, fleet["tracker"].port).request("local", priority=prio)
        order.append(prio)
        s.close()

    low = threading.Thread(target=ask, args=(1,))
    low.start()
    svc.wait_until(lambda: queue_row(t.text_summary(), "local") == (2, 0, 1), what="low queued")
    high = threading.Thread(target=ask, args=(5,))
    high.start()
    svc.wait_until(lambda: queue_row(t.text_summary(), "local") == (2, 0, 2), what="high queued")
    held[0].close()
    svc.wait_until(lambda: len(order) >= 1, what="first grant")
    held[1].close()
    low.join(20)
    high.join(20)
    assert order == [5, 1]

    # A grant nobody connects to comes back after the lease (5 s by default).
    ch = t._open()
    grant = t._call({"op": "request", "key": "local", "priority": 1, "timeout": -1.0}, ch)
    assert grant["op"] == "grant"
    ch.close()
    svc.wait_until(lambda: queue_row(t.text_summary(), "local")[1] == 1, what="one free right after")
    svc.wait_until(lambda: queue_row(t.text_summary(), "local") == (2, 2, 0), timeout=30, what="lease expired")


def test_query_joins_the_keys_behind_a_proxy():
    """Document 001: three servers behind one proxy are one line, server:proxy[K0,K1,K2]."""
    tracker = svc.tracker()
    proxy = svc.proxy("--tracker", f"{svc.HOST}:{tracker.port}")
    behind = [svc.Service("rpc_server", "--host", svc.HOST, "--port", str(proxy.port), "--through-proxy",
                          "--key", key, wait_for=None) for key in ("k2", "k0", "k1")]
    try:
        text = svc.wait_until(lambda: (lambda t: t if all(queue_row(t, k) == (1, 1, 0) for k in ("k0", "k1", "k2"))
                                       else None)(query(tracker.port)), what="three proxied servers registered")
        rows = [line for line in text.splitlines() if "server:proxy" in line]
        assert len(rows) == 1 and rows[0].endswith(" server:proxy[k0,k1,k2]"), text
        assert rows[0].split()[0].endswith(f":{proxy.port}")
    finally:
        for s in [*behind, proxy, tracker]:
            s.stop()
