"""The tracker: one queue of session requests per device key, and the pool of servers.

Servers (and proxies, for the servers behind them) keep one connection each to the tracker and
report whether they are free. A client's request waits in its key's queue; when a server of
that key is free the tracker leases it to the highest-priority, longest-waiting request: it
tells the server to expect a session carrying a one-time lease token, waits for the server's
acknowledgement, then sends the client (host, port, token). The server reports itself free
again when that session ends or when the client never came within the lease.

A server whose connection drops, or which misses heartbeats, is removed from the pool.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time

from . import aio, base, protocol as P

log = logging.getLogger("RPCTracker")

HEARTBEAT_TIMEOUT = 6.0     # seconds without a message from a server before it is dropped
LEASE_ACK_TIMEOUT = 3.0     # seconds a server has to acknowledge a lease
DEFAULT_LEASE = 5.0         # seconds a granted server waits for its client
UNKNOWN_KEY_WAIT = 30.0     # how long a request for a key no server has may wait by default


class _Resource:
    """One registered server (or one server behind a proxy)."""

    def __init__(self, writer, key, host, port, label):
        self.writer, self.key, self.host, self.port, self.label = writer, key, host, port, label
        self.state = "free"
        self.free_since = time.monotonic()
        self.last_seen = time.monotonic()
        self.acks: dict[str, asyncio.Future] = {}


class _Request:
    def __init__(self, key, priority, seq, deadline, future):
        self.key, self.priority, self.seq, self.deadline, self.future = key, priority, seq, deadline, future


class Tracker:
    def __init__(self, token: str = "", lease: float = DEFAULT_LEASE, unknown_key_wait: float = UNKNOWN_KEY_WAIT,
                 heartbeat_timeout: float = HEARTBEAT_TIMEOUT):
        self.token = token
        self.lease = lease
        self.unknown_key_wait = unknown_key_wait
        self.heartbeat_timeout = heartbeat_timeout
        self.resources: list[_Resource] = []
        self.queues: dict[str, list[_Request]] = {}
        self._seq = itertools.count()
        self.port = 0

    # -- service -------------------------------------------------------------------------------
    async def serve(self, sock, ready=None) -> None:
        server = await asyncio.start_server(self._on_connect, sock=sock)
        self.port = sock.getsockname()[1]
        reaper = asyncio.ensure_future(self._reap_loop())
        if ready:
            ready()
        try:
            async with server:
                await server.serve_forever()
        finally:
            reaper.cancel()

    async def _on_connect(self, reader, writer):
        hello = await aio.accept_or_drop(reader, writer, self.token)
        if hello is None:
            return
        role = hello["role"]
        try:
            if role in (P.ROLE_SERVER, P.ROLE_PROXY):
                await aio.accept_ok(writer)
                await self._serve_resource(reader, writer, hello)
            elif role == P.ROLE_TRACKER_CLIENT:
                await aio.accept_ok(writer)
                await self._serve_client(reader, writer)
            else:
                await aio.refuse(writer, f"this is an RPC tracker; role {role} cannot connect here "
                                         "(use tracker.request(key) to get a server session)")
        except (P.RPCError, ConnectionError, OSError, asyncio.TimeoutError, asyncio.CancelledError):
            pass  # CancelledError: the tracker is shutting down
        finally:
            aio.close_writer(writer)

    # -- servers -------------------------------------------------------------------------------
    async def _serve_resource(self, reader, writer, hello):
        _, msg = await asyncio.wait_for(aio.read_message(reader), 5)
        if not isinstance(msg, dict) or msg.get("op") != "register" or not isinstance(msg.get("key"), str) \
                or not isinstance(msg.get("port"), int):
            await aio.refuse(writer, "expected {op: register, key, port}")
            return
        peer = writer.get_extra_info("peername") or ("?", 0)
        host = msg.get("addr") or peer[0]
        label = msg.get("label") if isinstance(msg.get("label"), str) else f"server:{msg['key']}"
        res = _Resource(writer, msg["key"], host, msg["port"], label)
        if msg.get("free") is False:
            res.state = "busy"
        self.resources.append(res)
        log.info("register %s at %s:%d (%s)", res.key, host, res.port, res.state)
        self._dispatch(res.key)
        try:
            while True:
                _, msg = await aio.read_message(reader)
                res.last_seen = time.monotonic()
                if not isinstance(msg, dict):
                    raise P.ProtocolError("tracker messages are dicts")
                op = msg.get("op")
                if op == "state":
                    self._set_state(res, "free" if msg.get("free") else "busy")
                elif op in ("lease_ok", "lease_refused"):
                    fut = res.acks.pop(msg.get("token"), None)
                    if fut and not fut.done():
                        fut.set_result(op == "lease_ok")
                elif op != "ping":
                    raise P.ProtocolError(f"unknown server message {op!r}")
        finally:
            self._drop(res, "connection closed")

    def _set_state(self, res: _Resource, state: str) -> None:
        if res.state != state:
            res.state = state
            if state == "free":
                res.free_since = time.monotonic()
                self._dispatch(res.key)

    def _drop(self, res: _Resource, why: str) -> None:
        if res in self.resources:
            self.resources.remove(res)
            log.info("drop %s at %s:%d: %s", res.key, res.host, res.port, why)
            for fut in res.acks.values():
                if not fut.done():
                    fut.set_result(False)
            aio.close_writer(res.writer)

    async def _reap_loop(self):
        while True:
            await asyncio.sleep(min(1.0, self.heartbeat_timeout / 3))
            now = time.monotonic()
            for res in list(self.resources):
                if now - res.last_seen > self.heartbeat_timeout:
                    self._drop(res, f"no heartbeat for {self.heartbeat_timeout:g} s")
            for key, queue in list(self.queues.items()):
                for req in list(queue):
                    if req.deadline is not None and now >= req.deadline:
                        queue.remove(req)
                        if not req.future.done():
                            req.future.set_exception(P.RPCError(self._timeout_message(key)))

    def _timeout_message(self, key: str) -> str:
        known = sorted({r.key for r in self.resources})
        if any(r.key == key for r in self.resources):
            return f"no server with key {key!r} became free in time (all busy); try again or raise the timeout"
        return (f"no server with key {key!r} is registered with this tracker; known keys: "
                f"{', '.join(known) if known else '(none)'}. Check the key (--key of rpc_server).")

    # -- clients -------------------------------------------------------------------------------
    async def _serve_client(self, reader, writer):
        while True:
            _, msg = await aio.read_message(reader, 65536)
            if not isinstance(msg, dict):
                raise P.ProtocolError("tracker messages are dicts")
            op = msg.get("op")
            if op == "summary":
                aio.write_message(writer, {"op": "summary", **self.summary()})
            elif op == "request":
                reply = await self._handle_request(reader, msg)
                aio.write_message(writer, reply)
            elif op == "ping":
                aio.write_message(writer, {"op": "pong"})
            else:
                aio.write_message(writer, {"op": "error", "message": f"unknown op {op!r}"})
            await writer.drain()

    async def _handle_request(self, reader, msg) -> dict:
        key, priority = msg.get("key"), msg.get("priority", 1)
        if not isinstance(key, str) or not isinstance(priority, (int, float)):
            return {"op": "error", "message": "request needs a str key and a numeric priority"}
        timeout = msg.get("timeout")
        now = time.monotonic()
        deadline = now + timeout if isinstance(timeout, (int, float)) and timeout >= 0 else None
        if not any(r.key == key for r in self.resources):
            wait = msg.get("unknown_key_wait", self.unknown_key_wait)
            wait = self.unknown_key_wait if not isinstance(wait, (int, float)) else wait
            deadline = now + wait if deadline is None else min(deadline, now + wait)
        fut = asyncio.get_running_loop().create_future()
        req = _Request(key, priority, next(self._seq), deadline, fut)
        self.queues.setdefault(key, []).append(req)
        self._dispatch(key)
        # A client that hangs up while queued gives its place away.
        gone = asyncio.ensure_future(reader.read(1))
        try:
            done, _ = await asyncio.wait({fut, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            # The reader allows one waiter: let the cancelled read finish before reading again.
            await asyncio.gather(gone, return_exceptions=True)
        if fut not in done:
            self._withdraw(req)
            raise P.ConnectionLost("client left the queue")
        try:
            host, port, token = fut.result()
        except P.RPCError as e:
            return {"op": "error", "message": str(e)}
        return {"op": "grant", "host": host, "port": port, "token": token}

    def _withdraw(self, req: _Request) -> None:
        queue = self.queues.get(req.key, [])
        if req in queue:
            queue.remove(req)
        if not req.future.done():
            req.future.cancel()

    # -- matching ------------------------------------------------------------------------------
    def _dispatch(self, key: str) -> None:
        queue = self.queues.get(key)
        while queue:
            free = [r for r in self.resources if r.key == key and r.state == "free"]
            if not free:
                return
            res = min(free, key=lambda r: r.free_since)
            req = max(queue, key=lambda q: (q.priority, -q.seq))
            queue.remove(req)
            res.state = "leased"
            asyncio.ensure_future(self._lease(res, req))

    async def _lease(self, res: _Resource, req: _Request) -> None:
        token = os.urandom(12).hex()
        fut = asyncio.get_running_loop().create_future()
        res.acks[token] = fut
        ok = False
        try:
            aio.write_message(res.writer, {"op": "lease", "token": token, "lease_s": self.lease})
            ok = await asyncio.wait_for(fut, LEASE_ACK_TIMEOUT)
        except (asyncio.TimeoutError, ConnectionError, OSError, RuntimeError):
            self._drop(res, "did not acknowledge a lease")
        if req.future.done():  # the client gave up meanwhile: hand the lease back
            if ok:
                aio.write_message(res.writer, {"op": "cancel", "token": token})
                self._set_state(res, "free")
            return
        if ok:
            res.state = "busy"
            req.future.set_result((res.host, res.port, token))
            return
        if res in self.resources and res.state == "leased":
            res.state = "busy"  # it refused: it is serving someone directly
        self.queues.setdefault(req.key, []).insert(0, req)
        self._dispatch(req.key)

    def summary(self) -> dict:
        servers = [{"key": r.label, "addr": [r.host, r.port], "state": r.state} for r in self.resources]
        queue_info = {}
        for key in sorted({r.key for r in self.resources} | {k for k, q in self.queues.items() if q}):
            mine = [r for r in self.resources if r.key == key]
            queue_info[key] = {"total": len(mine), "free": sum(r.state == "free" for r in mine),
                               "pending": len(self.queues.get(key, []))}
        return {"server_info": servers, "queue_info": queue_info}


def serve(host: str = "0.0.0.0", port: int = 9190, port_end: int = 9199, token: str = "",
          **options) -> None:
    """Run a tracker until SIGINT/SIGTERM (the body of ``python -m kiln.exec.rpc_tracker``)."""
    sock = base.bind_first_free(host, port, port_end)
    log.info("bind to %s:%d", host, sock.getsockname()[1])
    base.warn_if_open(log, host, token)
    tracker = Tracker(token=token, **options)
    base.run_until_signal(lambda: tracker.serve(sock))
    log.info("stopped")
