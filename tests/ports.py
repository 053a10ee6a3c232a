"""A free TCP port on 127.0.0.1, for a test's server or for a URL nothing listens on.

The OS picks the port and it is released at once: a server started right after binds it (the ephemeral range is
large, so another process taking it in between is rare), and a client sent there is refused at once.
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
