"""The HTTP API of ``jupiter serve`` (FastAPI on uvicorn): jobs, their live events, their files, health, metrics.

Routes (all JSON unless said; errors are ``{"error": "..."}`` with a 4xx status):

- ``POST /v1/tasks`` (multipart: ``task``, ``files``..., ``settings``) → 202 ``{"id", "status": "queued"}``
- ``GET /v1/tasks/{id}``, ``DELETE /v1/tasks/{id}`` (cancel), ``GET /v1/tasks?status=&limit=``
- ``GET /v1/tasks/{id}/events`` (Server-Sent Events), ``/tree.json``, ``/solution.ipynb``, ``/tree.html``
- ``GET /healthz``, ``GET /metrics`` (Prometheus text), ``GET /`` (the page), ``/static/...`` (the page's files;
  ``/static/tree_view.js`` is ``search/static/tree_view.js``, the tree viewer tree.html inlines)

``create_app(config)`` builds the app; its lifespan loads the policy once, opens the job store, re-queues the
jobs a previous process left running, removes old jobs (``gc_days``) and starts the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import os
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException, MultiPartParser

from jupiter import __version__
from jupiter.serve.auth import TokenAuth
from jupiter.serve.backend import start_backend
from jupiter.serve.config import ServeConfig
from jupiter.serve.driver_process import DriverProcess
from jupiter.serve.events import Event, EventHub, EventType, node_events_from_tree_dict
from jupiter.serve.jobs import (
    JobPaths,
    JobSpec,
    SubmissionError,
    as_job_task,
    check_file_name,
    effective_settings,
    job_paths,
    load_job_task,
    parse_settings,
    parse_task_json,
    search_config,
)
from jupiter.serve.metrics import MetricsSnapshot, cache_hit_rate, content_type, render_metrics
from jupiter.serve.openai_api import add_openai_routes
from jupiter.serve.scheduler import Scheduler
from jupiter.serve.store import JobRecord, JobStatus, JobStore
from jupiter.serve.timing import ServerTiming
from search.settings import JobSettings

__all__ = ["create_app", "ServerState", "warm_up"]

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
DOWNLOADS = {"tree.json": "application/json", "solution.ipynb": "application/x-ipynb+json",
             "tree.html": "text/html; charset=utf-8"}
_FIELD_BYTES = 16 * 2**20  # the task JSON and settings fields (not files) may be this large
_KEEPALIVE_S = 15.0
#: How long a thread may hold the GIL before another that waits gets it (Python's default: 5 ms). The event
#: loop shares the GIL with the tree threads and the submit workers; at 5 ms each hand-over to the loop can wait
#: a whole interval. Measured with ``benchmarks/perf/serve_load.py`` (a burst of 200 submits from 20 clients, 2
#: cores): the server's share of a submit had a p99 of 111 ms on average over 3 runs at 5 ms, and 83 ms over 5
#: runs at 1 ms.
SWITCH_INTERVAL_S = 0.001

#: Threads that register submitted jobs (job folder, task check, database row, queueing). Registration is Python
#: work under the GIL with short file and SQLite calls, so more threads do not register faster: they take GIL
#: turns from the event loop, which reads every request. One thread also queues jobs in the order the loop
#: hands them over.
#: Measured 2026-11-24, burst of 20 clients x 10 submits, 4 probes each: submit p99 at the client 114-136 ms
#: (mean 125) with one thread, 147-191 ms (mean 174) with asyncio's default pool (6 threads on 2 cores).
REGISTER_THREADS = 1


class ServerState:
    """What the routes share: config, store, event hub, scheduler and the policy (built by the lifespan)."""

    def __init__(self, config: ServeConfig, policy: Any, value: Any, driver: DriverProcess | None = None) -> None:
        self.config = config
        self.policy = policy
        self.driver = driver
        self.started = time.time()
        self.queued_hint = 0  # queued jobs at the last submit: lets a submit skip a database read when low
        config.data_root.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
        os.chmod(config.data_root, 0o700)  # type: ignore[arg-type]  # sandbox users cannot look into jobs
        self.store = JobStore(config.db)
        self.hub = EventHub()
        self.registrar = ThreadPoolExecutor(REGISTER_THREADS, thread_name_prefix="serve-register")
        self.scheduler: Scheduler | DriverProcess
        if driver is not None:  # the trees run in the driver's process; its events come to our hub
            driver.attach(self.hub, on_lost=self.submit_queued)
            self.scheduler = driver
            return
        self.scheduler = Scheduler.for_server(config, self.store, self.hub, policy, value)

    def paths(self, job_id: str) -> JobPaths:
        return job_paths(self.config.data_root, job_id)  # type: ignore[arg-type]

    def spec_for(self, job_id: str, settings: dict[str, Any], record: dict[str, Any] | None = None) -> JobSpec:
        """A job's spec from its folder (at submit, with the task ``record`` already parsed; after a restart,
        read from the folder's task.json)."""
        paths = self.paths(job_id)
        task = load_job_task(paths, record)
        config = search_config(settings, self.config.profile, self.config.max_trees, self.config.cell_timeout)
        if config.mode.value == "collect" and task.label is None:
            raise SubmissionError("settings.mode: collect scores answers against the task's label; "
                                  "the task has no 'label'")
        return JobSpec(job_id, as_job_task(task, job_id), task.id, config, int(settings.get("seed", 0)), paths)

    def resume(self) -> None:
        """Queue what the database holds: jobs a crashed server left running go back to the queue."""
        requeued = self.store.requeue_running()
        if requeued:
            log.warning("re-queued %d job(s) left running by the previous server: %s", len(requeued),
                        ", ".join(requeued))
        self.submit_queued()

    def submit_queued(self) -> None:
        """Hand every queued job to the scheduler, oldest first (one it holds already is run once)."""
        for record in self.store.list(JobStatus.QUEUED, limit=None, oldest_first=True):
            try:
                self.scheduler.submit(self.spec_for(record.id, record.settings))
            except (SubmissionError, OSError) as exc:
                self.store.finish(record.id, JobStatus.FAILED, None, None, f"cannot resume the job: {exc}")

    def collect_garbage(self) -> int:
        """Remove final jobs older than ``gc_days`` (row and folder). Returns how many."""
        if self.config.gc_days is None:
            return 0
        ids = self.store.finished_before(time.time() - self.config.gc_days * 86400)
        for job_id in ids:
            shutil.rmtree(self.paths(job_id).root, ignore_errors=True)
            self.store.delete(job_id)
            self.hub.drop(job_id)
        if ids:
            log.info("garbage collection removed %d job(s) older than %s day(s)", len(ids), self.config.gc_days)
        return len(ids)

    def metrics(self) -> MetricsSnapshot:
        counts = self.store.counts()
        nodes_rate, tokens_rate = self.scheduler.meter.rates()
        return MetricsSnapshot(
            queue_length=counts[JobStatus.QUEUED],
            running_trees=self.scheduler.running,
            jobs_by_status={s.value: n for s, n in counts.items()},
            nodes_per_second=nodes_rate,
            tokens_per_second=tokens_rate,
            prefix_cache_hit_rate=(self.driver.cache_hit_rate if self.driver is not None
                                   else cache_hit_rate(self.policy)),
            sandbox_states=self.scheduler.sandbox_states(),
            failures_by_type=dict(self.scheduler.failures),
        )

    def close(self) -> None:
        self.registrar.shutdown(wait=True)  # a submit being registered finishes (and is queued) first
        self.scheduler.shutdown()
        self.store.close()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def warm_up(config: ServeConfig, trees_here: bool) -> None:
    """Do before serving what the first submit and the first tree would otherwise do while requests wait: import
    the search (a first submit resolves its settings with it: 40 ms on the event loop) and, when the trees run
    in this process, what a tree imports (``scheduler.preload``), and memoise the default job settings."""
    search_config({}, config.profile, config.max_trees, config.cell_timeout)
    if trees_here:
        from jupiter.serve.scheduler import preload

        preload()


def create_app(config: ServeConfig, policy: Any = None, value: Any = None,
               driver: DriverProcess | None = None) -> FastAPI:
    """The ASGI app. ``driver`` is a started ``DriverProcess``, or ``policy`` (and ``value``) are loaded, to run
    the trees in this process (what ``jupiter serve``'s ``start_backend`` gave; tests pass their own). With
    neither, the lifespan calls ``start_backend(config)`` itself; in Ray mode the workers load the policy."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal policy, value, driver
        local = config.ray_address is None
        if driver is None and policy is None:
            backend = await asyncio.to_thread(start_backend, config)
            policy, value, driver = backend.policy, backend.value, backend.driver
        if config.ray_address is not None:
            # join the Ray cluster once for the server's life (``solve_tasks_ray`` then reuses the connection
            # instead of starting and stopping Ray for every batch)
            import ray

            if not ray.is_initialized():
                ray.init(address=config.ray_address, logging_level=logging.WARNING)
        await asyncio.to_thread(warm_up, config, driver is None and local)
        state = ServerState(config, policy, value, driver)
        app.state.server = state
        state.collect_garbage()
        state.resume()
        # What start-up made lives as long as the server: moved out of the collector's way, a full collection
        # no longer walks it (a pause on the event loop, growing with every module loaded). Undone at shutdown.
        gc.collect()
        gc.freeze()
        gc_task = asyncio.create_task(_gc_loop(state)) if config.gc_days is not None else None
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        try:
            yield
        finally:
            gc.unfreeze()
            sys.setswitchinterval(switch_interval)
            if gc_task is not None:
                gc_task.cancel()
            await asyncio.to_thread(state.close)
            if policy is not None:
                policy.close()
            if config.ray_address is not None:
                import ray

                ray.shutdown()

    app = FastAPI(title="Jupiter", version=__version__, lifespan=lifespan,
                  description="Tree search over notebook states, as a service. Submit a task, follow its tree, "
                              "download the notebook.")
    _routes(app)
    add_openai_routes(app, _server, _submit_job)
    _document_settings(app)
    app.mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = ["{}: {}".format(".".join(str(x) for x in e.get("loc", ())), e.get("msg", "")) for e in exc.errors()]
        return _error(400, "; ".join(parts) or "bad request")

    app.add_middleware(TokenAuth, token=config.token)
    app.add_middleware(ServerTiming)  # outermost: a refused (401) request is timed too
    return app


async def _gc_loop(state: ServerState) -> None:
    while True:
        await asyncio.sleep(3600)
        await asyncio.to_thread(state.collect_garbage)


def _server(request: Request) -> ServerState:
    return request.app.state.server


def _record(request: Request, job_id: str, with_tree: bool = False) -> JobRecord:
    server = _server(request)
    try:
        server.paths(job_id)
    except SubmissionError:
        raise StarletteHTTPException(404, f"no job {job_id!r}") from None
    record = server.store.get(job_id, with_tree=with_tree)
    if record is None:
        raise StarletteHTTPException(404, f"no job {job_id!r}")
    return record


_SUBMIT_DOC = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object", "required": ["task"],
            "properties": {
                "task": {"type": "string", "description": "the task JSON (our layout, NbQA or DABench record)"},
                "files": {"type": "array", "items": {"type": "string", "format": "binary"},
                          "description": "data files the task names (plain file names)"},
                "settings": {"type": "string", "contentMediaType": "application/json",
                             "contentSchema": {"$ref": "#/components/schemas/JobSettings"},
                             "description": "the job's search settings, a JSON object (JobSettings); a setting "
                                            "left out takes the server profile's value for the mode"},
            }}}},
    },
}


def _document_settings(app: FastAPI) -> None:
    """Put ``JobSettings``' own JSON schema on the OpenAPI page, where the ``settings`` field refers to it: the
    page documents the model the server validates with, not a copy of it."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base()
            settings = JobSettings.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(settings.pop("$defs", {}))
            components["JobSettings"] = settings
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _routes(app: FastAPI) -> None:
    @app.post("/v1/tasks", status_code=202, openapi_extra=_SUBMIT_DOC, summary="Submit a task")
    async def submit(request: Request) -> JSONResponse:
        server = _server(request)
        try:
            return await _submit(request, server)
        except SubmissionError as exc:
            return _error(exc.status, str(exc))

    @app.get("/v1/tasks", summary="List jobs, newest first")
    async def list_jobs(request: Request, status: str | None = None, limit: int = 100) -> JSONResponse:
        wanted = None
        if status:
            try:
                wanted = JobStatus(status)
            except ValueError:
                return _error(400, f"status: {status!r} is not one of {', '.join(s.value for s in JobStatus)}")
        if not 1 <= limit <= 10000:
            return _error(400, f"limit: must be 1..10000 (got {limit})")
        records = await asyncio.to_thread(_server(request).store.list, wanted, limit=limit)
        return JSONResponse({"tasks": [r.to_json(with_result=False) for r in records]})

    @app.get("/v1/tasks/{job_id}", summary="A job: status, progress, result")
    async def get_job(request: Request, job_id: str) -> JSONResponse:
        record = await asyncio.to_thread(_record, request, job_id)
        return JSONResponse(record.to_json())

    @app.delete("/v1/tasks/{job_id}", summary="Cancel a job")
    async def cancel_job(request: Request, job_id: str) -> JSONResponse:
        record = _record(request, job_id)
        server = _server(request)
        if not record.status.finished:
            now = await asyncio.to_thread(server.scheduler.cancel, job_id)
            if now is JobStatus.RUNNING:  # the tree stops at its next step: wait a little for it
                for _ in range(40):
                    await asyncio.sleep(0.05)
                    if server.store.get(job_id).status.finished:  # type: ignore[union-attr]
                        break
        return JSONResponse(_record(request, job_id).to_json())

    @app.get("/v1/tasks/{job_id}/events", summary="Server-Sent Events of a job's tree")
    async def events(request: Request, job_id: str) -> EventSourceResponse:
        _record(request, job_id)
        # sse-starlette sends a keep-alive comment every _KEEPALIVE_S and ends the stream when the client goes
        return EventSourceResponse(_event_stream(request, job_id), ping=_KEEPALIVE_S, sep="\n")

    for name, media in DOWNLOADS.items():
        _download_route(app, name, media)

    @app.get("/healthz", summary="Liveness and queue size")
    async def healthz(request: Request) -> JSONResponse:
        server = _server(request)
        counts = await asyncio.to_thread(server.store.counts)
        driver = server.driver
        # "driver": where the trees run; with a driver process that is down (being replaced, or its restart
        # failed) the server still answers but runs nothing: 503, so a load balancer or a probe notices
        state = ("ray" if server.config.ray_address is not None else "thread" if driver is None
                 else "process" if driver.alive else "down")
        body = {"status": "ok" if state != "down" else "degraded", "version": __version__,
                "policy": server.config.llm, "queued": counts[JobStatus.QUEUED], "running": counts[JobStatus.RUNNING],
                "ray": server.config.ray_address is not None, "driver": state}
        if state == "down":
            body["error"] = driver.last_error or "the driver process is restarting"  # type: ignore[union-attr]
        return JSONResponse(body, status_code=200 if state != "down" else 503)

    @app.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
    async def metrics(request: Request) -> PlainTextResponse:
        snapshot = await asyncio.to_thread(_server(request).metrics)
        return PlainTextResponse(render_metrics(snapshot), media_type=content_type())

    @app.get("/static/tree_view.js", include_in_schema=False)
    async def tree_viewer() -> FileResponse:
        # the tree viewer is stored once, in search/static (tree.html inlines the same file); matched before the
        # /static mount, which serves this package's own files
        from search.html import TREE_VIEW_JS

        return FileResponse(TREE_VIEW_JS, media_type="text/javascript; charset=utf-8")

    @app.get("/", include_in_schema=False)
    async def index() -> Any:
        page = STATIC_DIR / "index.html"
        if page.is_file():
            return FileResponse(page, media_type="text/html; charset=utf-8")
        return HTMLResponse("<!doctype html><title>Jupiter</title><p>Jupiter server: the API is at "
                            "<a href='/docs'>/docs</a>.</p>")


def _download_route(app: FastAPI, name: str, media: str) -> None:
    async def download(request: Request, job_id: str) -> FileResponse:
        _record(request, job_id)
        path = _server(request).paths(job_id).output / name
        if not path.is_file():
            raise StarletteHTTPException(404, f"job {job_id}: no {name} yet")
        return FileResponse(path, media_type=media, filename=f"{job_id}-{name}" if name != "tree.html" else None)

    app.add_api_route(f"/v1/tasks/{{job_id}}/{name}", download, methods=["GET"], summary=f"Download {name}")


async def _submit(request: Request, server: ServerState) -> JSONResponse:
    config = server.config
    # Refuse before reading the body when the queue was full at the last look; the count that decides is taken
    # again where the job is inserted (one thread hop per submit, not two: each costs the event loop time).
    if server.queued_hint >= config.max_queue and _queue_full(
            server, await asyncio.to_thread(server.store.count, JobStatus.QUEUED)):
        raise _queue_full_error(config)
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise SubmissionError("send the task as multipart/form-data (fields: task, files, settings)", status=415)
    declared = request.headers.get("content-length")
    limit = config.max_upload_bytes
    if declared is not None and declared.isdigit() and int(declared) > limit + _FIELD_BYTES:
        raise SubmissionError(f"upload too large: {int(declared)} bytes; the limit is {config.max_upload_mb:g} MB",
                              status=413)

    async def body() -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > limit + _FIELD_BYTES:
                raise SubmissionError(f"upload too large: more than {config.max_upload_mb:g} MB", status=413)
            yield chunk

    parser = MultiPartParser(request.headers, body(), max_files=config.max_files + 100, max_fields=100,
                             max_part_size=_FIELD_BYTES)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        if "Too many files" in str(exc):
            raise SubmissionError(f"too many files: the limit is {config.max_files}") from None
        raise SubmissionError(f"bad multipart body: {exc}") from None
    try:
        return await _accept(form, server)
    finally:
        await form.close()


async def _accept(form: Any, server: ServerState) -> JSONResponse:
    config = server.config
    unknown = sorted({k for k in form.keys()} - {"task", "files", "settings"})
    if unknown:
        raise SubmissionError(f"unknown form field(s) {', '.join(unknown)}; send task, files and settings")
    task_text = form.get("task")
    if task_text is None:
        raise SubmissionError("task: the 'task' field (the task JSON) is missing")
    if not isinstance(task_text, str):
        task_text = (await task_text.read()).decode("utf-8", errors="strict")
    settings_field = form.get("settings")
    if settings_field is not None and not isinstance(settings_field, str):
        settings_field = (await settings_field.read()).decode("utf-8")
    # refuse bad settings early (_submit_job): the job records every setting's effective value (the profile's
    # where not sent)
    settings = parse_settings(settings_field)
    effective_settings(search_config(settings, config.profile, config.max_trees, config.cell_timeout), settings)
    uploads = [f for f in form.getlist("files") if not isinstance(f, str)]
    if len(form.getlist("files")) != len(uploads):
        raise SubmissionError("files: each 'files' field must be a file upload")
    if len(uploads) > config.max_files:
        raise SubmissionError(f"too many files: {len(uploads)}; the limit is {config.max_files}")
    names = [check_file_name(u.filename) for u in uploads]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SubmissionError(f"files: duplicate file name(s) {', '.join(duplicates)}")
    total = sum(int(u.size or 0) for u in uploads)
    if total > config.max_upload_bytes:
        raise SubmissionError(f"upload too large: files total {total} bytes; the limit is "
                              f"{config.max_upload_mb:g} MB", status=413)
    job_id = await _submit_job(server, task_text, uploads, names, settings)
    return JSONResponse({"id": job_id, "status": JobStatus.QUEUED.value}, status_code=202)


async def _submit_job(server: ServerState, task_text: str, uploads: list[Any], names: list[str],
                      settings: dict[str, Any]) -> str:
    """Register a job (task JSON, its files, its settings, checked) and queue it; its id. ``POST /v1/tasks`` and
    the OpenAI chat endpoint both submit through here."""
    config = server.config
    settings = effective_settings(search_config(settings, config.profile, config.max_trees, config.cell_timeout),
                                  settings)
    record = parse_task_json(task_text)
    job_id = uuid.uuid4().hex
    # Files, task loading, the database row and the queue all block (disk, SQLite's lock that the driver
    # threads also take after every step): off the event loop, so other requests are not held up behind them, on
    # the server's registration thread (REGISTER_THREADS says why one).
    await asyncio.get_running_loop().run_in_executor(
        server.registrar, functools.partial(_register_job, server, job_id, task_text, record, uploads, names, settings))
    return job_id


def _register_job(server: ServerState, job_id: str, task_text: str, record: Any, uploads: list[Any],
                  names: list[str], settings: dict[str, Any]) -> None:
    """Write the job's folder, check its task, insert its row and queue it (a failure leaves no folder)."""
    if _queue_full(server, server.store.count(JobStatus.QUEUED)):
        raise _queue_full_error(server.config)
    paths = server.paths(job_id)
    try:
        _write_job(paths, task_text, uploads, names)
        spec = server.spec_for(job_id, settings, record)
    except BaseException:
        shutil.rmtree(paths.root, ignore_errors=True)
        raise
    server.store.insert(job_id, spec.task_id, spec.task.question, settings)
    server.scheduler.submit(spec)


def _queue_full(server: ServerState, queued: int) -> bool:
    server.queued_hint = queued
    return server.queued_hint >= server.config.max_queue


def _queue_full_error(config: ServeConfig) -> SubmissionError:
    return SubmissionError(f"queue full: {config.max_queue} jobs are waiting; try again later", status=429)


def _write_job(paths: JobPaths, task_text: str, uploads: list[Any], names: list[str]) -> None:
    paths.root.mkdir(mode=0o700)
    paths.files.mkdir(mode=0o700)
    paths.task.write_text(task_text, encoding="utf-8")
    for upload, name in zip(uploads, names):
        upload.file.seek(0)
        with open(paths.files / name, "xb") as out:
            shutil.copyfileobj(upload.file, out, 1 << 20)


class _NodeIds:
    """SSE ids of node events, ``<run>-<n>`` (n counts the run's nodes from 1), and, with ``?resume=1``, the
    resume point a reconnecting client names in ``Last-Event-ID``: nodes it already has are not sent again.
    ``run`` is the job's attempt number, so after a re-queue (a new tree) the client gets everything again."""

    def __init__(self, run: int, last_event_id: str | None) -> None:
        self.run, self.count, self.skip = run, 0, 0
        given_run, _, given_n = (last_event_id or "").partition("-")
        if given_run == str(run) and given_n.isdigit():
            self.skip = int(given_n)

    def frame(self, event: Event) -> ServerSentEvent | None:
        """The frame to send (None for a node the client already has)."""
        if event.type is not EventType.NODE:
            return _sse(event)
        self.count += 1
        if self.count <= self.skip:
            return None
        return _sse(event, f"{self.run}-{self.count}")


def _sse(event: Event, event_id: str | None = None) -> ServerSentEvent:
    """One SSE frame: the event's type, its data as one line of JSON, and the node's id when it has one."""
    return ServerSentEvent(json.dumps(dict(event.data), default=str), event=event.type.value, id=event_id, sep="\n")


def _done_event(record: JobRecord) -> Event:
    return Event(EventType.DONE, {"status": record.status.value, "answer": (record.result or {}).get("answer"),
                                  "error": record.error})


async def _event_stream(request: Request, job_id: str) -> AsyncIterator[ServerSentEvent]:
    """A job's events: every node so far (root first), then live events until ``done``."""
    server = _server(request)
    loop = asyncio.get_running_loop()
    # Resuming is opt-in (``?resume=1``): by default a reconnect replays every node, which pages that redraw
    # on reconnect rely on (the API's rule: a client that connects late first gets every node so far).
    resume = request.headers.get("last-event-id") if request.query_params.get("resume") == "1" else None
    subscription = server.hub.subscribe(job_id, loop)
    record = server.store.get(job_id, with_tree=subscription is None)
    if record is None:
        return
    ids = _NodeIds(record.attempts, resume)
    if subscription is None:
        if record.status.finished:
            for node in node_events_from_tree_dict(record.tree):
                frame = ids.frame(Event(EventType.NODE, node))
                if frame is not None:
                    yield frame
            yield _sse(_done_event(record))
            return
        server.hub.open(job_id)  # queued: open its channel so that we see it start
        subscription = server.hub.subscribe(job_id, loop)
        assert subscription is not None
        if subscription.queue is not None:  # it may have ended between the read and the subscribe
            now = server.store.get(job_id)
            if now is not None and now.status.finished and subscription.done is None:
                server.hub.unsubscribe(job_id, subscription.queue)
                yield _sse(_done_event(now))
                return
    for node in subscription.nodes:
        frame = ids.frame(Event(EventType.NODE, node))
        if frame is not None:
            yield frame
    if subscription.queue is None:
        if subscription.done is not None:
            yield _sse(subscription.done)
        return
    queue = subscription.queue
    try:
        yield _sse(Event(EventType.STATUS, {"status": record.status.value}))
        while True:
            event = await queue.get()
            frame = ids.frame(event)
            if frame is not None:
                yield frame
            if event.type is EventType.DONE:
                return
    finally:
        server.hub.unsubscribe(job_id, queue)
