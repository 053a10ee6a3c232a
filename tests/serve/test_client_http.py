"""``jupiter.client``'s HTTP against real HTTP servers on 127.0.0.1: kept-alive connections shared by threads and
closed by the server, requests resent or not, a forwarding proxy and a CONNECT tunnel, TLS with a self-signed
certificate, timeouts, and a download cut off half-way.

The servers are the standard library's, in threads of the test process, so that each test can make the server
misbehave in one precise way (the real ``jupiter serve`` is exercised by test_client.py).
"""

from __future__ import annotations

import http.server
import json
import multiprocessing
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupiter.client import Client, ClientError, ServerUnreachable

Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


class LocalServer:
    """A threaded HTTP/1.1 server on a free loopback port; ``handle(request_handler)`` answers every request.

    ``seen`` lists (method, target, connection number, request number on that connection, headers)."""

    def __init__(self, handle: Handler, tls: ssl.SSLContext | None = None) -> None:
        owner = self
        self.seen: list[tuple[str, str, int, int, dict[str, str]]] = []
        self.connections = 0

        class _Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                owner.connections += 1
                self.connection_number, self.on_connection = owner.connections, 0

            def _any(self) -> None:
                self.on_connection += 1
                owner.seen.append((self.command, self.path, self.connection_number, self.on_connection,
                                   dict(self.headers)))
                length = int(self.headers.get("content-length") or 0)
                self.body = self.rfile.read(length) if length else b""
                handle(self)

            do_GET = do_POST = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def reply_json(handler: http.server.BaseHTTPRequestHandler, body: dict[str, Any], status: int = 200,
               close: bool = False) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
    handler.wfile.flush()
    if close:  # the server's idle close (uvicorn's keep-alive timeout), without saying so in a header
        handler.close_connection = True


@pytest.fixture
def serve() -> Iterator[Callable[..., LocalServer]]:
    started: list[LocalServer] = []

    def start(handle: Handler, tls: ssl.SSLContext | None = None) -> LocalServer:
        started.append(LocalServer(handle, tls))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy",
                 "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_connection_the_server_closed_while_idle_is_replaced_before_a_post(serve) -> None:
    server = serve(lambda h: reply_json(h, {"id": "j1", "status": "queued"}, 202, close=True))
    client = Client(f"http://127.0.0.1:{server.port}")
    for _ in range(3):
        assert client._json("POST", "/v1/tasks", data=b"x") == {"id": "j1", "status": "queued"}
        time.sleep(0.05)  # the server's FIN arrives
    assert [s[0] for s in server.seen] == ["POST"] * 3 and server.connections == 3


def test_kept_alive_connections_are_reused(serve) -> None:
    server = serve(lambda h: reply_json(h, {"ok": True}))
    with Client(f"http://127.0.0.1:{server.port}") as client:
        for _ in range(5):
            client.health()
    assert server.connections == 1 and [s[3] for s in server.seen] == [1, 2, 3, 4, 5]


def test_threads_share_a_client_on_kept_alive_connections(serve) -> None:
    """Six threads, twenty calls each, on one client: every call answered, at most one connection per thread."""
    server = serve(lambda h: reply_json(h, {"path": h.path}))
    client = Client(f"http://127.0.0.1:{server.port}")
    answers: dict[int, list[str]] = {}

    def poll(number: int) -> None:
        answers[number] = [client.status(f"job{number}")["path"] for _ in range(20)]

    threads = [threading.Thread(target=poll, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert answers == {n: [f"/v1/tasks/job{n}"] * 20 for n in range(6)}
    assert len(server.seen) == 120 and server.connections <= 6


def _health_in_a_child(client: Client, out: multiprocessing.Queue[Any]) -> None:
    out.put(client.health())


def test_a_forked_child_opens_its_own_connection(serve) -> None:
    """A child forked with a used client (multiprocessing) must not talk on its parent's socket: both would read
    each other's replies."""
    server = serve(lambda h: reply_json(h, {"connection": h.connection_number}))  # type: ignore[attr-defined]
    client = Client(f"http://127.0.0.1:{server.port}")
    assert client.health() == {"connection": 1}
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_health_in_a_child, args=(client, out))
    child.start()
    assert out.get(timeout=30) == {"connection": 2}
    child.join(30)
    assert client.health() == {"connection": 1} and server.connections == 2


def _drop_second_request(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Answer a connection's first request; drop the connection at its second, before any reply."""
    if handler.on_connection == 2:  # type: ignore[attr-defined]
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)
        return
    reply_json(handler, {"n": handler.on_connection})  # type: ignore[attr-defined]


def test_a_get_that_meets_a_closed_connection_is_sent_again_a_post_never(serve) -> None:
    server = serve(_drop_second_request)
    client = Client(f"http://127.0.0.1:{server.port}")
    assert client.status("a")["n"] == 1
    assert client.status("a")["n"] == 1  # dropped on connection 1, answered as the first of connection 2
    assert [(s[2], s[3]) for s in server.seen] == [(1, 1), (1, 2), (2, 1)]
    with pytest.raises(ServerUnreachable, match="closed the connection"):
        client._json("POST", "/v1/tasks", data=b"x")  # the second request of connection 2: not resent
    assert [(s[0], s[2], s[3]) for s in server.seen][-1] == ("POST", 2, 2) and len(server.seen) == 4


def test_a_slow_server_is_one_clear_line_naming_the_request_and_the_timeout(serve) -> None:
    server = serve(lambda h: (time.sleep(2.0), reply_json(h, {})))
    with pytest.raises(ServerUnreachable) as exc:
        Client(f"http://127.0.0.1:{server.port}", timeout=0.5).status("abc")
    assert str(exc.value) == (f"the Jupiter server at http://127.0.0.1:{server.port} did not answer "
                              "GET /v1/tasks/abc within 0.5 s")


def test_an_unknown_host_is_one_clear_line(no_proxy_env) -> None:
    with pytest.raises(ServerUnreachable, match="no Jupiter server at http://jupiter-box.invalid:8700 "
                                                r"\(cannot resolve the host name"):
        Client("http://jupiter-box.invalid:8700", timeout=5).health()


def _cut_off(handler: http.server.BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    handler.wfile.write(b"{" * 1000)
    handler.wfile.flush()
    handler.close_connection = True


def test_a_download_cut_off_half_way_leaves_no_file(serve, tmp_path: Path) -> None:
    server = serve(_cut_off)
    with pytest.raises(ServerUnreachable, match="GET /v1/tasks/j1/tree.json: the transfer broke off before the end "
                                                "of its 100000 bytes"):
        Client(f"http://127.0.0.1:{server.port}").download("j1", "tree.json", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_download_error_names_the_status_and_leaves_no_file(serve, tmp_path: Path) -> None:
    server = serve(lambda h: reply_json(h, {"error": "job j1: no tree.json yet"}, 404))
    with pytest.raises(ClientError) as exc:
        Client(f"http://127.0.0.1:{server.port}").download("j1", "tree.json", tmp_path)
    assert exc.value.status == 404 and "no tree.json yet" in str(exc.value)
    assert list(tmp_path.iterdir()) == []


def test_a_job_id_cannot_leave_its_path_segment(serve) -> None:
    server = serve(lambda h: reply_json(h, {"path": h.path}))
    assert Client(f"http://127.0.0.1:{server.port}").status("../../healthz?x=1")["path"] == \
        "/v1/tasks/..%2F..%2Fhealthz%3Fx%3D1"


def test_a_url_prefix_is_kept_and_the_token_sent(serve) -> None:
    server = serve(lambda h: reply_json(h, {"path": h.path}))
    client = Client(f"http://127.0.0.1:{server.port}/jupiter/", token="t0k")
    assert client.health()["path"] == "/jupiter/healthz"
    assert server.seen[-1][4]["Authorization"] == "Bearer t0k"


# ------------------------------------------------------------------------------------------ proxies
class ForwardingProxy(LocalServer):
    """An HTTP proxy for plain requests (absolute URLs) and CONNECT tunnels that sends everything to one
    backend port on 127.0.0.1, whatever host the request names (so the test needs no name resolution)."""

    def __init__(self, backend_port: int) -> None:
        self.backend_port = backend_port
        super().__init__(self._forward)
        self.httpd.RequestHandlerClass.do_CONNECT = lambda handler: self._tunnel(handler)  # type: ignore

    def _forward(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        with socket.create_connection(("127.0.0.1", self.backend_port), timeout=10) as backend:
            path = "/" + handler.path.split("/", 3)[3]
            kept = "".join(f"{name}: {value}\r\n" for name, value in handler.headers.items()
                           if name.lower() not in ("host", "connection", "content-length", "proxy-authorization"))
            backend.sendall(f"{handler.command} {path} HTTP/1.1\r\nHost: backend\r\nConnection: close\r\n{kept}"
                            f"Content-Length: {len(handler.body)}\r\n\r\n".encode() + handler.body)  # type: ignore
            data = b""
            while chunk := backend.recv(65536):
                data += chunk
        handler.wfile.write(data)
        handler.close_connection = True

    def _tunnel(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        self.seen.append(("CONNECT", handler.path, 0, 0, dict(handler.headers)))
        backend = socket.create_connection(("127.0.0.1", self.backend_port), timeout=10)
        handler.send_response(200, "Connection established")
        handler.end_headers()
        handler.wfile.flush()
        ends = [handler.connection, backend]
        try:
            while True:
                readable, _, _ = select.select(ends, [], [], 10)
                if not readable:
                    return
                for end in readable:
                    data = end.recv(65536)
                    if not data:
                        return
                    (backend if end is handler.connection else handler.connection).sendall(data)
        finally:
            backend.close()
            handler.close_connection = True


@pytest.fixture
def proxy_for(no_proxy_env) -> Iterator[Callable[[int], ForwardingProxy]]:
    started: list[ForwardingProxy] = []

    def start(backend_port: int) -> ForwardingProxy:
        started.append(ForwardingProxy(backend_port))
        return started[-1]

    yield start
    for proxy in started:
        proxy.stop()


def test_a_remote_server_is_reached_through_the_environments_proxy(serve, proxy_for, no_proxy_env) -> None:
    backend = serve(lambda h: reply_json(h, {"path": h.path, "body": h.body.decode()}))  # type: ignore
    proxy = proxy_for(backend.port)
    no_proxy_env.setenv("HTTP_PROXY", f"http://user:p%40ss@127.0.0.1:{proxy.port}")
    client = Client("http://jupiter-box.invalid:8700", token="t0k")
    assert client.proxy == f"http://user:p%40ss@127.0.0.1:{proxy.port}"
    assert client._json("POST", "/v1/tasks", data=b"hello") == {"path": "/v1/tasks", "body": "hello"}
    method, target, _, _, headers = proxy.seen[-1]
    assert (method, target) == ("POST", "http://jupiter-box.invalid:8700/v1/tasks")
    assert headers["Proxy-Authorization"] == "Basic dXNlcjpwQHNz"  # user:p@ss
    assert backend.seen[-1][4]["Authorization"] == "Bearer t0k"
    no_proxy_env.setenv("NO_PROXY", ".invalid")
    assert Client("http://jupiter-box.invalid:8700").proxy is None


def test_a_proxy_that_does_not_answer_is_named(no_proxy_env) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    no_proxy_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{dead}")
    with pytest.raises(ServerUnreachable, match="no Jupiter server at http://jupiter-box.invalid:8700 "
                                                r"\(the proxy failed"):
        Client("http://jupiter-box.invalid:8700", timeout=5).health()


# ------------------------------------------------------------------------------------------ TLS
@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no self-signed certificate for the TLS tests")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=jupiter-box.invalid", "-keyout", str(key), "-out", str(cert),
                    "-addext", "subjectAltName=DNS:jupiter-box.invalid,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def _tls_server(serve, certificate: tuple[Path, Path]) -> LocalServer:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*map(str, certificate))
    return serve(lambda h: reply_json(h, {"path": h.path}), tls=context)


def test_https_checks_the_certificate(serve, certificate, no_proxy_env) -> None:
    server = _tls_server(serve, certificate)
    with pytest.raises(ServerUnreachable, match="certificate is not trusted"):
        Client(f"https://127.0.0.1:{server.port}", timeout=10).health()
    with Client(f"https://127.0.0.1:{server.port}", timeout=10, verify=str(certificate[0])) as client:
        assert client.health() == {"path": "/healthz"}
        assert client.health() == {"path": "/healthz"}
    assert server.connections == 1


def test_https_through_a_proxy_is_a_connect_tunnel(serve, certificate, proxy_for, no_proxy_env) -> None:
    server = _tls_server(serve, certificate)
    proxy = proxy_for(server.port)
    no_proxy_env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
    client = Client("https://jupiter-box.invalid:8443", timeout=10, verify=str(certificate[0]))
    assert client.status("j1") == {"path": "/v1/tasks/j1"}
    assert proxy.seen[-1][:2] == ("CONNECT", "jupiter-box.invalid:8443")
