"""The proxy: reach servers that clients cannot connect to directly.

Servers started with ``--through-proxy`` connect out to the proxy and wait, one idle
connection each, under their key. A client connects to the proxy with that key; the proxy
picks an idle server connection, asks the server to start a session on it, forwards the
server's answer as the end of the client's handshake, and from then on copies bytes both ways.

With ``--tracker``, each idle server is registered with the tracker at the proxy's address, so
``tracker.request(key)`` reaches servers behind the proxy. The tracker's lease is held by the
proxy: the client presents the lease token and gets exactly the server that was leased.

Relaying runs in two plain threads per session (blocking recv/sendall) rather than in the
event loop, so a relayed call costs two socket hops and no event-loop scheduling.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading

from . import aio, base, protocol as P
from .tracker_link import TrackerLink

log = logging.getLogger("RPCProxy")


class _Idle:
    """One idle server connection waiting for a client."""

    def __init__(self, key, reader, writer):
        self.key, self.reader, self.writer = key, reader, writer
        self.lease = ""
        self.lease_timer = None
        self.watch: asyncio.Future | None = None
        self.link_task: asyncio.Future | None = None
        self.link: TrackerLink | None = None


class Proxy:
    def __init__(self, token: str = "", tracker_addr=None, custom_addr: str | None = None):
        self.token, self.tracker_addr, self.custom_addr = token, tracker_addr, custom_addr
        self.idle: dict[str, list[_Idle]] = {}
        self.port = 0

    async def serve(self, sock) -> None:
        self.port = sock.getsockname()[1]
        server = await asyncio.start_server(self._on_connect, sock=sock)
        async with server:
            await server.serve_forever()

    async def _on_connect(self, reader, writer):
        hello = await aio.accept_or_drop(reader, writer, self.token)
        if hello is None:
            return
        try:
            if hello["role"] == P.ROLE_SERVER:
                await aio.accept_ok(writer)
                self._add_idle(_Idle(hello["key"], reader, writer))
            elif hello["role"] == P.ROLE_CLIENT:
                await self._connect_client(reader, writer, hello)
            else:
                await aio.refuse(writer, "this is an RPC proxy: servers (--through-proxy) and session "
                                         "clients connect here")
                aio.close_writer(writer)
        except (P.RPCError, ConnectionError, OSError, asyncio.CancelledError):
            aio.close_writer(writer)

    # -- idle servers ----------------------------------------------------------------------------
    def _add_idle(self, conn: _Idle) -> None:
        self.idle.setdefault(conn.key, []).append(conn)
        log.info("server with key %s connected (%d idle)", conn.key, len(self.idle[conn.key]))
        conn.watch = asyncio.ensure_future(conn.reader.read(1))
        conn.watch.add_done_callback(lambda f: self._idle_closed(conn, f))
        if self.tracker_addr:
            link = TrackerLink(self.tracker_addr, self.token,
                               lambda: {"op": "register", "key": conn.key, "port": self.port,
                                        "addr": self.custom_addr or "", "label": f"server:proxy[{conn.key}]",
                                        "free": not conn.lease},
                               lambda token, lease_s: self._on_lease(conn, token, lease_s),
                               lambda token: self._release(conn, token), log_prefix="RPCProxy")
            conn.link = link
            conn.link_task = asyncio.ensure_future(link.run())

    def _idle_closed(self, conn: _Idle, fut: asyncio.Future) -> None:
        if fut.cancelled():
            return  # taken for a session
        self._remove(conn)
        aio.close_writer(conn.writer)

    def _remove(self, conn: _Idle) -> None:
        pool = self.idle.get(conn.key, [])
        if conn in pool:
            pool.remove(conn)
        if conn.link_task:
            conn.link_task.cancel()  # drops this server from the tracker
        if conn.lease_timer:
            conn.lease_timer.cancel()

    def _on_lease(self, conn: _Idle, token: str, lease_s: float) -> bool:
        if conn.lease or conn not in self.idle.get(conn.key, []):
            return False
        conn.lease = token
        conn.lease_timer = asyncio.get_running_loop().call_later(lease_s, self._release, conn, token, True)
        return True

    def _release(self, conn: _Idle, token: str, expired: bool = False) -> None:
        """The tracker cancelled the lease, or its client never came (``expired``)."""
        if conn.lease != token:
            return
        conn.lease = ""
        if expired and conn.link:
            log.info("the granted client never came for %s; back to the pool", conn.key)
            conn.link.send({"op": "state", "free": True})

    def _take(self, key: str, lease: str) -> _Idle | None:
        pool = self.idle.get(key, [])
        for conn in pool:
            if (lease and conn.lease == lease) or (not lease and not conn.lease):
                self._remove(conn)
                conn.watch.cancel()
                return conn
        return None

    # -- clients ---------------------------------------------------------------------------------
    async def _connect_client(self, reader, writer, hello):
        key, lease = hello["key"], hello.get("lease") or ""
        while True:
            conn = self._take(key, lease if isinstance(lease, str) else "")
            if conn is None:
                known = sorted(k for k, v in self.idle.items() if v)
                why = ("the lease is not held here (expired?); request again" if lease else
                       f"no idle server with key {key!r} behind this proxy (idle keys: {', '.join(known) or 'none'})")
                await aio.refuse(writer, why, P.E_BUSY)
                aio.close_writer(writer)
                return
            try:
                # _take cancelled the idle watch's read(1); let the cancellation land first, or
                # the reader still counts it as waiting and the next read raises (Python 3.12).
                await asyncio.wait([conn.watch])
                timeout = hello.get("session_timeout", 0)
                aio.write_message(conn.writer, {"op": "session", "session_timeout": timeout})
                await conn.writer.drain()
                _, reply = await asyncio.wait_for(aio.read_message(conn.reader), 5)
                break
            except (P.RPCError, ConnectionError, OSError, asyncio.TimeoutError):
                aio.close_writer(conn.writer)  # that server is gone: try the next one
                if lease:
                    lease = ""
        aio.write_message(writer, reply)
        await writer.drain()
        if not isinstance(reply, dict) or reply.get("status") != P.HS_OK:
            aio.close_writer(writer)
            aio.close_writer(conn.writer)
            return
        a = _detach(writer)
        b = _detach(conn.writer)
        _start_relay(a, b)


def _detach(writer) -> socket.socket:
    raw = writer.get_extra_info("socket")
    sock = socket.socket(fileno=os.dup(raw.fileno()))
    writer.transport.abort()
    sock.setblocking(True)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _start_relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways, one blocking thread per direction, until both sides close.

    No polling here: client and worker already poll, and a third poller on a two-core
    machine makes the scheduler preempt one of them, which costs far more than it saves."""
    left = [2]
    lock = threading.Lock()

    def pump(src, dst):
        buf = memoryview(bytearray(1 << 20))
        try:
            while True:
                n = src.recv_into(buf)
                if not n:
                    break
                dst.sendall(buf[:n])
        except OSError:
            pass
        _shutdown_write(dst)
        with lock:
            left[0] -= 1
            if left[0] == 0:
                a.close()
                b.close()

    for src, dst in ((a, b), (b, a)):
        threading.Thread(target=pump, args=(src, dst), daemon=True, name="kiln-proxy-relay").start()


def _shutdown_write(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def serve(host: str = "0.0.0.0", port: int = 9090, port_end: int = 9199, tracker=None, token: str = "",
          custom_addr: str | None = None) -> None:
    """Run a proxy until SIGINT/SIGTERM (the body of ``python -m kiln.exec.rpc_proxy``)."""
    sock = base.bind_first_free(host, port, port_end)
    log.info("bind to %s:%d", host, sock.getsockname()[1])
    base.warn_if_open(log, host, token)
    proxy = Proxy(token, tracker, custom_addr)
    base.run_until_signal(lambda: proxy.serve(sock))
    log.info("stopped")
