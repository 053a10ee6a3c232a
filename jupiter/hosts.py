"""Which host names mean this machine: shared by the server (no token needed on loopback) and the client (no
proxy for a local server). Kept apart from both so that the client does not import the server's stack."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost`` (a name that resolves elsewhere is not trusted)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
