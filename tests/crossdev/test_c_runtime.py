"""The C runtime's API from C (host and aarch64 under qemu), and kiln_rpc against malformed
frames with AddressSanitizer and UBSan watching."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kiln as tvm
from kiln import rpc
from kiln.errors import RPCError
from kiln.rpc import protocol as P

import boards
import kernels as kernel_defs
from boards import svc

DRIVER = os.path.join(os.path.dirname(__file__), "c_api_driver.c")


def _add_one(target: str, directory) -> dict:
    s, tensors, _, _ = kernel_defs.add_one(1024)
    return boards.module_files(str(directory), "add_one", tvm.build(s, tensors, target=target, name="add_one"))


def _driver(build_dir: str, cc: str, out: str) -> str:
    subprocess.run([cc, "-O1", "-o", out, DRIVER, f"-I{boards.RUNTIME_SRC}", os.path.join(build_dir, "libkiln_runtime.a"),
                    "-ldl", "-lm", "-lpthread"], check=True)
    return out


def test_c_api_on_the_host_with_32_byte_alignment(runtime_builds, tmp_path):
    build = runtime_builds("", "KALLOC_ALIGNMENT=32")
    exe = _driver(build, "gcc", str(tmp_path / "driver"))
    files = _add_one("llvm", tmp_path)
    for fmt in ("so", "tar"):
        out = subprocess.run([exe, files[fmt], "32"], capture_output=True, text=True, timeout=60)
        words = out.stdout.split()
        assert out.returncode == 0 and words[0] == "ok" and words[2] == "32", out.stdout + out.stderr


@pytest.mark.qemu
def test_c_api_on_aarch64(runtime_builds, tmp_path):
    arch = boards.ARCHES["aarch64"]
    if arch.missing():
        pytest.skip(arch.missing())
    exe = _driver(runtime_builds(arch.cross), f"{arch.cross}gcc", str(tmp_path / "driver"))
    files = _add_one(arch.target, tmp_path)
    for fmt in ("so", "tar"):
        out = subprocess.run([arch.qemu, "-L", arch.sysroot, exe, files[fmt], "64"], capture_output=True,
                             text=True, timeout=60, env=dict(os.environ, KILN_CC=f"{arch.cross}gcc"))
        assert out.stdout.strip() == "ok aarch64 64", out.stdout + out.stderr


# ---- malformed input against a sanitized host build ---------------------------------------------

SANITIZE = ("CFLAGS=-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined",
            "LDFLAGS=-fsanitize=address,undefined")


@pytest.fixture(scope="module")
def sanitized_server(runtime_builds, tmp_path_factory):
    build = runtime_builds("", *SANITIZE)
    # The Makefile strips binaries; sanitizers only need the runtime linked in, which it is.
    board = boards.Board(os.path.join(build, "kiln_rpc"), None, "--host", svc.HOST, "--port", str(svc.free_port()),
                         env={"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"})
    yield board
    board.stop()
    text = board.text()
    assert "runtime error" not in text and "AddressSanitizer" not in text, text


def _when_free(open_session):
    """One session at a time: the previous session's worker may still be exiting."""
    for _ in range(100):
        try:
            return open_session()
        except RPCError as e:
            assert "busy" in str(e), e
            time.sleep(0.05)
    raise AssertionError("the server stayed busy for 5 s after its client left")


def _handshake(port: int) -> socket.socket:
    def attempt():
        sock = socket.create_connection((svc.HOST, port), timeout=10)
        try:
            P.client_handshake(P.Channel(sock), P.ROLE_CLIENT, "", "")
        except BaseException:
            sock.close()
            raise
        return sock
    return _when_free(attempt)


def _reply_or_close(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    try:
        while True:
            got = sock.recv(65536)
            if not got:
                return data
            data += got
            if len(data) >= 4 and len(data) >= 4 + struct.unpack("<I", data[:4])[0]:
                return data
    except socket.timeout:
        return data


frames = st.one_of(
    st.binary(max_size=64).map(lambda b: struct.pack("<I", len(b)) + b),                 # random bodies
    st.tuples(st.integers(0, 17), st.binary(max_size=48)).map(
        lambda t: struct.pack("<IB", len(t[1]) + 1, t[0]) + t[1]),                         # valid opcode, junk value
    st.tuples(st.integers(2, 17), st.lists(st.one_of(st.integers(-2, 2**40), st.text(max_size=8),
                                                     st.binary(max_size=8), st.none()), max_size=5)).map(
        lambda t: b"".join(P.pack_message(t[0], t[1]))),                                   # well-formed, wrong args
    st.sampled_from([struct.pack("<I", 0), struct.pack("<I", 0xFFFFFFF0) + b"\x02",
                     struct.pack("<IB", 6, 2) + b"\x05\xff\xff\xff\xff",                   # list claims 4G items
                     struct.pack("<IB", 14, 9) + b"\x08" + struct.pack("<I", 0xFFFFFFFF) + b"\0" * 4 + b"\0\0",
                     b"".join(P.pack_message(9, [[1 << 62, 1 << 62], "float32", P.Device(1, 0)])),
                     b"".join(P.pack_message(11, [1, 0, 16]))]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=frames)
def test_malformed_frames_never_break_the_server(sanitized_server, frame):
    sock = _handshake(sanitized_server.port)
    try:
        sock.sendall(frame)
        sock.shutdown(socket.SHUT_WR)  # the worker answers (or not), then sees the end
        _reply_or_close(sock)
    finally:
        sock.close()
    # The server is still there and serves a well-formed session.
    with _when_free(lambda: rpc.connect(svc.HOST, sanitized_server.port)) as remote:
        assert remote.get_function("rpc.echo")(1, "x", b"y") == [1, "x", b"y"]


def test_hostile_handshakes_are_refused(sanitized_server):
    for junk in (b"\x00" * 4, struct.pack("<I", 4096 + 1), b"".join(P.pack_message(0, {"magic": b"NOPE"})),
                 b"".join(P.pack_message(0, {"magic": b"KILN", "version": 1, "role": 1, "key": "", "nonce": b"x"}))):
        with socket.create_connection((svc.HOST, sanitized_server.port), timeout=10) as sock:
            sock.sendall(junk)
            _reply_or_close(sock)
    with _when_free(lambda: rpc.connect(svc.HOST, sanitized_server.port)) as remote:
        assert remote.get_function("rpc.getpid")() > 0


def test_session_files_stay_inside(sanitized_server, tmp_path):
    with _when_free(lambda: rpc.connect(svc.HOST, sanitized_server.port)) as remote:
        for name in ("../escape", "/etc/passwd", "a/../../b", "~root"):
            with pytest.raises(RPCError, match="file name"):
                remote.upload(b"x", name)
        remote.upload(b"hello", "sub/dir/f.txt")
        assert remote.listdir() == ["sub/dir/f.txt"]
        assert remote.download("sub/dir/f.txt") == b"hello"
        remote.remove("sub")
        assert remote.listdir() == []
        with pytest.raises(RPCError, match="is not in the session directory"):
            remote.load_module("nothing.so")


def test_auth_token_with_python_client_and_tracker(runtime_builds):
    """HMAC-SHA256 proofs computed in C match Python's, both as a server and at a tracker."""
    binary = os.path.join(runtime_builds(""), "kiln_rpc")
    env = {"KILN_RPC_TOKEN": "s3cret"}
    tracker = svc.tracker(env=env)
    board = boards.Board(binary, None, "--host", svc.HOST, "--port", str(svc.free_port()),
                         "--tracker", f"{svc.HOST}:{tracker.port}", "--key", "tokened", env=env)
    try:
        board.wait_log("registered with the tracker", timeout=30)
        with pytest.raises(RPCError, match="authentication failed: wrong token"):
            rpc.connect(svc.HOST, board.port, auth_token="wrong")
        with pytest.raises(RPCError, match="requires an authentication token"):
            rpc.connect(svc.HOST, board.port, auth_token="")
        remote = _when_free(lambda: rpc.connect_tracker(svc.HOST, tracker.port, auth_token="s3cret")
                            .request("tokened", timeout=30))
        with remote:
            assert remote.get_function("rpc.echo")("ok") == "ok"
    finally:
        board.stop()
        tracker.stop()


def _tar(members) -> bytes:
    """A tar archive from (name, bytes or ("symlink", target)) pairs."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if isinstance(data, tuple):
                info.type, info.linkname = tarfile.SYMTYPE, data[1]
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


GOOD_META = (b'{"abi_version": 1, "triple": "x86_64-linux-gnu", "functions": '
             b'[{"name": "f", "args": [{"name": "A", "kind": "tensor", "dtype": "float32", "shape": ["n"]}]}]}')

HOSTILE_ARCHIVES = [
    (_tar([("metadata.json", b"[" * 200)]), r"metadata is not valid JSON \(metadata JSON: nested too deeply"),
    (_tar([("metadata.json", b'{"abi_version": 1, "functions": [{"name": "f", "args": [{"name": "A", "kind": '
                               b'"tensor", "dtype": "float32", "shape": [99999999999999999999]}]}]}')]),
     r"integer out of range"),
    (_tar([("metadata.json", b'{"abi_version": 2, "kiln_version": "9.9"}')]), r"uses kiln ABI version 2; this runtime speaks version 1"),
    (_tar([("metadata.json", b'{"abi_version": 1, "x": "\\ud800"}')]), r"lone surrogate"),
    (_tar([("metadata.json", b'{"abi_version": 1, "functions": []} trailing')]), r"trailing characters"),
    (_tar([("metadata.json", GOOD_META), ("lib0.o", ("symlink", "/etc/passwd"))]), r"member lib0.o is a link"),
    (_tar([("metadata.json", GOOD_META), ("../lib0.o", b"x")]), r"holds no objects"),
    (_tar([("metadata.json", GOOD_META), ("lib0.o", b"x"), ("lib2.o", b"y")]), r"not numbered lib0.o .. libN.o without gaps"),
    (_tar([("lib0.o", b"x")]), r"has no metadata.json"),
    (b"\x00junk" * 300, r"not a valid tar archive"),
    # a member declaring more bytes than the file holds: refused before anything is written
    (_tar([("metadata.json", GOOD_META), ("lib0.o", b"x" * 5000)])[:2048], r"member 2 declares 5000 bytes, past the end"),
    (_tar([("metadata.json", GOOD_META.replace(b"x86_64", b"aarch64")), ("lib0.o", b"x")]),
     r"built for aarch64-linux-gnu; this device is"),
    (_tar([("metadata.json", GOOD_META), ("lib0.o", b"not an object")]), r"relinking the .tar module with 'cc' failed"),
]


def test_hostile_module_archives_get_clear_errors(sanitized_server):
    with _when_free(lambda: rpc.connect(svc.HOST, sanitized_server.port)) as remote:
        for data, message in HOSTILE_ARCHIVES:
            remote.upload(data, "m.tar")
            with pytest.raises(RPCError, match=message):
                remote.load_module("m.tar")
        remote.upload(b"\x7fELF" + bytes(60), "m.so")
        with pytest.raises(RPCError, match=r"m.so was built for e_machine=0"):
            remote.load_module("m.so")
        remote.upload(b"hello", "m.so")
        with pytest.raises(RPCError, match=r"m.so is not an ELF shared object"):
            remote.load_module("m.so")
