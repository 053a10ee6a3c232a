"""A Python client for ``jupiter serve``: submit tasks with their data files, follow them, fetch their outputs.

It speaks the server's small HTTP API (``/v1/tasks``) with ``requests``, so scripts, notebooks and the
``jupiter solve --server`` command share one implementation of it::

    from jupiter.client import Client
    client = Client("http://127.0.0.1:8700", token=None)
    job_id = client.submit("task.json", settings={"iterations": 20})   # data files found from the task file
    for event in client.events(job_id):                                  # live: node / iteration / status / done
        ...
    job = client.wait(job_id)                                            # the job JSON, result included
    client.download(job_id, "solution.ipynb", "out/")

Errors are ``ClientError`` (HTTP status plus the server's ``{"error"}`` text); a server that cannot be
reached is ``ServerUnreachable``, whose message is one line saying so, not a socket traceback.
"""

from __future__ import annotations

import enum
import json
import logging
import mimetypes
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import sseclient
from urllib3.exceptions import MaxRetryError, NameResolutionError, NewConnectionError, ProtocolError, ReadTimeoutError
from urllib3.util.retry import Retry

from jupiter import __version__
from jupiter.hosts import is_loopback
from jupiter.llm.endpoint import pooled_session
from search.settings import JobSettings

__all__ = [
    "Client",
    "ClientError",
    "ServerUnreachable",
    "WaitTimeout",
    "JobStatus",
    "Event",
    "SETTINGS_KEYS",
    "DOWNLOADS",
    "parse_sse",
    "mime_type",
]

log = logging.getLogger(__name__)

#: the ``settings`` keys the server accepts: ``search.settings.JobSettings``' fields (anything else is refused
#: here, naming the key; the server checks the values)
SETTINGS_KEYS = frozenset(JobSettings.model_fields)
#: the output files a finished job offers for download
DOWNLOADS = ("tree.json", "solution.ipynb", "tree.html")
#: methods resent once when the kept-alive connection they went out on turns out closed by the server
IDEMPOTENT = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
#: connections kept alive per client process: one per thread that uses it at once (the load benchmark runs 20)
POOL_SIZE = 32


_TYPES_LOCK = threading.Lock()


def mime_type(name: str) -> str:
    """The upload's content type, from its name's extension (``application/octet-stream`` when unknown).

    The first guess in a process reads the system's type tables (about 13 ms of CPU) without a lock of its own:
    20 threads starting a submit burst together would each read them, so one reads and the others wait here.
    """
    with _TYPES_LOCK:
        return mimetypes.guess_type(name)[0] or "application/octet-stream"


class JobStatus(str, enum.Enum):
    """A job's life: queued → running → done | failed | cancelled."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


class ClientError(Exception):
    """A request the server refused or answered with an error; ``status`` is the HTTP status (None: no reply)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServerUnreachable(ClientError):
    """No server answered at the URL (connection refused, name not found, or it timed out)."""


class WaitTimeout(ClientError):
    """``wait`` gave up before the job finished; the job itself keeps running on the server."""


@dataclass(frozen=True)
class Event:
    """One server-sent event: ``type`` is ``node | iteration | status | done`` (or a newer one), ``data`` its JSON."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


def parse_sse(chunks: Iterable[bytes]) -> Iterator[Event]:
    """The events of a text/event-stream read as byte chunks (parsed by ``sseclient``), with their JSON decoded.

    Data that is not a JSON object is kept under ``{"text": ...}`` (or ``{"value": ...}`` for other JSON).
    """
    for event in sseclient.SSEClient(chunks).events():
        try:
            payload = json.loads(event.data)
        except json.JSONDecodeError:
            payload = {"text": event.data}
        yield Event(event.event, payload if isinstance(payload, dict) else {"value": payload}, event.id)


def _task_payload(task: str | Path | Mapping[str, Any]) -> tuple[str, list[Path]]:
    """The task JSON text to send and, for a task file, the data files it names (resolved like a local solve)."""
    if isinstance(task, Mapping):
        return json.dumps(dict(task), ensure_ascii=False), []
    path = Path(task)
    if not path.is_file():
        raise ClientError(f"{path}: task file not found")
    from jupiter.task import TaskError, load_task_file

    try:
        loaded = load_task_file(path)
    except TaskError as exc:
        raise ClientError(str(exc)) from None
    return path.read_text(encoding="utf-8"), list(loaded.files)


class _ResendOnClosed(Retry):
    """urllib3's retry rule for the client: an idempotent request whose kept-alive connection the server closed
    meanwhile is sent once more on a new one (urllib3 counts that as a read error, and it already replaces a
    connection it sees closed before reuse). A read timeout is final: resending to a slow server only doubles
    the wait. Nothing else is retried: a refused connection fails at once, a POST is never resent (the server
    may have accepted it), and error statuses are returned to the caller."""

    def increment(self, method: str | None = None, url: str | None = None, response: Any = None,
                  error: Exception | None = None, _pool: Any = None, _stacktrace: Any = None) -> Retry:
        if isinstance(error, ReadTimeoutError):
            raise error
        return super().increment(method, url, response, error, _pool, _stacktrace)


def _session(loopback: bool, headers: Mapping[str, str]) -> requests.Session:
    """A session with a kept-alive pool of ``POOL_SIZE`` connections and the client's retry rule.

    A loopback server is reached directly: the environment's settings (``HTTP_PROXY`` without a ``NO_PROXY``
    would send a local request to the proxy) are not read for it."""
    retry = _ResendOnClosed(total=1, connect=0, read=1, status=0, other=0, redirect=0,
                            allowed_methods=IDEMPOTENT, raise_on_status=False, respect_retry_after_header=False)
    session = pooled_session(headers, POOL_SIZE, retry)
    session.trust_env = not loopback
    return session


class Client:
    """One server at ``url`` (``http(s)://host[:port][/prefix]``); ``token`` is sent as a Bearer token when the
    server wants one.

    ``timeout`` (seconds) bounds connecting and each read of a request, not the life of a job: use
    ``wait(timeout=...)`` for that. The client is safe to share between threads (they share one pool of
    kept-alive connections) and across ``fork``: a child process opens its own connections, since two processes
    on one socket would read each other's replies. An ``events`` stream has a connection of its own.
    ``on_reply`` is called with every ``requests.Response`` (errors included), e.g. to read the server's
    ``Server-Timing``. ``verify`` is ``requests``' own: a CA bundle's path to trust for ``https://`` servers, or
    True for the default trust store (``REQUESTS_CA_BUNDLE`` applies). Proxies come from the environment
    (``HTTP(S)_PROXY``, ``NO_PROXY``), except for a loopback server, which is always reached directly.
    """

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0,
                 on_reply: Callable[[requests.Response], None] | None = None, verify: bool | str = True) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ClientError(f"server URL {url!r}: it must start with http:// or https:// and name a host")
        self.url = url.rstrip("/")
        self.token = token or None
        self.timeout = timeout
        self.on_reply = on_reply
        self.verify = verify
        self._loopback = is_loopback(parts.hostname)
        self._headers = {"User-Agent": f"jupiter-client/{__version__}", "Accept": "application/json"}
        if self.token:
            self._headers["Authorization"] = f"Bearer {self.token}"
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._session = _session(self._loopback, self._headers)

    @property
    def proxy(self) -> str | None:
        """The proxy the requests go through (from the environment; None: straight to the server, as for any
        loopback server)."""
        if self._loopback:
            return None
        return requests.utils.select_proxy(self.url, requests.utils.get_environ_proxies(self.url))

    # ---------------------------------------------------------------- plumbing
    def _http(self) -> requests.Session:
        """This process's session (a forked child replaces its parent's, whose sockets it must not use)."""
        if os.getpid() != self._pid:
            with self._lock:
                if os.getpid() != self._pid:
                    self._session = _session(self._loopback, self._headers)
                    self._pid = os.getpid()
        return self._session

    def _unreachable(self, method: str, path: str, exc: requests.RequestException) -> ServerUnreachable:
        if isinstance(exc, requests.Timeout):
            return ServerUnreachable(f"the Jupiter server at {self.url} did not answer {method} {path} within "
                                     f"{self.timeout:g} s")
        reason = _no_connection(exc)
        if reason is None:  # it answered, then stopped
            return ServerUnreachable(f"the Jupiter server at {self.url}: {method} {path}: the server closed the "
                                     "connection")
        return ServerUnreachable(f"no Jupiter server at {self.url} ({reason}); is `jupiter serve` running "
                                 "there?")

    def _send(self, method: str, path: str, *, stream: bool = False, read_timeout: float | None = None,
              **kwargs: Any) -> requests.Response:
        """One request; network failures become ``ServerUnreachable``, the reply is returned whatever its status."""
        timeout = (self.timeout, self.timeout if read_timeout is None else read_timeout)
        try:
            # verify goes with each request: a session's own is overridden by REQUESTS_CA_BUNDLE
            return self._http().request(method, self.url + path, timeout=timeout, stream=stream,
                                        verify=self.verify, **kwargs)
        except requests.RequestException as exc:
            raise self._unreachable(method, path, exc) from None

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        reply = self._send(method, path, **kwargs)
        if self.on_reply is not None:
            self.on_reply(reply)
        if reply.status_code >= 400:
            raise _error(method, path, reply)
        return reply

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        reply = self._request(method, path, **kwargs)
        try:
            data = reply.json()
        except ValueError:
            raise ClientError(f"{method} {path}: the server's reply is not JSON "
                              f"({reply.content[:120].decode('utf-8', 'replace')!r})", reply.status_code) from None
        if not isinstance(data, dict):
            raise ClientError(f"{method} {path}: expected a JSON object, got {type(data).__name__}",
                              reply.status_code)
        return data

    # ---------------------------------------------------------------- API
    def health(self) -> dict[str, Any]:
        """``GET /healthz``."""
        return self._json("GET", "/healthz")

    def submit(self, task: str | Path | Mapping[str, Any], files: Iterable[str | Path] | None = None,
               settings: Mapping[str, Any] | None = None) -> str:
        """Queue ``task`` (a task file path or a task dict) with its data ``files``; returns the job id.

        With ``files`` None and a task file, the data files the task names are found as a local solve finds
        them (next to the task file); a task dict with ``files`` None sends none. ``settings`` may hold only
        ``SETTINGS_KEYS``. Raises ``ClientError`` (HTTP 429 when the server's queue is full).
        """
        text, task_files = _task_payload(task)
        paths = [Path(f) for f in files] if files is not None else task_files
        for path in paths:
            if not path.is_file():
                raise ClientError(f"data file {path}: not found")
        # every part goes as ``files=`` (plain fields with no file name): the body is multipart even with no uploads
        parts: list[tuple[str, tuple[str | None, str | bytes] | tuple[str, bytes, str]]] = [("task", (None, text))]
        if settings:
            unknown = sorted(set(settings) - SETTINGS_KEYS)
            if unknown:
                raise ClientError(f"settings: unknown key(s) {', '.join(unknown)}; known: "
                                  f"{', '.join(sorted(SETTINGS_KEYS))}")
            parts.append(("settings", (None, json.dumps(dict(settings)))))
        for path in paths:
            try:
                parts.append(("files", (path.name, path.read_bytes(), mime_type(path.name))))
            except OSError as exc:
                raise ClientError(f"data file {path}: cannot read it ({exc.strerror or exc})") from None
        body = self._json("POST", "/v1/tasks", files=parts)
        job_id = body.get("id")
        if not isinstance(job_id, str) or not job_id:
            raise ClientError(f"POST /v1/tasks: the reply has no job id ({body})")
        return job_id

    def status(self, job_id: str) -> dict[str, Any]:
        """The job JSON: ``id, status, task_id, question, created, started, finished, progress, settings,
        result, error``."""
        return self._json("GET", f"/v1/tasks/{_quote(job_id)}")

    def list(self, status: str | JobStatus | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Jobs, newest first, optionally only those with ``status``."""
        params: dict[str, Any] = {}
        if status is not None:
            params["status"] = JobStatus(status).value
        if limit is not None:
            params["limit"] = int(limit)
        query = "?" + urllib.parse.urlencode(params) if params else ""
        tasks = self._json("GET", "/v1/tasks" + query).get("tasks", [])
        return list(tasks)

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a queued or running job; returns its job JSON."""
        return self._json("DELETE", f"/v1/tasks/{_quote(job_id)}")

    def wait(self, job_id: str, poll: float = 0.5, timeout: float | None = None) -> dict[str, Any]:
        """Poll every ``poll`` seconds until the job is done, failed or cancelled; returns its job JSON.

        ``timeout`` (seconds, None: no limit) raises ``WaitTimeout``; the job keeps running on the server.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.status(job_id)
            if JobStatus(job["status"]).finished:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {job['status']} after {timeout:g} s")
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))

    def events(self, job_id: str, read_timeout: float | None = 300.0) -> Iterator[Event]:
        """The job's server-sent events, parsed, until the server ends the stream (after ``done``).

        A late reader gets every node so far first. ``read_timeout`` is the longest silence tolerated between
        two reads (seconds; None: no limit); the server sends keep-alives while a job runs.
        """
        path = f"/v1/tasks/{_quote(job_id)}/events"
        with requests.Session() as stream:  # a connection of its own, closed with the stream
            stream.headers.update(self._headers)
            stream.headers["Accept"] = "text/event-stream"
            stream.trust_env = not self._loopback
            try:
                reply = stream.get(self.url + path, stream=True, timeout=(self.timeout, read_timeout),
                                   verify=self.verify)
            except requests.RequestException as exc:
                raise self._unreachable("GET", path, exc) from None
            with reply:
                if reply.status_code >= 400:
                    raise _error("GET", path, reply)
                try:
                    # chunk_size None: each chunk as it arrives, so a live event is not held back for more bytes
                    yield from parse_sse(reply.iter_content(chunk_size=None))
                except requests.RequestException as exc:
                    raise ServerUnreachable(f"the event stream of job {job_id} broke off "
                                            f"({_no_connection(exc) or 'the server closed the connection'})") \
                        from None

    def download(self, job_id: str, name: str, dest: str | Path) -> Path:
        """Save one output (``tree.json``, ``solution.ipynb`` or ``tree.html``) to ``dest``.

        ``dest`` is a folder (the file keeps its name) or a file path; returns the path written. The file is
        written under a temporary name and renamed when whole, so it appears whole or not at all.
        """
        if name not in DOWNLOADS:
            raise ClientError(f"download {name!r}: one of {', '.join(DOWNLOADS)}")
        dest = Path(dest)
        target = dest / name if dest.is_dir() or str(dest).endswith(("/", "\\")) else dest
        target.parent.mkdir(parents=True, exist_ok=True)
        path = f"/v1/tasks/{_quote(job_id)}/{name}"
        partial = target.with_name(target.name + ".part")
        with self._request("GET", path, stream=True) as reply:
            try:
                with open(partial, "wb") as out:
                    for chunk in reply.iter_content(chunk_size=1 << 20):
                        out.write(chunk)
                os.replace(partial, target)
            except requests.exceptions.ChunkedEncodingError:  # urllib3 checks the length the server declared
                declared = reply.headers.get("content-length", "?")
                raise ServerUnreachable(f"the Jupiter server at {self.url}: GET {path}: the transfer broke off "
                                        f"before the end of its {declared} bytes") from None
            except requests.RequestException as exc:
                raise self._unreachable("GET", path, exc) from None
            finally:
                partial.unlink(missing_ok=True)
        return target

    def solve(self, task: str | Path | Mapping[str, Any], files: Iterable[str | Path] | None = None,
              settings: Mapping[str, Any] | None = None, poll: float = 0.5,
              timeout: float | None = None) -> dict[str, Any]:
        """``submit`` then ``wait``: the finished job JSON, its ``result`` (result.json's dict) included."""
        return self.wait(self.submit(task, files, settings), poll=poll, timeout=timeout)

    def close(self) -> None:
        """Close the kept-alive connections (a later request opens new ones)."""
        self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _no_connection(exc: requests.RequestException) -> str | None:
    """Why no connection to the server was made, in a few words; None when one was made and the server closed it.

    ``requests`` raises ``ConnectionError(MaxRetryError(reason=...))`` when urllib3 gave up (its ``reason`` is the
    urllib3 error) and ``ConnectionError(ProtocolError(...))`` when a request that is not resent failed."""
    cause: object = exc.args[0] if exc.args else exc
    if isinstance(cause, MaxRetryError):
        cause = cause.reason
    if isinstance(cause, ProtocolError):
        return None
    if isinstance(exc, requests.exceptions.SSLError):
        return ("its TLS certificate is not trusted" if "CERTIFICATE_VERIFY_FAILED" in str(exc)
                else f"TLS failed: {cause}")
    if isinstance(exc, requests.exceptions.ProxyError):
        return f"the proxy failed: {cause}"
    if isinstance(exc, requests.exceptions.InvalidSchema):  # e.g. a socks:// proxy without requests[socks]
        return f"unusable proxy: {exc}"
    if isinstance(cause, NameResolutionError):
        return "cannot resolve the host name"
    if isinstance(cause, NewConnectionError) and isinstance(cause.__cause__, ConnectionRefusedError):
        return "connection refused"
    return f"cannot connect ({type(cause).__name__}: {cause})"


def _quote(job_id: str) -> str:
    """A job id as a path segment (ids are hex; anything else a caller passes cannot leave the segment)."""
    return urllib.parse.quote(job_id, safe="")


def _error(method: str, path: str, reply: requests.Response) -> ClientError:
    return ClientError(f"{method} {path}: HTTP {reply.status_code}: {_error_text(reply)}", reply.status_code)


def _error_text(reply: requests.Response) -> str:
    """The server's ``{"error": ...}`` text, else the start of the body."""
    try:
        body = reply.json()
    except ValueError:
        return reply.text.strip()[:200] or reply.reason or "no details"
    if isinstance(body, dict) and body.get("error"):
        return str(body["error"])
    if isinstance(body, dict) and body.get("detail"):  # a framework's own error body
        return str(body["detail"])
    return json.dumps(body)[:200]
