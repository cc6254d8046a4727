"""What the three services share: choosing a port, the open-bind warning, running until a signal."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
import socket

from ..errors import RPCError


def bind_first_free(host: str, port: int, port_end: int | None) -> socket.socket:
    """A listening socket on the first free port in ``[port, port_end)`` (just ``port`` if no end)."""
    end = port + 1 if not port_end or port_end <= port else port_end
    last_error = None
    for p in range(port, end):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, p))
            sock.listen(128)
        except OSError as e:
            sock.close()
            last_error = e
            continue
        sock.setblocking(False)
        return sock
    raise RPCError(f"no free port in [{port}, {end}) on {host}: {last_error}. Pick another --port "
                   "or widen --port-end")


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_open(log: logging.Logger, host: str, token: str) -> None:
    if not token and not is_loopback(host):
        log.warning("listening on %s without an auth token: anyone who can connect can run code "
                    "on this machine. Pass --auth-token or set KILN_RPC_TOKEN.", host)


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s")


def run_until_signal(main_coro_factory) -> None:
    """Run ``main_coro_factory()`` until it returns or SIGINT/SIGTERM arrives, then clean up."""
    async def runner():
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(main_coro_factory())
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass
    asyncio.run(runner())
