"""The RPC server's main process: accepts sessions, forks one worker per session, watches it.

The main process never runs user code. It does the handshake, then forks a worker (worker.py)
that owns the client's socket for the rest of the session, so calls go straight from client to
worker with no hop through this process. The main process keeps a duplicate of the socket:
when the worker dies from a signal, exits abnormally or outlives ``session_timeout``, it kills
it and writes one error frame naming the cause, so the client gets a clear error instead of a
bare disconnect. It also keeps the registration with the tracker alive (tracker_link.py) or,
with ``--through-proxy``, an idle connection to the proxy for the next client.

One session at a time: a server is one device, and the tracker hands it to one client. A
client that connects while a session runs is told it is queued (HS_QUEUED) and gets the
server when the sessions before it end, in the order they connected, as TVM's server does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import tempfile
import time

from . import aio, base, protocol as P
from .tracker_link import TrackerLink

log = logging.getLogger("root")


class _Session:
    def __init__(self, pid, sock, workdir, timeout):
        self.pid, self.sock, self.workdir, self.timeout = pid, sock, workdir, timeout
        self.started = time.monotonic()
        self.kill_reason = ""
        self.kill_code = 0
        self.pidfd: int | None = None


class Server:
    def __init__(self, host="0.0.0.0", key="", tracker_addr=None, through_proxy=False, proxy_addr=None,
                 custom_addr=None, token="", load_library=(), workdir_root=None):
        self.host, self.key, self.token = host, key, token
        self.tracker_addr, self.custom_addr = tracker_addr, custom_addr
        self.through_proxy, self.proxy_addr = through_proxy, proxy_addr
        self.load_library = list(load_library or ())
        self.workdir_root = workdir_root
        self.port = 0
        self.session: _Session | None = None
        self.lease_token = ""
        self._lease_timer = None
        self._link: TrackerLink | None = None
        self._idle: asyncio.Event | None = None
        self._queue: list[asyncio.Future] = []  # clients waiting for the running session to end
        self._claimed = False  # a client was admitted and its session is starting

    # -- service -------------------------------------------------------------------------------
    async def serve(self, sock: socket.socket | None) -> None:
        self._idle = asyncio.Event()
        self._idle.set()
        self._preload()
        tasks = []
        server = None
        if sock is not None:
            self.port = sock.getsockname()[1]
            server = await asyncio.start_server(self._on_connect, sock=sock)
        if self.tracker_addr:
            self._link = TrackerLink(self.tracker_addr, self.token, self._registration, self._on_lease,
                                     self._on_cancel, log_prefix="RPCServer")
            tasks.append(asyncio.ensure_future(self._link.run()))
        if self.through_proxy:
            tasks.append(asyncio.ensure_future(self._proxy_loop()))
        tasks.append(asyncio.ensure_future(self._watch_client_loop()))
        self._warm_imports()
        try:
            if server is not None:
                async with server:
                    await server.serve_forever()
            else:
                await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            if self.session:
                self._kill(self.session, "the server is shutting down", P.E_SHUTDOWN)

    def _preload(self):
        import ctypes
        for lib in self.load_library:
            # RTLD_GLOBAL: modules loaded later in the workers can resolve symbols from it.
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
            log.info("RPCServer: loaded %s", lib)

    @staticmethod
    def _warm_imports():
        # Import the runtime once here so every forked worker starts with it loaded. A device
        # without numpy still serves files and server functions.
        for name in ("kiln.runtime.ndarray", "kiln.runtime.module", "kiln.runtime.evaluator"):
            try:
                __import__(name)
            except ImportError as e:
                log.info("RPCServer: %s not available (%s); sessions load it on demand", name, e)
                break

    def _registration(self) -> dict:
        return {"op": "register", "key": self.key, "port": self.port, "addr": self.custom_addr or "",
                "free": self._is_free()}

    def _is_free(self) -> bool:
        return self.session is None and not self.lease_token and not self._claimed and not self._queue

    # -- accepting -----------------------------------------------------------------------------
    async def _on_connect(self, reader, writer):
        hello = await aio.accept_or_drop(reader, writer, self.token)
        if hello is None:
            return
        problem, code = self._admission_problem(hello)
        if code == P.E_BUSY and not self.lease_token and not (hello.get("lease") or ""):
            try:
                await self._wait_turn(reader, writer)
            except (ConnectionError, OSError):
                aio.close_writer(writer)
                return
            problem = None  # the turn is ours: self._claimed is held for this client
        if problem:
            await aio.refuse(writer, problem, code)
            aio.close_writer(writer)
            return
        self._claimed = True
        try:
            await aio.accept_ok(writer)
            raw = writer.get_extra_info("socket")
            sock = socket.socket(fileno=os.dup(raw.fileno()))
        except (ConnectionError, OSError):
            aio.close_writer(writer)
            self._claimed = False
            self._next_turn()
            return
        writer.transport.abort()  # the worker owns the connection from now on
        self._start_session(sock, hello)

    def _admission_problem(self, hello) -> tuple[str | None, int]:
        """(why the client cannot have a session now, its error code), or (None, 0)."""
        if hello["role"] != P.ROLE_CLIENT:
            return "this is an RPC server; only session clients connect here", P.E_BAD_REQUEST
        if hello["key"] and self.key and hello["key"] != self.key and not hello["key"].startswith("client:"):
            return f"this server has key {self.key!r}, the client asked for {hello['key']!r}", P.E_BAD_REQUEST
        if self.session is not None or self._queue or self._claimed:
            return ("the server is busy with another session; use a tracker (rpc.connect_tracker) to "
                    "queue for it"), P.E_BUSY
        lease = hello.get("lease") or ""
        if self.lease_token and lease != self.lease_token:
            return ("the server is reserved by the tracker for another client; request it through the "
                    "tracker"), P.E_BUSY
        if lease and not self.lease_token:
            return "the tracker's lease for this session expired or was cancelled; request again", P.E_BUSY
        return None, 0

    async def _wait_turn(self, reader, writer) -> None:
        """Queue a direct client behind the session that runs (or is starting); returns when its
        turn comes, with the server claimed for it. A client that hangs up while waiting leaves
        the queue (ConnectionError)."""
        turn = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        gone = None
        try:
            aio.write_message(writer, {"status": P.HS_QUEUED, "position": len(self._queue)})
            await writer.drain()
            gone = asyncio.ensure_future(reader.read(1))  # EOF (or stray bytes) while queued: it left
            await asyncio.wait([turn, gone], return_when=asyncio.FIRST_COMPLETED)
            if not turn.done():
                raise ConnectionError("the queued client left")
        except BaseException:
            if turn in self._queue:
                self._queue.remove(turn)
            elif turn.done():  # its turn had come: pass it on
                self._claimed = False
                self._next_turn()
            raise
        finally:
            if gone is not None and not gone.done():
                gone.cancel()
                await asyncio.wait([gone])

    def _next_turn(self) -> None:
        """Claim the idle server for the first queued client and wake it."""
        while self.session is None and not self._claimed and self._queue:
            turn = self._queue.pop(0)
            if not turn.done():
                self._claimed = True
                turn.set_result(None)

    def _start_session(self, sock: socket.socket, hello: dict) -> None:
        self._claimed = False
        self._clear_lease()
        timeout = hello.get("session_timeout") or 0
        timeout = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else 0.0
        workdir = tempfile.mkdtemp(prefix="kiln-rpc-session-", dir=self.workdir_root)
        sock.setblocking(True)
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            self._run_worker(sock, workdir, server_pid)  # never returns
        self.session = _Session(pid, sock, workdir, timeout)
        self._idle.clear()
        if self._link:
            self._link.send({"op": "state", "free": False})
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(pid)
            loop.add_reader(pidfd, self._on_worker_exit, self.session, pidfd)
            self.session.pidfd = pidfd
        except (AttributeError, OSError):  # no pidfd: the watch loop polls instead
            pass
        if timeout:
            loop.call_later(timeout, self._on_timeout, self.session)

    @staticmethod
    def _run_worker(sock: socket.socket, workdir: str, server_pid: int) -> None:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            _die_with_parent(server_pid)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            # Drop every inherited descriptor but the client's: listening sockets, the tracker
            # link and the parent's event loop must not stay open in the child.
            fd = sock.fileno()
            os.closerange(3, fd)
            os.closerange(fd + 1, 65536)
            from .worker import Worker
            os.chdir(workdir)
            Worker(P.Channel(sock), workdir).serve()
            code = 0
        except BaseException:  # noqa: BLE001 - report and leave the child, never return into the loop
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)

    # -- session end ---------------------------------------------------------------------------
    def _on_timeout(self, session: _Session) -> None:
        if self.session is session:
            self._kill(session, f"session_timeout of {session.timeout:g} s passed; the server ended "
                                "the session. Pass a larger session_timeout if the work needs longer.",
                       P.E_TIMEOUT)

    def _kill(self, session: _Session, reason: str, code: int) -> None:
        if not session.kill_reason:
            session.kill_reason, session.kill_code = reason, code
        try:
            os.kill(session.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _on_worker_exit(self, session: _Session, pidfd: int | None, status: int | None = None) -> None:
        if pidfd is not None:
            asyncio.get_running_loop().remove_reader(pidfd)
            os.close(pidfd)
        if status is None:
            try:
                _, status = os.waitpid(session.pid, 0)
            except ChildProcessError:
                status = 0
        message, code = session.kill_reason, session.kill_code or P.E_WORKER_DIED
        if not message and os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            message = (f"the session's worker process died from {signal.Signals(sig).name} while running "
                       "your code (e.g. a kernel that reads out of bounds); the server is still up and "
                       "the next session starts fresh")
        elif not message and os.WEXITSTATUS(status):
            message = f"the session's worker process exited with code {os.WEXITSTATUS(status)}"
        if message:
            log.info("RPCServer: session ended: %s", message)
            try:
                session.sock.setblocking(False)
                session.sock.sendall(b"".join(P.pack_message(P.OP_ERROR, P.error_info(
                    "RPCSessionError", message, code))))
            except OSError:
                pass
        session.sock.close()
        shutil.rmtree(session.workdir, ignore_errors=True)
        self.session = None
        self._next_turn()
        self._idle.set()
        if self._link and self._is_free():
            self._link.send({"op": "state", "free": True})

    async def _watch_client_loop(self):
        """Once a second: end a session whose client hung up while its worker is stuck, and reap
        workers where pidfd is unavailable."""
        while True:
            await asyncio.sleep(1.0)
            s = self.session
            if s is None:
                continue
            if s.pidfd is None:
                pid, status = os.waitpid(s.pid, os.WNOHANG)
                if pid:
                    self._on_worker_exit(s, None, status)
                    continue
            try:
                if s.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    self._kill(s, "the client disconnected", P.E_SHUTDOWN)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._kill(s, "the client connection broke", P.E_SHUTDOWN)

    # -- tracker leases ------------------------------------------------------------------------
    def _on_lease(self, token: str, lease_s: float) -> bool:
        if not self._is_free():
            return False
        self.lease_token = token
        self._lease_timer = asyncio.get_running_loop().call_later(lease_s, self._lease_expired, token)
        return True

    def _on_cancel(self, token: str) -> None:
        if self.lease_token == token:
            self._clear_lease()

    def _lease_expired(self, token: str) -> None:
        if self.lease_token == token and self.session is None and not self._claimed:
            log.info("RPCServer: the granted client never connected; back to the pool")
            self._clear_lease()
            if self._link:
                self._link.send({"op": "state", "free": True})

    def _clear_lease(self) -> None:
        self.lease_token = ""
        if self._lease_timer:
            self._lease_timer.cancel()
            self._lease_timer = None

    # -- through a proxy -----------------------------------------------------------------------
    async def _proxy_loop(self):
        host, port = self.proxy_addr
        announced = False
        while True:
            await self._idle.wait()
            try:
                reader, writer, _ = await aio.open_and_handshake(host, port, P.ROLE_SERVER, self.key, self.token)
            except (P.RPCError, OSError, asyncio.TimeoutError) as e:
                if announced:
                    log.info("RPCServer: proxy %s:%d unreachable (%s); retrying", host, port, e)
                    announced = False
                await asyncio.sleep(0.5)
                continue
            if not announced:
                log.info("RPCServer: connected to proxy %s:%d with key %s", host, port, self.key)
                announced = True
            try:
                _, msg = await aio.read_message(reader)
                if not isinstance(msg, dict) or msg.get("op") != "session":
                    raise P.ProtocolError("expected a session request from the proxy")
                await aio.accept_ok(writer)
                raw = writer.get_extra_info("socket")
                sock = socket.socket(fileno=os.dup(raw.fileno()))
                writer.transport.abort()
                self._start_session(sock, {"session_timeout": msg.get("session_timeout", 0)})
            except (P.RPCError, ConnectionError, OSError):
                aio.close_writer(writer)
                await asyncio.sleep(0.2)


def _die_with_parent(server_pid: int) -> None:
    """Linux: the worker gets SIGKILL when the server dies, so no orphan keeps a session open."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    # The server may have died between fork() and prctl(): then no signal will ever come, and
    # the orphan would keep the client's session open (seen on a loaded CI machine).
    if os.getppid() != server_pid:
        os._exit(1)


def serve(host="0.0.0.0", port=9090, port_end=9199, tracker=None, key="", through_proxy=False,
          custom_addr=None, token="", load_library=()) -> None:
    """Run a server until SIGINT/SIGTERM (the body of ``python -m kiln.exec.rpc_server``)."""
    sock = None
    if through_proxy:
        proxy_addr = (host, port)
        log.info("RPCServer: serving through the proxy at %s:%d with key %s", host, port, key)
    else:
        proxy_addr = None
        sock = base.bind_first_free(host, port, port_end)
        log.info("RPCServer: bind to %s:%d", host, sock.getsockname()[1])
        base.warn_if_open(log, host, token)
    srv = Server(host, key, tracker, through_proxy, proxy_addr, custom_addr, token, load_library)
    base.run_until_signal(lambda: srv.serve(sock))
    log.info("RPCServer: stopped")
