"""Every setting kiln reads from the environment, in one place.

``config.get().debug`` reads a value; ``with config.override(debug=2): ...`` changes it for a block.
No other module reads ``os.environ``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os


def _int(name: str, default: int, *aliases: str) -> int:
    for key in (name, *aliases):
        raw = os.environ.get(key)
        if raw:
            try:
                return int(raw)
            except ValueError:
                raise ValueError(f"environment variable {key}={raw!r} must be an integer") from None
    return default


def _str(name: str, default: str = "", *aliases: str) -> str:
    for key in (name, *aliases):
        raw = os.environ.get(key)
        if raw:
            return raw
    return default


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _size(name: str, default: int, invalid: int | None = None) -> int:
    """Bytes, as ``1073741824``, ``500M`` or ``2G`` (powers of 1024). A value that is not a size
    raises, or gives ``invalid`` when one is given (for settings that must never stop kiln)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    text = raw.lower().removesuffix("b").removesuffix("i")
    unit = text[-1:] if text[-1:] in _UNITS and not text[-1:].isdigit() else ""
    try:
        value = float(text[:-1] if unit else text)
    except ValueError:
        value = -1.0
    if value < 0:
        if invalid is not None:
            return invalid
        raise ValueError(f"environment variable {name}={raw!r} must be a size such as 500M or 2G")
    return int(value * _UNITS[unit])


def _cache_home() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                        "kiln")


def _config_home(name: str) -> str:
    return os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"),
                        "kiln", name)


@dataclasses.dataclass(frozen=True)
class Config:
    debug: int = 0
    """KILN_DEBUG: 1 prints build steps, 2 also prints the IR after every pass."""
    num_threads: int = 0
    """KILN_NUM_THREADS (or TVM_NUM_THREADS): threads for parallel loops; 0 means one per core."""
    rpc_token: str = ""
    """KILN_RPC_TOKEN: shared secret for RPC servers, trackers and proxies."""
    cache_dir: str = ""
    """KILN_CACHE_DIR: where relay.build keeps compiled kernels (default ~/.cache/kiln; "off" disables)."""
    cache_secret: str = ""
    """KILN_CACHE_SECRET: the file holding the build cache's HMAC key, outside KILN_CACHE_DIR (default ~/.config/kiln/cache-secret)."""
    cache_size: int = 1 << 30
    """KILN_CACHE_SIZE: the build cache's size bound, e.g. 500M or 2G (default 1G; -1: not a size, the cache warns and uses 1G)."""
    load_limit: int = 4 << 30
    """KILN_LOAD_LIMIT: the most bytes one tensor or buffer that a loaded file declares may take (default 4G)."""
    load_expansion: int = 64 << 20
    """KILN_LOAD_EXPANSION: data a model file may compute at load beyond 8x its own size (default 64M)."""
    cc: str = ""
    """KILN_CC (or CC): the host C compiler used to link shared objects (default: cc)."""
    ndk_cc: str = ""
    """TVM_NDK_CC: the Android NDK compiler used by contrib.ndk."""
    test_targets: str = ""
    """KILN_TEST_TARGETS: comma-separated targets the test suite runs kernels on."""
    opencl_platform: str = ""
    """KILN_OPENCL_PLATFORM: use the OpenCL platform whose name contains this (default: the first with devices)."""
    dnnl_shims: str = ""
    """KILN_DNNL_SHIMS: prebuilt oneDNN shims (libkiln_dnnl.so) for other triples, separated by ':'; relay.build embeds the one matching the target's architecture."""


def _from_env() -> Config:
    return Config(
        debug=_int("KILN_DEBUG", 0),
        num_threads=_int("KILN_NUM_THREADS", 0, "TVM_NUM_THREADS"),
        rpc_token=_str("KILN_RPC_TOKEN"),
        cache_dir=os.environ.get("KILN_CACHE_DIR", _cache_home()),
        cache_secret=_str("KILN_CACHE_SECRET", _config_home("cache-secret")),
        cache_size=_size("KILN_CACHE_SIZE", 1 << 30, invalid=-1),
        load_limit=_size("KILN_LOAD_LIMIT", 4 << 30),
        load_expansion=_size("KILN_LOAD_EXPANSION", 64 << 20),
        cc=_str("KILN_CC", "", "CC"),
        ndk_cc=_str("TVM_NDK_CC"),
        test_targets=_str("KILN_TEST_TARGETS", "llvm"),
        opencl_platform=_str("KILN_OPENCL_PLATFORM"),
        dnnl_shims=_str("KILN_DNNL_SHIMS"),
    )


_current: contextvars.ContextVar[Config | None] = contextvars.ContextVar("kiln_config", default=None)


def get() -> Config:
    cfg = _current.get()
    if cfg is None:
        cfg = _from_env()
        _current.set(cfg)
    return cfg


@contextlib.contextmanager
def override(**changes):
    token = _current.set(dataclasses.replace(get(), **changes))
    try:
        yield get()
    finally:
        _current.reset(token)


def describe() -> list[tuple[str, str, str]]:
    """(field, value, doc) for ``kiln config``; the docs are the field docstrings above."""
    import ast
    import inspect

    docs: dict[str, str] = {}
    try:
        body = ast.parse(inspect.getsource(Config)).body[0].body
    except (OSError, TypeError):  # no source (frozen app): values without docs
        body = []
    for stmt, nxt in zip(body, body[1:]):
        if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[stmt.target.id] = str(nxt.value.value)
    cfg = get()
    return [(f.name, repr(getattr(cfg, f.name)), docs.get(f.name, "")) for f in dataclasses.fields(Config)]
