"""The HTTP transport under ``jupiter.client``: keep-alive ``http.client`` connections, one per thread.

Why not ``requests``: a client call is one small JSON request, and ``requests`` (with ``urllib3`` under it) spends
1.1-1.7 ms of CPU on each here, against 0.3-0.5 ms for the standard library's ``http.client``. Where the client
shares cores with the server (a notebook on the GPU box, the load benchmark's 20 client threads, a page polling
every half second) that CPU is taken from the search and adds to every latency the client measures. What this
module keeps of ``requests``' behaviour, and nothing more:

- connections are kept alive and reused; one the server closed while it was idle (uvicorn closes them after 5 s)
  is noticed before reuse and replaced, and an idempotent request (GET, HEAD, DELETE) that still meets a closed
  connection is sent once more on a new one; a POST is never resent (it may have been accepted);
- proxies come from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, as
  ``urllib.request`` reads them), except for a loopback server, which is always reached directly;
  ``https://`` goes through the proxy as a ``CONNECT`` tunnel;
- ``https://`` verifies the server's certificate with the system's trust store (``SSL_CERT_FILE`` and
  ``SSL_CERT_DIR`` apply), or with the ``ssl.SSLContext`` given;
- every failure to reach the server is one ``Unreachable`` exception whose ``reason`` is a short phrase.
"""

from __future__ import annotations

import base64
import http.client
import os
import select
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Callable, Iterator, Mapping

from jupiter.hosts import is_loopback

__all__ = ["HttpTransport", "Reply", "Unreachable", "proxy_for", "lines"]

#: methods sent once more when a kept-alive connection turns out closed (the server did not act on them)
IDEMPOTENT = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
#: the errors of a connection the server closed meanwhile
_CLOSED = (http.client.RemoteDisconnected, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


class Unreachable(Exception):
    """The server could not be reached or stopped answering; ``reason`` says how, in a few words.

    ``stage`` says where it failed, for callers that word their message by it: ``CONNECT`` (no connection:
    refused, unknown host, untrusted certificate, unusable proxy), ``TIMEOUT`` (no answer in time) or ``REPLY``
    (the server closed the connection or cut its reply short).
    """

    CONNECT, TIMEOUT, REPLY = "connect", "timeout", "reply"

    def __init__(self, reason: str, stage: str = "connect") -> None:
        super().__init__(reason)
        self.reason = reason
        self.stage = stage


@dataclass(frozen=True)
class Reply:
    """One answered request: the status line, the headers and the whole body."""

    method: str
    path: str
    status: int
    reason: str
    headers: Message
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


@dataclass(frozen=True)
class _Proxy:
    host: str
    port: int
    authorization: str | None  # the Proxy-Authorization header's value, from the proxy URL's user:password


def proxy_for(scheme: str, host: str) -> str | None:
    """The proxy URL the environment names for ``scheme://host`` (None: direct; always None for loopback)."""
    if is_loopback(host):
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else "http://" + proxy


def _parse_proxy(url: str) -> _Proxy:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise Unreachable(f"proxy {url!r}: only http:// proxies are supported (set NO_PROXY for this server to "
                          "reach it directly)")
    authorization = None
    if parts.username is not None:
        pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return _Proxy(parts.hostname, parts.port or 80, authorization)


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether a kept-alive connection can no longer carry a request: no socket, or one with something to read
    before we asked anything, which on an idle HTTP connection is the server's close."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class HttpTransport:
    """Requests to one server at ``url`` (``http(s)://host[:port][/prefix]``).

    Safe to share between threads: each thread keeps its own connection (a connection carries one request at a
    time). ``timeout`` bounds connecting and each read, in seconds. ``headers`` go with every request.
    """

    def __init__(self, url: str, timeout: float, headers: Mapping[str, str] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"server URL {url!r}: it must be http://host[:port] or https://host[:port]")
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = dict(headers or {})
        self.proxy_url = proxy_for(self.scheme, self.host)
        self._proxy = _parse_proxy(self.proxy_url) if self.proxy_url else None
        # one context for every connection: making the default one loads the system's trust store each time
        self._ssl = ssl_context or (ssl.create_default_context() if self.scheme == "https" else None)
        self._reset()

    def _reset(self) -> None:
        """Start with no connection (also in a forked child, which must not talk on its parent's sockets)."""
        self._pid = os.getpid()
        self._local = threading.local()
        self._open: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- connections
    def _new_connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        timeout, context = self.timeout, self._ssl
        if self.scheme == "https":
            if self._proxy is None:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=context)
            else:
                conn = http.client.HTTPSConnection(self._proxy.host, self._proxy.port, timeout=timeout,
                                                   context=context)
                tunnel_headers = {"Proxy-Authorization": self._proxy.authorization} if self._proxy.authorization \
                    else None
                conn.set_tunnel(self.host, self.port, headers=tunnel_headers)
        elif self._proxy is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        else:
            conn = http.client.HTTPConnection(self._proxy.host, self._proxy.port, timeout=timeout)
        return conn

    def _target(self, path: str) -> str:
        """The request line's target: the path, or for a plain-http proxy the whole URL."""
        if self._proxy is not None and self.scheme == "http":
            host = f"[{self.host}]" if ":" in self.host else self.host
            return f"http://{host}:{self.port}{self.prefix}{path}"
        return self.prefix + path

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {**self.headers, **(extra or {})}
        if self._proxy is not None and self._proxy.authorization and self.scheme == "http":
            headers["Proxy-Authorization"] = self._proxy.authorization
        return headers

    def _kept(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it is a reused one."""
        if os.getpid() != self._pid:  # a child forked with the client (multiprocessing): its own connections
            self._reset()
        conn = getattr(self._local, "conn", None)
        if conn is not None and not _dropped(conn):
            return conn, True
        if conn is not None:
            self._forget(conn)
        conn = self._new_connection()
        self._local.conn = conn
        with self._lock:
            self._open.add(conn)
        return conn, False

    def _forget(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        with self._lock:
            self._open.discard(conn)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None

    def close(self) -> None:
        """Close every connection (a later request opens a new one)."""
        with self._lock:
            connections, self._open = list(self._open), set()
        for conn in connections:
            conn.close()

    # ---------------------------------------------------------------- requests
    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Reply:
        """Send one request on this thread's kept-alive connection and read the whole reply."""
        sent = self._headers(headers)
        for attempt in (1, 2):
            conn, reused = self._kept()
            try:
                conn.request(method, self._target(path), body=body, headers=sent)
                response = conn.getresponse()
                data = response.read()
            except _CLOSED:
                self._forget(conn)
                if reused and attempt == 1 and method in IDEMPOTENT:
                    continue
                raise Unreachable("the server closed the connection", Unreachable.REPLY) from None
            except BaseException as exc:
                self._forget(conn)
                raise _unreachable(exc, self.timeout) from None
            if response.will_close:
                self._forget(conn)
            return Reply(method, path, response.status, response.reason, response.msg, data)
        raise AssertionError("unreachable")

    @contextmanager
    def stream(self, method: str, path: str, headers: Mapping[str, str] | None = None,
               read_timeout: float | None = None) -> Iterator[http.client.HTTPResponse]:
        """A request on a connection of its own, whose reply is read as it comes (an event stream).

        ``read_timeout`` bounds each read after the connection is made (None: wait as long as it takes). The
        connection is closed when the block ends. Errors while reading raise ``Unreachable`` from ``lines``.
        """
        conn = self._new_connection()
        try:
            try:
                conn.connect()
                if conn.sock is not None:
                    conn.sock.settimeout(read_timeout)
                conn.request(method, self._target(path), headers=self._headers(headers))
                response = conn.getresponse()
            except BaseException as exc:
                raise _unreachable(exc, read_timeout) from None
            yield response
        finally:
            conn.close()

    def download(self, path: str, target: Path, on_error: Callable[[Reply], Exception]) -> Reply:
        """GET ``path`` into the file ``target``, written under a temporary name and renamed when whole (a
        broken transfer leaves no half file). An error reply is turned into an exception by ``on_error``."""
        with self.stream("GET", path) as response:
            if response.status >= 400:
                raise on_error(Reply("GET", path, response.status, response.reason, response.msg, response.read()))
            partial = target.with_name(target.name + ".part")
            declared = response.getheader("content-length")
            written = 0
            try:
                with open(partial, "wb") as out:
                    while True:
                        try:
                            chunk = response.read(1 << 20)
                        except BaseException as exc:
                            raise _unreachable(exc, self.timeout) from None
                        if not chunk:
                            break
                        out.write(chunk)
                        written += len(chunk)
                # a read of a given size returns short at the end of a cut connection rather than raising
                if declared is not None and declared.isdigit() and written != int(declared):
                    raise Unreachable(f"the transfer broke off after {written} of {declared} bytes",
                                      Unreachable.REPLY)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
            return Reply("GET", path, response.status, response.reason, response.msg, b"")


def lines(response: http.client.HTTPResponse) -> Iterator[str]:
    """The reply's lines as they arrive, decoded, without line ends (``\\n`` or ``\\r\\n``)."""
    while True:
        try:
            raw = response.readline()
        except BaseException as exc:
            raise _unreachable(exc, None) from None
        if not raw:
            return
        yield raw.rstrip(b"\r\n").decode("utf-8", errors="replace")


def _unreachable(exc: BaseException, timeout: float | None) -> BaseException:
    """The ``Unreachable`` for a failed request (anything that is not a network error passes unchanged)."""
    if isinstance(exc, ConnectionRefusedError):
        return Unreachable("connection refused")
    if isinstance(exc, TimeoutError):
        return Unreachable(f"no answer within {timeout:g} s" if timeout is not None else "timed out",
                           Unreachable.TIMEOUT)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return Unreachable(f"its TLS certificate is not trusted: {exc.verify_message}")
    if isinstance(exc, socket.gaierror):
        return Unreachable(f"cannot resolve the host name ({exc.strerror or exc})")
    if isinstance(exc, (OSError, http.client.HTTPException)):
        if isinstance(exc, _CLOSED):
            return Unreachable("the server closed the connection", Unreachable.REPLY)
        return Unreachable(f"cannot connect ({type(exc).__name__}: {exc})")
    return exc
