"""What the tvmc modules share: the error a user can fix, and small argument parsers."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time

from kiln.errors import KilnError

logger = logging.getLogger("kiln.tvmc")


class TVMCException(KilnError):
    """A problem with tvmc's input (file, format, shape, target, tracker) the user can fix;
    the command line prints its message on one line and exits with code 2."""


def parse_shape_string(text: str) -> dict:
    """``"data:[1,3,224,224] mask:[1,16]"`` (or comma separated) -> ``{"data": [1, 3, 224, 224], ...}``."""
    shapes = {}
    # name:[d0,d1,...]; names may hold ':' (TF style "input:0") so the last ':' before '[' splits
    for match in re.finditer(r"\s*([^\s,\[\]]+?):\s*(\[[^\]]*\])\s*,?", text or ""):
        name, dims = match.group(1), match.group(2)
        try:
            shape = json.loads(dims)
        except json.JSONDecodeError:
            raise TVMCException(f"--input-shapes: cannot read the shape {dims!r} of {name!r}; write "
                                "NAME:[d0,d1,...], e.g. data:[1,3,224,224]") from None
        if not all(isinstance(d, int) and (d > 0 or d == -1) for d in shape):
            raise TVMCException(f"--input-shapes: the shape {dims} of {name!r} must list positive integers")
        shapes[name] = shape
    rest = re.sub(r"\s*([^\s,\[\]]+?):\s*(\[[^\]]*\])\s*,?", "", text or "").strip()
    if rest or (text and not shapes):
        raise TVMCException(f"--input-shapes: cannot read {text!r}; write NAME:[d0,d1,...] separated by "
                            "spaces, e.g. \"data:[1,3,224,224]\"")
    return shapes


def parse_pass_config(items) -> dict:
    """``["relay.FuseOps.max_depth=10", "tir.disable_vectorize=true"]`` -> a PassContext config dict."""
    config = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise TVMCException(f"--pass-config {item!r}: write KEY=VALUE, e.g. relay.FuseOps.max_depth=10")
        value = value.strip()
        lowered = value.lower()
        if lowered in ("true", "false"):
            config[key.strip()] = lowered == "true"
        elif re.fullmatch(r"-?\d+", value):
            config[key.strip()] = int(value)
        else:
            config[key.strip()] = value
    return config


def require_file(path, what: str, hint: str) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TVMCException(f"{what} {path!r} does not exist; {hint}")
    return path


def parse_host_port(text: str, what: str = "--rpc-tracker") -> tuple[str, int]:
    """``"127.0.0.1:9190"`` -> ("127.0.0.1", 9190)."""
    host, sep, port = (text or "").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TVMCException(f"{what} {text!r}: write HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


class Progress:
    """Progress lines for long steps (a large model's build, an upload to a slow board), on
    stderr so that stdout stays what scripts parse: through the ``kiln.tvmc`` logger when it
    shows info (``tvmc -v``), else only when stderr is a terminal. Each line starts with the
    seconds since the command began: ``tvmc compile: [ 12.3 s] lowering 53 kernels``."""

    def __init__(self, what: str):
        self.what = what
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        line = f"{self.what}: [{time.perf_counter() - self.start:5.1f} s] {message}"
        if logger.isEnabledFor(logging.INFO):
            logger.info(line)
        elif sys.stderr.isatty():
            print(f"tvmc {line}", file=sys.stderr, flush=True)
