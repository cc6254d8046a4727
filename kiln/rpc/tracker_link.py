"""A server's (or proxied server's) registration with the tracker, kept alive forever.

The link reconnects and registers again by itself whenever the tracker goes away, so a
restarted tracker sees its fleet again within a second. It sends a heartbeat every second and
answers the tracker's lease offers through callbacks.
"""

from __future__ import annotations

import asyncio
import logging

from . import aio, protocol as P

log = logging.getLogger("root")

HEARTBEAT = 1.0
RETRY = 0.5


class TrackerLink:
    def __init__(self, addr, token, registration, on_lease, on_cancel, log_prefix="RPCServer"):
        """``registration()`` gives the register message (called at every (re)connect);
        ``on_lease(token, lease_s) -> bool`` accepts or refuses a lease; ``on_cancel(token)``."""
        self.host, self.port = addr
        self.token = token
        self.registration, self.on_lease, self.on_cancel = registration, on_lease, on_cancel
        self.prefix = log_prefix
        self._writer = None
        self.registered = asyncio.Event()

    def send(self, msg: dict) -> None:
        """Best effort: if the link is down, the next registration carries the current state."""
        if self._writer is not None:
            try:
                aio.write_message(self._writer, msg)
            except (ConnectionError, OSError, RuntimeError):
                pass

    async def run(self) -> None:
        warned = False
        while True:
            try:
                reader, writer, _ = await aio.open_and_handshake(self.host, self.port, P.ROLE_SERVER, "", self.token)
            except (P.RPCError, OSError, asyncio.TimeoutError) as e:
                if not warned:
                    log.info("%s: cannot reach the tracker at %s:%d (%s); retrying every %g s",
                             self.prefix, self.host, self.port, e, RETRY)
                    warned = True
                await asyncio.sleep(RETRY)
                continue
            warned = False
            reg = self.registration()
            aio.write_message(writer, reg)
            self._writer = writer
            self.registered.set()
            log.info("%s: registered with the tracker %s:%d as %s", self.prefix, self.host, self.port, reg["key"])
            beat = asyncio.ensure_future(self._heartbeat(writer))
            try:
                await self._listen(reader, writer)
            except (P.RPCError, ConnectionError, OSError) as e:
                log.info("%s: lost the tracker connection (%s); re-registering", self.prefix, e)
            finally:
                beat.cancel()
                self._writer = None
                self.registered.clear()
                aio.close_writer(writer)
            await asyncio.sleep(RETRY)

    async def _heartbeat(self, writer):
        while True:
            await asyncio.sleep(HEARTBEAT)
            aio.write_message(writer, {"op": "ping"})
            await writer.drain()

    async def _listen(self, reader, writer):
        while True:
            _, msg = await aio.read_message(reader)
            if not isinstance(msg, dict):
                raise P.ProtocolError("tracker messages are dicts")
            op, token = msg.get("op"), msg.get("token")
            if op == "lease" and isinstance(token, str):
                lease_s = msg.get("lease_s", 5.0)
                ok = self.on_lease(token, float(lease_s) if isinstance(lease_s, (int, float)) else 5.0)
                aio.write_message(writer, {"op": "lease_ok" if ok else "lease_refused", "token": token})
            elif op == "cancel" and isinstance(token, str):
                self.on_cancel(token)
