"""Frames and the accepting side of the handshake for the asyncio services (server main
process, tracker, proxy). Same wire format as protocol.Channel, which the blocking client and
worker use."""

from __future__ import annotations

import asyncio
import struct

from . import protocol as P

_U32 = struct.Struct("<I")


async def read_frame(reader: asyncio.StreamReader, max_frame: int) -> memoryview:
    """The next frame's body; ProtocolError if it is oversized, ConnectionLost on EOF."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        raise P.ConnectionLost("the peer closed the connection" if not e.partial
                               else "the peer closed the connection mid-frame") from None
    (length,) = _U32.unpack(head)
    if length > max_frame:
        raise P.ProtocolError(f"frame of {length} bytes exceeds the {max_frame}-byte limit here")
    try:
        return memoryview(await reader.readexactly(length))
    except asyncio.IncompleteReadError:
        raise P.ConnectionLost("the peer closed the connection mid-frame") from None


async def read_message(reader, max_frame: int = P.MAX_HANDSHAKE_FRAME):
    return P.unpack_message(await read_frame(reader, max_frame))


def write_message(writer: asyncio.StreamWriter, value, opcode: int = 0) -> None:
    writer.writelines(P.pack_message(opcode, value))


async def accept_handshake(reader, writer, token: str, timeout: float = 5.0) -> dict:
    """Run the accepting side of the handshake. Returns the peer's hello (a dict); raises
    RPCError (after telling the peer why) if it is malformed or fails authentication."""
    async def run():
        _, hello = await read_message(reader)
        problem = P.check_hello(hello)
        if problem:
            await refuse(writer, problem, P.hello_error_code(hello))
            raise P.ProtocolError(problem)
        if token:
            nonce = P.auth_challenge()
            write_message(writer, {"status": P.HS_AUTH, "nonce": nonce})
            await writer.drain()
            _, proof = await read_message(reader)
            if not P.verify_proof(token, nonce, hello, proof):
                await refuse(writer, "authentication failed: wrong token (set the same "
                                     "--auth-token / KILN_RPC_TOKEN on both sides)", P.E_AUTH)
                raise P.RPCError("authentication failed")
        return hello
    try:
        return await asyncio.wait_for(run(), timeout)
    except asyncio.TimeoutError:
        raise P.ProtocolError(f"handshake not completed within {timeout} s") from None
    except (P.RPCError, ConnectionError, OSError):
        raise
    except Exception as e:  # noqa: BLE001 - a stranger's bytes must never take a service down
        raise P.ProtocolError(f"malformed handshake: {type(e).__name__}: {e}") from None


async def accept_or_drop(reader, writer, token: str) -> dict | None:
    """The peer's hello, or None after closing a connection whose handshake failed (every
    service accepts connections this way: a stranger's bad hello never reaches its logic)."""
    try:
        return await accept_handshake(reader, writer, token)
    except (P.RPCError, ConnectionError, OSError):
        close_writer(writer)
        return None


async def refuse(writer, message: str, code: int = P.E_BAD_REQUEST) -> None:
    try:
        write_message(writer, {"status": P.HS_ERROR, "message": message, "code": code})
        await writer.drain()
    except (ConnectionError, OSError):
        pass


async def accept_ok(writer, extra: dict | None = None) -> None:
    write_message(writer, {"status": P.HS_OK, **(extra or {})})
    await writer.drain()


def close_writer(writer) -> None:
    try:
        writer.close()
    except (ConnectionError, OSError, RuntimeError):
        pass


async def open_and_handshake(host: str, port: int, role: int, key: str, token: str,
                             extra: dict | None = None, timeout: float = 5.0):
    """Connect and run the connecting side of the handshake (asyncio flavour)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        import os
        nonce = os.urandom(16)
        hello = {"magic": P.MAGIC, "version": P.VERSION, "role": role, "key": key, "nonce": nonce}
        hello.update(extra or {})
        write_message(writer, hello)
        await writer.drain()
        _, reply = await asyncio.wait_for(read_message(reader), timeout)
        if isinstance(reply, dict) and reply.get("status") == P.HS_AUTH:
            if not token:
                raise P.RPCError(f"{host}:{port} requires an authentication token; pass "
                                 "--auth-token or set KILN_RPC_TOKEN")
            write_message(writer, {"proof": P._proof(token, reply.get("nonce", b""), nonce, role)})
            await writer.drain()
            _, reply = await asyncio.wait_for(read_message(reader), timeout)
        if not isinstance(reply, dict) or reply.get("status") != P.HS_OK:
            msg = reply.get("message") if isinstance(reply, dict) else "bad reply"
            raise P.CodedError(f"{host}:{port} refused the connection: {msg}",
                               reply.get("code", 0) if isinstance(reply, dict) else 0)
        return reader, writer, reply
    except BaseException:
        close_writer(writer)
        raise
