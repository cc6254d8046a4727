"""kiln/cache.py: stable keys, atomic entries, damaged entries, the size bound, `kiln cache`."""

import contextlib
import io
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from kiln import cache, cli, config


@pytest.fixture
def cache_dir(tmp_path):
    with config.override(cache_dir=str(tmp_path / "cache")):
        yield tmp_path / "cache" / cache.SUBDIR


def _entry(key):
    return os.path.join(cache.directory(), key + cache.SUFFIX)


PARTS = ("relay.build", "llvm -mcpu=znver3", ((1, 2.5, "x", None, True), {"b": 1, "a": [2, 3]}),
         np.arange(6, dtype="float32").reshape(2, 3), b"\x00\x01")


def test_key_is_stable_across_processes_and_sensitive_to_every_part():
    here = cache.key(*PARTS)
    code = textwrap.dedent("""
        import numpy as np
        from kiln import cache
        print(cache.key("relay.build", "llvm -mcpu=znver3", ((1, 2.5, "x", None, True), {"a": [2, 3], "b": 1}),
                        np.arange(6, dtype="float32").reshape(2, 3), b"\\x00\\x01"))
    """)
    # Another process has another string-hash seed: the key must not depend on it.
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "123"}).stdout.strip()
    assert there == here and len(here) == 64
    changed = [
        ("relay.build", "llvm -mcpu=haswell", *PARTS[2:]),
        (*PARTS[:2], ((1, 2.5, "x", None, False), PARTS[2][1]), *PARTS[3:]),
        (*PARTS[:2], ((1, 2.5000001, "x", None, True), PARTS[2][1]), *PARTS[3:]),
        (*PARTS[:3], np.arange(6, dtype="float64").reshape(2, 3), PARTS[4]),
        (*PARTS[:3], np.arange(6, dtype="float32").reshape(3, 2), PARTS[4]),
        (*PARTS[:4], b"\x00\x02"),
        (*PARTS[:2], ((1, 2.5, "x", None, True), {"b": 1, "a": (2, 3, 4)}), *PARTS[3:]),
    ]
    keys = {cache.key(*p) for p in changed}
    assert here not in keys and len(keys) == len(changed)
    assert cache.key("ab", "c") != cache.key("a", "bc")  # lengths are part of the encoding
    assert cache.key(1) != cache.key(1.0) != cache.key("1")


def test_objects_without_a_stable_form_are_refused():
    class ById(int):
        pass

    for part in (object(), ById(5), {1, 2}, lambda: 0):
        with pytest.raises(cache.Uncacheable):
            cache.key("x", part)


def test_store_then_load_round_trips(cache_dir):
    key = cache.key("round trip")
    assert cache.load(key) is None
    files = {"obj": bytes(range(256)) * 10, "meta": b"{}", "empty": b""}
    assert cache.store(key, files)
    assert cache.load(key) == files
    assert [p.name for p in cache_dir.iterdir()] == [key + cache.SUFFIX]  # no temporary left


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "other_key"])
def test_damaged_entry_reads_as_a_miss_and_is_removed(cache_dir, damage):
    key = cache.key("damaged", damage)
    cache.store(key, {"obj": b"A" * 1000, "meta": b'{"x": 1}'})
    path = _entry(key)
    data = open(path, "rb").read()
    if damage == "truncate":
        data = data[:-10]
    elif damage == "flip":
        data = data[:-500] + bytes([data[-500] ^ 1]) + data[-499:]
    elif damage == "garbage":
        data = os.urandom(len(data))
    elif damage == "empty":
        data = b""
    else:  # a valid entry under the wrong name
        other = cache.key("another")
        cache.store(other, {"obj": b"B"})
        data = open(_entry(other), "rb").read()
    with open(path, "wb") as f:
        f.write(data)
    assert cache.load(key) is None
    assert not os.path.exists(path)
    assert cache.store(key, {"obj": b"A" * 1000, "meta": b'{"x": 1}'})  # rebuilt, readable again
    assert cache.load(key)["obj"] == b"A" * 1000


def test_size_bound_evicts_least_recently_used(cache_dir):
    payload = {"obj": b"x" * 10_000}
    size = len(cache._pack(payload, "0" * 64, b"k" * 32))
    keys = [cache.key("lru", i) for i in range(5)]
    with config.override(cache_size=3 * size + 100):
        for i, k in enumerate(keys[:3]):
            cache.store(k, payload)
            os.utime(_entry(k), (1000 + i, 1000 + i))  # distinct ages, oldest first
        assert cache.load(keys[0]) is not None  # a hit makes it the most recently used
        cache.store(keys[3], payload)  # over the bound: keys[1], now the oldest, goes
        assert cache.load(keys[1]) is None
        assert all(cache.load(k) is not None for k in (keys[0], keys[2], keys[3]))
        assert cache.info()["bytes"] <= 3 * size + 100
    with config.override(cache_size=size // 2):
        assert not cache.store(keys[4], payload)  # larger than the whole bound: not written
        assert cache.load(keys[4]) is None


def test_stale_temporary_files_are_swept(cache_dir):
    cache.store(cache.key("first"), {"a": b"1"})
    stale = cache_dir / (".tmp-dead" + cache.SUFFIX)
    fresh = cache_dir / (".tmp-busy" + cache.SUFFIX)
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(stale, (time.time() - 2 * cache._STALE_TMP_S,) * 2)
    cache.store(cache.key("second"), {"a": b"2"})
    assert not stale.exists() and fresh.exists()  # another writer may still own the fresh one
    assert cache.info()["entries"] == 2


def test_concurrent_writers_and_readers_see_whole_entries(cache_dir):
    """Two processes rewrite the same entry as fast as they can while this one reads it."""
    key = cache.key("concurrent")
    files = {"obj": os.urandom(1 << 20), "meta": b"m" * 1000}
    blob = cache_dir.parent.parent / "blob.bin"
    blob.write_bytes(files["obj"])
    code = textwrap.dedent(f"""
        from kiln import cache
        obj = open({str(blob)!r}, "rb").read()
        for _ in range(30):
            assert cache.store({key!r}, {{"obj": obj, "meta": b"m" * 1000}})
    """)
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_dir.parent)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    while any(p.poll() is None for p in procs):
        got = cache.load(key)
        assert got is None or got == files  # never a half-written entry
    assert [p.wait() for p in procs] == [0, 0]
    assert cache.load(key) == files
    assert [p.name for p in cache_dir.iterdir()] == [key + cache.SUFFIX]


def test_unwritable_folder_costs_a_warning_not_a_failure(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with config.override(cache_dir=str(blocker)):
        assert cache.store(cache.key("x"), {"a": b"1"}) is False
        assert cache.load(cache.key("x")) is None
    assert "cannot write" in caplog.text


@pytest.mark.parametrize("value", ["off", "", "OFF", "none"])
def test_cache_off(value):
    with config.override(cache_dir=value):
        assert cache.directory() is None
        assert cache.store(cache.key("x"), {"a": b"1"}) is False
        assert cache.load(cache.key("x")) is None


def test_size_setting_parses_units(monkeypatch):
    for raw, want in [("1048576", 1 << 20), ("500M", 500 << 20), ("2G", 2 << 30), ("1.5g", 3 << 29),
                      ("64KiB", 64 << 10), ("", 1 << 30)]:
        monkeypatch.setenv("KILN_CACHE_SIZE", raw)
        assert config._from_env().cache_size == want, raw
    for raw in ("lots", "abc", "-5"):  # never an error: the cache warns and keeps its default bound
        monkeypatch.setenv("KILN_CACHE_SIZE", raw)
        assert config._from_env().cache_size == -1, raw


def _cli(*argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(list(argv)) == 0
    return out.getvalue()


def test_cli_info_and_clear(cache_dir):
    for i in range(3):
        cache.store(cache.key("cli", i), {"obj": b"x" * 4096})
    info = _cli("cache", "info")
    assert str(cache_dir) in info and "entries    3" in info
    assert "removed 3 entries" in _cli("cache", "clear")
    assert cache.info()["entries"] == 0 and "entries    0" in _cli("cache", "info")
    with config.override(cache_dir="off"):
        assert "off" in _cli("cache", "clear")


def test_kiln_config_lists_the_cache_settings():
    out = _cli("config")
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "KILN_CACHE_DIR" in lines["cache_dir"] and "KILN_CACHE_SIZE" in lines["cache_size"]
    assert repr(config.get().cache_dir) in lines["cache_dir"]


# -- hostile caches (issue 29) ----------------------------------------------------------------------
def test_fifo_in_place_of_an_entry_is_a_miss_not_a_hang(cache_dir):
    key = cache.key("fifo")
    cache.store(key, {"obj": b"x"})
    os.unlink(_entry(key))
    os.mkfifo(_entry(key))  # open() for reading would block until a writer came
    start = time.monotonic()
    assert cache.load(key) is None
    assert time.monotonic() - start < 1 and not os.path.exists(_entry(key))
    assert cache.store(key, {"obj": b"x"}) and cache.load(key) == {"obj": b"x"}


def test_sparse_entry_larger_than_the_bound_is_never_read(cache_dir):
    import resource
    key = cache.key("sparse")
    cache.store(key, {"obj": b"x"})
    with open(_entry(key), "r+b") as f:
        f.truncate(8 << 30)  # 8 GiB apparent, no blocks
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with config.override(cache_size=1 << 30):
        assert cache.load(key) is None
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB: nothing read
    assert not os.path.exists(_entry(key))


def test_entry_forged_under_another_key_is_refused(cache_dir):
    """A writer of the folder copies model A's entry under model B's key, rewriting the header and
    checksum consistently: without the user's secret it cannot make the HMAC tag."""
    import hashlib
    import json
    import struct
    a, b = cache.key("model A"), cache.key("model B")
    cache.store(a, {"obj": b"code of A"})
    data = open(_entry(a), "rb").read()[:-cache._TAG]
    start = len(cache._MAGIC) + 8
    (n,) = struct.unpack(">Q", data[len(cache._MAGIC):start])
    header = json.loads(data[start:start + n])
    header["key"] = b
    payload = data[start + n:]
    new_header = json.dumps(header).encode()
    forged = cache._MAGIC + struct.pack(">Q", len(new_header)) + new_header + payload
    for tag in (hashlib.sha256(forged).digest(), b"\0" * cache._TAG):
        with open(_entry(b), "wb") as f:
            f.write(forged + tag)
        assert cache.load(b) is None and not os.path.exists(_entry(b))
    # The same bytes with the right tag would have been accepted: the tag is what refuses them.
    secret = cache._secret(cache.directory())
    with open(_entry(b), "wb") as f:
        f.write(cache._pack({"obj": b"code of A"}, b, secret))
    assert cache.load(b) == {"obj": b"code of A"}


def test_secret_is_made_once_private_and_outside_the_folder(cache_dir, tmp_path):
    secret = tmp_path / "conf" / "kiln" / "cache-secret"
    with config.override(cache_secret=str(secret)):
        key = cache.key("secret")
        assert cache.store(key, {"obj": b"1"})
        assert secret.stat().st_mode & 0o777 == 0o600 and secret.parent.stat().st_mode & 0o777 == 0o700
        first = secret.read_bytes()
        assert cache.load(key) == {"obj": b"1"} and secret.read_bytes() == first and len(first) == 32
    with config.override(cache_secret=str(secret.with_name("other"))):
        assert cache.load(key) is None  # another secret (another user): the entry is not trusted
    inside = tmp_path / "cache" / "cache-secret"
    with config.override(cache_secret=str(inside)):
        assert not cache.store(key, {"obj": b"1"}) and not inside.exists()


def test_folder_writable_by_others_is_not_used(cache_dir, caplog):
    key = cache.key("shared folder")
    cache.store(key, {"obj": b"1"})
    os.chmod(cache_dir, 0o777)
    try:
        cache._warned.clear()
        with caplog.at_level("WARNING", logger="kiln.cache"):
            assert cache.load(key) is None and not cache.store(key, {"obj": b"2"})
        assert "group or others can write it" in caplog.text and "builds go on uncached" in caplog.text
    finally:
        os.chmod(cache_dir, 0o700)
    assert cache.load(key) == {"obj": b"1"}


def test_cache_size_that_is_not_a_size_warns_and_keeps_the_default(cache_dir, caplog):
    cache._warned.clear()
    with config.override(cache_size=-1), caplog.at_level("WARNING", logger="kiln.cache"):
        key = cache.key("bad size")
        assert cache.store(key, {"obj": b"1"}) and cache.load(key) == {"obj": b"1"}
        assert cache.info()["limit"] == cache.DEFAULT_SIZE
    assert "KILN_CACHE_SIZE is not a size" in caplog.text


def test_builds_succeed_with_a_bad_cache_size(tmp_path):
    """docs/cache.md: the cache never fails a build (KILN_CACHE_SIZE=abc / -5 used to fail all)."""
    code = textwrap.dedent("""
        import numpy as np
        import kiln as tvm
        from kiln import relay
        x = relay.var("x", shape=(2, 2), dtype="float32")
        lib = relay.build(tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(x))), target="llvm")
        print("built", len(lib.get_graph_json()) > 0)
    """)
    for raw in ("abc", "-5"):
        env = {**os.environ, "KILN_CACHE_SIZE": raw, "KILN_CACHE_DIR": str(tmp_path / "c")}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0 and "built True" in proc.stdout, proc.stderr[-2000:]
        assert "KILN_CACHE_SIZE is not a size" in proc.stderr
