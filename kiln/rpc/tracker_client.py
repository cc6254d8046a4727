"""The client side of the tracker: ``rpc.connect_tracker(host, port).request(key)``."""

from __future__ import annotations

import socket
import time

from .. import config
from ..errors import RPCError
from . import protocol as P
from .session import RPCSession, connect


class TrackerSession:
    """A connection to a tracker.

    >>> tracker = rpc.connect_tracker("127.0.0.1", 9190)
    >>> remote = tracker.request("rk3399", priority=1, session_timeout=60)
    >>> print(tracker.text_summary())
    """

    def __init__(self, host: str, port: int, auth_token: str | None = None):
        self.host, self.port = host, int(port)
        self._token = config.get().rpc_token if auth_token is None else auth_token
        self._ch = self._open()

    def _open(self) -> P.Channel:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=10)
        except OSError as e:
            raise RPCError(f"cannot connect to the RPC tracker at {self.host}:{self.port}: {e}. "
                           "Is python -m kiln.exec.rpc_tracker running there?") from None
        ch = P.Channel(sock, max_frame=16 * 1024 * 1024)
        try:
            P.client_handshake(ch, P.ROLE_TRACKER_CLIENT, "", self._token)
        except BaseException:
            ch.close()
            raise
        sock.settimeout(None)
        return ch

    def _call(self, msg: dict, ch: P.Channel | None = None) -> dict:
        ch = ch or self._ch
        ch.send(0, msg)
        _, reply = ch.recv_message()
        if not isinstance(reply, dict):
            raise P.ProtocolError("bad reply from the tracker")
        if reply.get("op") == "error":
            raise RPCError(f"tracker {self.host}:{self.port}: {reply.get('message')}")
        return reply

    def close(self) -> None:
        self._ch.close()

    def summary(self) -> dict:
        """``{"server_info": [{"key", "addr"}...], "queue_info": {key: {"total", "free", "pending"}}}``."""
        reply = self._call({"op": "summary"})
        return {"server_info": reply.get("server_info", []), "queue_info": reply.get("queue_info", {})}

    def text_summary(self) -> str:
        """The two tables ``query_rpc_tracker`` prints: server list and queue status."""
        return format_summary(self.summary())

    def request(self, key: str, priority: int = 1, session_timeout: float = 0, max_retry: int = 5,
                timeout: float | None = None) -> RPCSession:
        """Wait for a free server with ``key`` and open a session on it.

        Higher ``priority`` goes first. ``timeout`` (seconds) bounds the wait in the queue; a key
        no server has fails after at most 30 s with the list of keys the tracker knows.
        """
        last = None
        for _ in range(max(1, max_retry)):
            # One connection per request: if this client dies, the tracker sees it leave the queue.
            ch = self._open()
            try:
                msg = {"op": "request", "key": key, "priority": priority,
                       "timeout": -1.0 if timeout is None else float(timeout)}
                grant = self._call(msg, ch)
            finally:
                ch.close()
            try:
                return connect(grant["host"], grant["port"], key=key, session_timeout=session_timeout,
                               auth_token=self._token, lease_token=grant["token"])
            except RPCError as e:  # the server vanished between grant and connect: ask again
                last = e
                time.sleep(0.1)
        raise RPCError(f"could not open a session with key {key!r} after {max_retry} tries: {last}")

    def request_and_run(self, key: str, func, priority: int = 1, session_timeout: float = 0,
                        max_retry: int = 2):
        """Request a session and call ``func(session)``; retries on a lost session."""
        last = None
        for _ in range(max(1, max_retry)):
            try:
                with self.request(key, priority, session_timeout) as sess:
                    return func(sess)
            except RPCError as e:
                last = e
        raise RPCError(f"request_and_run on key {key!r} failed {max_retry} times: {last}")


def format_summary(summary: dict, tracker: str | None = None) -> str:
    lines = []
    if tracker:
        lines += [f"Tracker address {tracker}", ""]
    lines += ["Server List", "----------------------------", "server-address key",
              "----------------------------"]
    for addr, key in _server_rows(summary.get("server_info", [])):
        lines.append(f"{addr} {key}")
    lines += ["----------------------------", "", "Queue Status",
              "---------------------------------------", "key total free pending",
              "---------------------------------------"]
    for key, q in sorted(summary.get("queue_info", {}).items()):
        lines.append(f"{key} {q['total']} {q['free']} {q['pending']}")
    lines.append("---------------------------------------")
    return "\n".join(lines)


def _server_rows(server_info: list) -> list:
    """(address, key) per line of the server list: the servers behind one proxy share one line,
    ``server:proxy[K0,K1,K2]``, as in document 001 (each key once, sorted)."""
    rows, proxied = [], {}
    for info in server_info:
        host, port = info["addr"]
        addr, key = f"{host}:{port}", str(info["key"])
        if key.startswith("server:proxy[") and key.endswith("]"):
            keys = proxied.get(addr)
            if keys is None:
                keys = proxied[addr] = []
                rows.append((addr, keys))
            for k in key[len("server:proxy["):-1].split(","):
                if k and k not in keys:
                    keys.append(k)
        else:
            rows.append((addr, key))
    return [(addr, f"server:proxy[{','.join(sorted(key))}]" if isinstance(key, list) else key)
            for addr, key in rows]


def connect_tracker(url: str, port: int, auth_token: str | None = None) -> TrackerSession:
    """Connect to the RPC tracker at ``url:port``."""
    return TrackerSession(url, port, auth_token)
