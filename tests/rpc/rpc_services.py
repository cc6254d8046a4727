"""Start real RPC services (tracker, server, proxy) as subprocesses on 127.0.0.1 for tests."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Service:
    """A running ``python -m kiln.exec.<module>``; ``.port`` is parsed from its bind log line."""

    def __init__(self, module: str, *args: str, env: dict | None = None, wait_for: str | None = r"bind to [\d.]+:(\d+)"):
        self.log_path = f"/tmp/kiln-test-{module}-{os.getpid()}-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w+")
        full_env = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", f"kiln.exec.{module}", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=full_env)
        self.port = None
        if wait_for:
            m = self.wait_log(wait_for)
            self.port = int(m.group(1)) if m.groups() else None

    def text(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def wait_log(self, pattern: str, timeout: float = 10.0, count: int = 1):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = list(re.finditer(pattern, self.text()))
            if len(found) >= count:
                return found[count - 1]
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited ({self.proc.returncode}):\n{self.text()}")
            time.sleep(0.02)
        raise AssertionError(f"no {pattern!r} in the log after {timeout} s:\n{self.text()}")

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def tracker(*args, **kw) -> Service:
    return Service("rpc_tracker", "--host", HOST, "--port", str(free_port()), *args, **kw)


def server(*args, **kw) -> Service:
    return Service("rpc_server", "--host", HOST, "--port", str(free_port()), *args, **kw)


def proxy(*args, **kw) -> Service:
    return Service("rpc_proxy", "--host", HOST, "--port", str(free_port()), *args, **kw)


def wait_until(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout} s (last: {last!r})")
