"""The search driver in a process of its own (``jupiter serve --driver process``): a crash there does not take
the API down.

Why: with ``--driver thread`` (the default) a model that crashes the process (an in-process model running out of
memory, a segfault in native code) ends the server, and only a restart brings the jobs back. Here the HTTP process
keeps the API, the database reads and the event hub; a child process (``spawn``: the parent has threads) loads the
policy and runs the unchanged ``Scheduler``. The child also keeps the search's Python work off the event loop's
GIL. On the replay policy that did not make the API faster: a 20-client submit burst is CPU-bound on two cores
either way (docs/serve.md has the numbers). The two share the SQLite database (WAL; a connection each) and talk
over one pipe:

- parent -> child: ``("submit", JobSpec)``, ``("cancel", request_id, job_id)``, ``("shutdown",)``
- child -> parent: ``("ready",)`` or ``("failed", what, message)`` once at start; ``("hub", method, job_id,
  payload)`` for the event hub; ``("stats", dict)`` twice a second; ``("reply", request_id, value)``.

Nothing is lost when either side dies. The child dies (a crash, the OOM killer): the parent's reader sees the
pipe close, puts the jobs left running back in the queue, starts a new child and calls ``on_lost`` (the server
submits every queued job again; a job submitted twice runs once: ``mark_running`` admits it once).
The parent dies: the child sees the pipe close and stops its trees; their jobs go back to the queue in the
database, and the next server runs them. Ctrl-C reaches the whole process group; the child ignores SIGINT and
waits for the parent's orderly ``shutdown``.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jupiter.serve.config import ServeConfig
from jupiter.serve.store import JobStatus

__all__ = ["DriverProcess", "DriverStartError"]

log = logging.getLogger(__name__)

_STATS_EVERY_S = 0.5
_REPLY_TIMEOUT_S = 30.0
_RESTART_TRIES = 3
_RESTART_PAUSE_S = 5.0


class DriverStartError(RuntimeError):
    """The driver process could not load what it needs. ``what`` names the setting: ``llm`` or ``value-model``."""

    def __init__(self, what: str, message: str) -> None:
        super().__init__(f"--{what}: {message}")
        self.what, self.message = what, message


@dataclass
class _Rates:
    """What ``Scheduler.meter`` gives the metrics page, as the child last reported it."""

    nodes: float = 0.0
    tokens: float = 0.0

    def rates(self) -> tuple[float, float]:
        return self.nodes, self.tokens


class DriverProcess:
    """The ``Scheduler``'s public surface (``submit``, ``cancel``, ``running``, ``sandbox_states``, ``meter``,
    ``failures``, ``shutdown``), served by a child process. ``start`` blocks until the policy is loaded."""

    def __init__(self, config: ServeConfig, start_timeout: float = 1800.0) -> None:
        if config.ray_address is not None:
            raise ValueError("Ray mode runs its trees on Ray workers; it needs no driver process")
        self.config = config
        self.start_timeout = start_timeout
        self.meter = _Rates()
        self.failures: dict[str, int] = {k: 0 for k in ("infrastructure", "model", "code_error", "job", "driver")}
        self._earlier: collections.Counter[str] = collections.Counter()  # lost children's counts, and the losses
        self.cache_hit_rate: float | None = None
        self.restarts = 0
        self.last_error: str | None = None  # why the last restart failed, while no child runs
        self._running = 0
        self._sandbox_states = 0
        self._hub: Any = None
        self._on_lost: Callable[[], None] | None = None
        self._send_lock = threading.Lock()
        self._replies: dict[int, Any] = {}
        self._reply_cond = threading.Condition()
        self._ids = itertools.count(1)
        self._closing = False
        self._closed = threading.Event()
        self._conn: Any = None
        self._process: multiprocessing.process.BaseProcess | None = None

    # ----------------------------------------------------------------------------------------- life cycle

    def start(self) -> DriverProcess:
        """Start the child and wait until it has loaded the policy (raises ``DriverStartError`` if it cannot)."""
        self._spawn()
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        """A child is running and takes jobs (False while a lost one is being replaced, or after that failed)."""
        return self._conn is not None and self._process is not None and self._process.is_alive()

    def attach(self, hub: Any, on_lost: Callable[[], None]) -> None:
        """Where the child's events go, and what to call once a lost child was replaced: submit the queued jobs
        again (the jobs the lost child was running are already back in the queue then)."""
        self._hub, self._on_lost = hub, on_lost

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop every tree at its next step (the child re-queues their jobs), then end the child."""
        self._closing = True
        self._closed.set()
        process = self._process
        if process is None:
            return
        with contextlib.suppress(OSError):
            self._send(("shutdown",))
        process.join(timeout + 10.0)
        if process.is_alive():
            log.warning("the driver process did not stop in %.0f s; killing it", timeout + 10.0)
            process.kill()
            process.join(10.0)
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()

    # ----------------------------------------------------------------------------------- scheduler surface

    def submit(self, spec: Any) -> None:
        """Queue an accepted job (its row is in the database). If the child is being replaced, the job stays
        queued there and the replacement's ``on_lost`` submits it."""
        try:
            self._send(("submit", spec))
        except OSError:
            log.warning("job %s: the driver process is restarting; the job waits in the queue", spec.job_id)

    def cancel(self, job_id: str) -> JobStatus | None:
        value = self._request("cancel", job_id)
        return JobStatus(value) if value is not None else None

    @property
    def running(self) -> int:
        return self._running

    def sandbox_states(self) -> int:
        return self._sandbox_states

    # ------------------------------------------------------------------------------------------- internals

    def _spawn(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe(duplex=True)
        process = context.Process(target=_child_main, args=(child, self.config), name="jupiter-serve-driver",
                                  daemon=False)
        process.start()
        child.close()
        if not parent.poll(self.start_timeout):
            process.kill()
            raise DriverStartError("llm", f"the driver process did not load the policy in {self.start_timeout:.0f} s")
        try:
            first = parent.recv()
        except (EOFError, OSError):
            process.join(5.0)
            raise DriverStartError("llm", f"the driver process exited while starting (exit code "
                                   f"{process.exitcode})") from None
        if first[0] != "ready":
            process.join(10.0)
            raise DriverStartError(first[1], first[2])
        self._conn, self._process = parent, process
        threading.Thread(target=self._read, args=(parent, process), daemon=True,
                         name="serve-driver-reader").start()

    def _send(self, message: tuple) -> None:
        with self._send_lock:
            if self._conn is None:
                raise OSError("no driver process")
            self._conn.send(message)

    def _request(self, kind: str, *args: Any) -> Any:
        request_id = next(self._ids)
        try:
            self._send((kind, request_id, *args))
        except OSError:
            return None
        deadline = time.monotonic() + _REPLY_TIMEOUT_S
        with self._reply_cond:
            while request_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("the driver process did not answer a %s in %.0f s", kind, _REPLY_TIMEOUT_S)
                    return None
                self._reply_cond.wait(left)
            return self._replies.pop(request_id)

    def _read(self, conn: Any, process: Any) -> None:
        """Apply the child's messages until its pipe closes; replace a child that died while serving."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "hub":
                _, method, job_id, payload = message
                if self._hub is not None:
                    getattr(self._hub, method)(job_id, *payload)
            elif kind == "stats":
                stats = message[1]
                self._running, self._sandbox_states = stats["running"], stats["sandbox_states"]
                self.meter.nodes, self.meter.tokens = stats["rates"]
                current = collections.Counter(self._earlier)
                current.update(stats["failures"])
                self.failures = {k: current[k] for k in set(self.failures) | set(current)}
                self.cache_hit_rate = stats["cache_hit_rate"]
            elif kind == "reply":
                with self._reply_cond:
                    self._replies[message[1]] = message[2]
                    self._reply_cond.notify_all()
        process.join(10.0)
        if self._closing:
            return
        log.error("the driver process exited (exit code %s) while serving; starting a new one", process.exitcode)
        with self._send_lock:
            self._conn = None
        self._running = 0
        self.failures["driver"] += 1
        self._earlier = collections.Counter(self.failures)  # the counts since the server started go on
        self.restarts += 1
        try:  # before the new child starts anything: every running row now is the dead child's
            from jupiter.serve.store import JobStore

            store = JobStore(self.config.db)
            try:
                requeued = store.requeue_running()
            finally:
                store.close()
            if requeued:
                log.warning("re-queued %d job(s) the lost driver was running: %s", len(requeued), ", ".join(requeued))
        except Exception:
            log.exception("could not re-queue the lost driver's jobs; the next server start will")
        for attempt in range(1, _RESTART_TRIES + 1):
            if self._closing:
                return
            try:
                self._spawn()
                break
            except DriverStartError as exc:
                self.last_error = str(exc)
                log.error("the new driver process did not start (try %d of %d): %s", attempt, _RESTART_TRIES, exc)
                if attempt == _RESTART_TRIES:
                    log.error("no driver process: queued jobs wait for the next server start")
                    return
                self._closed.wait(_RESTART_PAUSE_S * attempt)  # a shutdown ends the pause
        self.last_error = None
        if self._closing:  # the server began to stop while the new child started: stop it too
            self.shutdown()
            return
        if self._on_lost is not None:
            try:
                self._on_lost()
            except Exception:
                log.exception("re-queueing the lost driver's jobs failed")


# --------------------------------------------------------------------------------------------- the child

class _PipeHub:
    """The event hub as the child's scheduler sees it: each call goes to the parent's real hub, in order."""

    def __init__(self, send: Callable[[tuple], None]) -> None:
        self._send = send

    def open(self, job_id: str) -> None:
        self._send(("hub", "open", job_id, ()))

    def publish(self, job_id: str, type_: Any, data: Any) -> None:
        self._send(("hub", "publish", job_id, (type_, dict(data))))

    def publish_many(self, job_id: str, events: Any) -> None:
        self._send(("hub", "publish_many", job_id, (list(events),)))

    def drop(self, job_id: str) -> None:
        self._send(("hub", "drop", job_id, ()))


def _child_main(conn: Any, config: ServeConfig) -> None:
    """Load the policy (and value model), run a ``Scheduler`` and obey the parent until it says stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent shuts us down in order
    if config.nice:
        # The API answers first: on a machine with few cores the search (this process and the sandboxes it
        # starts, which inherit the niceness) yields the CPU to the HTTP process when both want it.
        os.nice(config.nice)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("jupiter").setLevel(logging.INFO)
    lock = threading.Lock()

    def send(message: tuple) -> None:
        """To the parent; a parent that is gone is not the lane threads' error (the main loop sees the pipe
        close and stops the trees, whose jobs go back to the queue)."""
        with contextlib.suppress(OSError, EOFError, ValueError), lock:
            conn.send(message)

    from jupiter.llm import load_policy
    from search.loaders import load_value

    try:
        policy = load_policy(config.llm)
    except Exception as exc:
        send(("failed", "llm", str(exc) or type(exc).__name__))
        return
    try:
        value = load_value(config.value_model)
    except Exception as exc:
        send(("failed", "value-model", f"{type(exc).__name__}: {exc}"))
        policy.close()
        return
    from jupiter.serve.scheduler import Scheduler, preload
    from jupiter.serve.store import JobStore

    preload()  # the first trees start without importing the search first
    store = JobStore(config.db)
    scheduler = Scheduler.for_server(config, store, _PipeHub(send), policy, value)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=_report_stats, args=(scheduler, policy, send, stop), daemon=True).start()
    send(("ready",))
    try:
        while not stop.is_set():
            try:
                if not conn.poll(0.5):
                    continue
                message = conn.recv()
            except (EOFError, OSError):
                break  # the server is gone: stop the trees, their jobs go back to the queue
            kind = message[0]
            if kind == "submit":
                scheduler.submit(message[1])
            elif kind == "cancel":
                status = scheduler.cancel(message[2])
                send(("reply", message[1], status.value if status is not None else None))
            elif kind == "shutdown":
                break
    finally:
        stop.set()
        scheduler.shutdown()
        store.close()
        policy.close()


def _report_stats(scheduler: Any, policy: Any, send: Callable[[tuple], None], stop: threading.Event) -> None:
    from jupiter.serve.metrics import cache_hit_rate

    while not stop.wait(_STATS_EVERY_S):
        try:
            send(("stats", {"running": scheduler.running, "sandbox_states": scheduler.sandbox_states(),
                            "rates": scheduler.meter.rates(), "failures": dict(scheduler.failures),
                            "cache_hit_rate": cache_hit_rate(policy)}))
        except Exception:  # a sandbox or the policy closing under us: report next time
            log.debug("driver stats failed", exc_info=True)
