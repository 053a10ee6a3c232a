"""Length-prefixed JSON frames over a Unix stream socket.

Why a home-made frame format: the runtime process must stay a plain Python process (no ZeroMQ, no threads, so
that it can ``fork()`` safely), and a 4-byte big-endian length followed by UTF-8 JSON is the smallest format
that survives partial reads. File descriptors travel beside a frame as ``SCM_RIGHTS`` ancillary data (a forked
runtime gets its own fresh socket that way) and, on the host side, ``SO_PASSCRED`` gives the sender's pid as the
host sees it (the runtime may live in its own PID namespace).

This module must import only the standard library: the runtime server loads it by path.
"""
from __future__ import annotations

import array
import json
import select
import socket
import struct
import time
from typing import Any

__all__ = ["ProtocolError", "ConnectionClosed", "FrameTimeout", "encode_frame", "send_frame", "recv_frame",
           "readable", "MAX_FRAME_BYTES"]

MAX_FRAME_BYTES = 512 * 1024 * 1024
_HEADER = struct.Struct(">I")
_UCRED = struct.Struct("3i")


class ProtocolError(RuntimeError):
    """A frame could not be decoded (corrupt stream)."""


class ConnectionClosed(ProtocolError):
    """The peer closed the socket (for a runtime: the process died or exited)."""


class FrameTimeout(TimeoutError):
    """No complete frame arrived before the deadline."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """One frame's bytes: what ``send_frame`` sends (a sender may encode a frame ahead of need)."""
    payload = json.dumps(message, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(len(payload)) + payload


def send_frame(sock: socket.socket, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
    """Send one frame; ``fds`` are passed along with its first byte (SCM_RIGHTS)."""
    view = memoryview(encode_frame(message))
    if fds:
        sent = sock.sendmsg([view], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        view = view[sent:]
    if len(view):
        sock.sendall(view)


def readable(sock: socket.socket, deadline: float | None) -> bool:
    """Whether ``sock`` has data (or EOF) before ``deadline`` (a ``time.monotonic()`` value; None: wait).

    ``poll``, not ``select``: ``select`` cannot watch a descriptor numbered 1024 or more, which a host with a
    thousand live states has ("filedescriptor out of range in select()")."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR)
    while True:
        if deadline is None:
            timeout_ms = None
        else:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            timeout_ms = max(1, int(remaining * 1000 + 0.999))
        if poller.poll(timeout_ms):
            return True


def _wait_readable(sock: socket.socket, deadline: float | None) -> None:
    if not readable(sock, deadline):
        raise FrameTimeout("no reply before the deadline")


def recv_frame(sock: socket.socket, deadline: float | None = None, want_fds: bool = False,
               want_creds: bool = False) -> tuple[dict[str, Any], list[int], int | None]:
    """Read one frame. Returns ``(message, fds, sender_pid)``.

    ``deadline`` is a ``time.monotonic()`` value (None: wait forever). ``sender_pid`` is only filled when
    ``want_creds`` and the socket has ``SO_PASSCRED`` set. Raises ConnectionClosed on EOF, FrameTimeout.
    """
    fds: list[int] = []
    pid: int | None = None
    header = bytearray()
    anc_size = 0
    if want_fds:
        anc_size += socket.CMSG_SPACE(16 * array.array("i").itemsize)
    if want_creds:
        anc_size += socket.CMSG_SPACE(_UCRED.size)
    while len(header) < _HEADER.size:
        _wait_readable(sock, deadline)
        if anc_size and not header:
            chunk, ancdata, _flags, _addr = sock.recvmsg(_HEADER.size, anc_size)
            for level, kind, cdata in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    arr = array.array("i")
                    arr.frombytes(cdata[: len(cdata) - (len(cdata) % arr.itemsize)])
                    fds.extend(arr)
                elif level == socket.SOL_SOCKET and kind == getattr(socket, "SCM_CREDENTIALS", -1):
                    pid = _UCRED.unpack(cdata[: _UCRED.size])[0]
        else:
            chunk = sock.recv(_HEADER.size - len(header))
        if not chunk:
            raise ConnectionClosed("peer closed the connection")
        header.extend(chunk)
    (length,) = _HEADER.unpack(bytes(header))
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    body = bytearray()
    while len(body) < length:
        _wait_readable(sock, deadline)
        chunk = sock.recv(min(length - len(body), 1 << 20))
        if not chunk:
            raise ConnectionClosed("peer closed the connection mid-frame")
        body.extend(chunk)
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"undecodable frame: {exc}") from exc
    return message, fds, pid
