"""A Python client for ``jupiter serve``: submit tasks with their data files, follow them, fetch their outputs.

It speaks the server's small HTTP API (``/v1/tasks``) over kept-alive ``http.client`` connections
(``jupiter.http_transport``), so scripts, notebooks and the ``jupiter solve --server`` command share one
implementation of it::

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
import ssl
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from jupiter import __version__
from jupiter.http_transport import HttpTransport, Reply, Unreachable, lines

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
    "DATA_FILE_TYPES",
    "MultipartForm",
    "Reply",
]

log = logging.getLogger(__name__)

#: the ``settings`` keys the server accepts (anything else is refused here, naming the key)
SETTINGS_KEYS = frozenset({"mode", "iterations", "expansions", "c_puct", "temperature", "top_p",
                           "max_tokens", "max_depth", "decision", "seed"})
#: the output files a finished job offers for download
DOWNLOADS = ("tree.json", "solution.ipynb", "tree.html")


#: content types of the data files tasks come with (the server keeps files by name and never reads this)
DATA_FILE_TYPES = {
    ".csv": "text/csv", ".tsv": "text/tab-separated-values", ".txt": "text/plain", ".md": "text/markdown",
    ".json": "application/json", ".jsonl": "application/jsonl", ".xml": "application/xml",
    ".html": "text/html", ".xls": "application/vnd.ms-excel",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".parquet": "application/vnd.apache.parquet", ".feather": "application/vnd.apache.arrow.file",
    ".zip": "application/zip", ".gz": "application/gzip",
    ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".pdf": "application/pdf",
}


def mime_type(name: str) -> str:
    """The upload's content type, from its name's extension (``application/octet-stream`` when unknown).

    Why a table of our own rather than the standard library's ``mimetypes``: that one reads the system's type
    tables on its first guess (about 13 ms of CPU, 1,700 entries) in every new client process, and without a
    lock, so 20 threads starting together each read them. A submit burst's first requests waited 150–500 ms
    on it. The server stores uploads by name and never reads their content type.
    """
    return DATA_FILE_TYPES.get(Path(name).suffix.lower(), "application/octet-stream")

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


def parse_sse(lines: Iterable[str]) -> Iterator[Event]:
    """Parse a text/event-stream (one decoded line at a time, without line ends) into events.

    Follows the SSE rules that matter here: ``event:``/``data:``/``id:`` fields, several ``data:`` lines joined
    by newlines, ``:`` comment lines (keep-alives) ignored, an event dispatched at a blank line. Data that is
    not a JSON object is kept under ``{"text": ...}``.
    """
    kind, data, event_id = "message", [], None
    for line in lines:
        if line == "":
            if data:
                text = "\n".join(data)
                try:
                    payload = json.loads(text)
                except json.JSONDecodeError:
                    payload = {"text": text}
                yield Event(kind, payload if isinstance(payload, dict) else {"value": payload}, event_id)
            kind, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            kind = value or "message"
        elif name == "data":
            data.append(value)
        elif name == "id":
            event_id = value


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


class Client:
    """One server at ``url`` (``http://host:port``); ``token`` is sent as a Bearer token when the server wants one.

    ``timeout`` (seconds) bounds each HTTP request (connecting and each read), not the life of a job: use
    ``wait(timeout=...)`` for that. The client is safe to share between threads: each thread keeps its own
    kept-alive connection (``jupiter.http_transport`` says why that is ``http.client``, not ``requests``); an
    ``events`` stream has a connection of its own. ``on_reply`` is called with every reply (a
    ``jupiter.http_transport.Reply``, errors included), e.g. to read the server's ``Server-Timing``.
    ``ssl_context`` replaces the system's trust store for ``https://`` servers.
    """

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0,
                 on_reply: Callable[[Reply], None] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ClientError(f"server URL {url!r}: it must start with http:// or https://")
        self.url = url.rstrip("/")
        self.token = token or None
        self.timeout = timeout
        self.on_reply = on_reply
        headers = {"User-Agent": f"jupiter-client/{__version__}", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            self._http = HttpTransport(self.url, timeout, headers, ssl_context)
        except (ValueError, Unreachable) as exc:
            raise ClientError(str(exc)) from None

    @property
    def proxy(self) -> str | None:
        """The proxy the requests go through (from the environment; None: straight to the server, as for any
        loopback server)."""
        return self._http.proxy_url

    # ---------------------------------------------------------------- plumbing
    def _unreachable(self, method: str, path: str, exc: Unreachable) -> ServerUnreachable:
        if exc.stage == Unreachable.TIMEOUT:
            return ServerUnreachable(f"the Jupiter server at {self.url} did not answer {method} {path} within "
                                     f"{self.timeout:g} s")
        if exc.stage == Unreachable.REPLY:  # it answered, then stopped
            return ServerUnreachable(f"the Jupiter server at {self.url}: {method} {path}: {exc.reason}")
        return ServerUnreachable(f"no Jupiter server at {self.url} ({exc.reason}); is `jupiter serve` running "
                                 "there?")

    def _request(self, method: str, path: str, body: bytes | None = None,
                 headers: Mapping[str, str] | None = None) -> Reply:
        try:
            reply = self._http.request(method, path, body, headers)
        except Unreachable as exc:
            raise self._unreachable(method, path, exc) from None
        if self.on_reply is not None:
            self.on_reply(reply)
        if reply.status >= 400:
            raise _error(reply)
        return reply

    def _json(self, method: str, path: str, body: bytes | None = None,
              headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        reply = self._request(method, path, body, headers)
        try:
            data = json.loads(reply.body)
        except ValueError:
            raise ClientError(f"{method} {path}: the server's reply is not JSON "
                              f"({reply.body[:120].decode('utf-8', 'replace')!r})", reply.status) from None
        if not isinstance(data, dict):
            raise ClientError(f"{method} {path}: expected a JSON object, got {type(data).__name__}", reply.status)
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
        form = MultipartForm()
        form.field("task", text)
        if settings:
            unknown = sorted(set(settings) - SETTINGS_KEYS)
            if unknown:
                raise ClientError(f"settings: unknown key(s) {', '.join(unknown)}; known: "
                                  f"{', '.join(sorted(SETTINGS_KEYS))}")
            form.field("settings", json.dumps(dict(settings)))
        for path in paths:
            try:
                form.file("files", path.name, path.read_bytes(), mime_type(path.name))
            except OSError as exc:
                raise ClientError(f"data file {path}: cannot read it ({exc.strerror or exc})") from None
        body = self._json("POST", "/v1/tasks", form.body(), {"Content-Type": form.content_type})
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
        two lines (seconds); the server sends keep-alives while a job runs.
        """
        path = f"/v1/tasks/{_quote(job_id)}/events"
        try:
            with self._http.stream("GET", path, {"Accept": "text/event-stream"}, read_timeout) as response:
                if response.status >= 400:
                    reply = Reply("GET", path, response.status, response.reason, response.msg, response.read())
                    raise _error(reply)
                yield from parse_sse(lines(response))
        except Unreachable as exc:
            if exc.stage == Unreachable.CONNECT:
                raise self._unreachable("GET", path, exc) from None
            raise ServerUnreachable(f"the event stream of job {job_id} broke off ({exc.reason})") from None

    def download(self, job_id: str, name: str, dest: str | Path) -> Path:
        """Save one output (``tree.json``, ``solution.ipynb`` or ``tree.html``) to ``dest``.

        ``dest`` is a folder (the file keeps its name) or a file path; returns the path written. The file
        appears whole or not at all.
        """
        if name not in DOWNLOADS:
            raise ClientError(f"download {name!r}: one of {', '.join(DOWNLOADS)}")
        dest = Path(dest)
        target = dest / name if dest.is_dir() or str(dest).endswith(("/", "\\")) else dest
        target.parent.mkdir(parents=True, exist_ok=True)
        path = f"/v1/tasks/{_quote(job_id)}/{name}"
        try:
            self._http.download(path, target, _error)
        except Unreachable as exc:
            raise self._unreachable("GET", path, exc) from None
        return target

    def solve(self, task: str | Path | Mapping[str, Any], files: Iterable[str | Path] | None = None,
              settings: Mapping[str, Any] | None = None, poll: float = 0.5,
              timeout: float | None = None) -> dict[str, Any]:
        """``submit`` then ``wait``: the finished job JSON, its ``result`` (result.json's dict) included."""
        return self.wait(self.submit(task, files, settings), poll=poll, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MultipartForm:
    """A multipart/form-data body (RFC 7578), built in memory: plain fields and files.

    Names and file names are written as browsers write them (the HTML standard's rule: UTF-8, with ``"``, CR and
    LF percent-escaped), which is what the server's parser reads.
    """

    def __init__(self) -> None:
        self.boundary = uuid.uuid4().hex
        self._parts: list[bytes] = []

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def field(self, name: str, value: str) -> None:
        self._add(f'form-data; name="{_escape(name)}"', None, value.encode("utf-8"))

    def file(self, name: str, filename: str, content: bytes, content_type: str) -> None:
        self._add(f'form-data; name="{_escape(name)}"; filename="{_escape(filename)}"', content_type, content)

    def _add(self, disposition: str, content_type: str | None, content: bytes) -> None:
        head = f"--{self.boundary}\r\nContent-Disposition: {disposition}\r\n"
        if content_type:
            head += f"Content-Type: {content_type}\r\n"
        self._parts.append(head.encode("utf-8") + b"\r\n" + content + b"\r\n")

    def body(self) -> bytes:
        return b"".join(self._parts) + f"--{self.boundary}--\r\n".encode("ascii")


def _escape(value: str) -> str:
    return value.replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


def _quote(job_id: str) -> str:
    """A job id as a path segment (ids are hex; anything else a caller passes cannot leave the segment)."""
    return urllib.parse.quote(job_id, safe="")


def _error(reply: Reply) -> ClientError:
    return ClientError(f"{reply.method} {reply.path}: HTTP {reply.status}: {_error_text(reply)}", reply.status)


def _error_text(reply: Reply) -> str:
    """The server's ``{"error": ...}`` text, else the start of the body."""
    try:
        body = json.loads(reply.body)
    except ValueError:
        return reply.body.decode("utf-8", "replace").strip()[:200] or reply.reason or "no details"
    if isinstance(body, dict) and body.get("error"):
        return str(body["error"])
    if isinstance(body, dict) and body.get("detail"):  # a framework's own error body
        return str(body["detail"])
    return json.dumps(body)[:200]
