"""Start a real ``jupiter serve`` in a subprocess on a free 127.0.0.1 port, talk to it, stop it by PID.

The one server launcher of the tests: used by the fixtures in ``conftest.py`` (``start_server``,
``start_module_server``), which stop every server they started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "jupiter" / "examples"
TITANIC_TASK = EXAMPLES / "titanic_mean_fare.json"
TITANIC_DATA = EXAMPLES / "data" / "test_ave.csv"
TITANIC_REPLAY = EXAMPLES / "titanic_mean_fare.replay.json"


@dataclass
class Server:
    """One server process: ``url``, ``token``, its db and data root; ``stop()`` ends it (SIGTERM, then KILL).

    ``port`` 0 takes a free port; a given port is kept (a restarted server where the clients expect it).
    """

    args: list[str]
    db: Path
    data_root: Path
    log_path: Path
    token: str | None = None
    port: int = 0
    process: subprocess.Popen | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def start(self, timeout: float = 60.0) -> Server:
        self.port = self.port or free_port()
        cmd = [sys.executable, "-m", "jupiter.cli", "serve", "--port", str(self.port), "--db", str(self.db),
               "--data-root", str(self.data_root), *self.args]
        if self.token:
            cmd += ["--token", self.token]
        env = dict(os.environ, PYTHONPATH=str(REPO), **self.extra_env)
        log = open(self.log_path, "ab")
        # own session: kill -9 of the group takes the server and every process it started (a crash)
        self.process = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: {self.log()}")
            try:
                if requests.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return self
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server did not answer in {timeout} s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill9()

    def kill9(self) -> None:
        """SIGKILL the server's whole process group (as a crash would)."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)

    # ------------------------------------------------------------------------------------------ API

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return requests.get(self.url + path, headers=self.headers(), timeout=30, **kwargs)

    def delete(self, path: str) -> requests.Response:
        return requests.delete(self.url + path, headers=self.headers(), timeout=30)

    def submit(self, task: dict | str | Path = TITANIC_TASK, files: list[tuple[str, bytes]] | None = None,
               settings: dict | str | None = None, headers: dict | None = None) -> requests.Response:
        if isinstance(task, Path):
            task = task.read_text()
        elif isinstance(task, dict):
            task = json.dumps(task)
        if files is None:
            files = [(TITANIC_DATA.name, TITANIC_DATA.read_bytes())]
        parts: list[tuple[str, Any]] = [("task", (None, task))]
        parts += [("files", (name, data)) for name, data in files]
        if settings is not None:
            parts.append(("settings", (None, settings if isinstance(settings, str) else json.dumps(settings))))
        return requests.post(self.url + "/v1/tasks", files=parts, timeout=60,
                             headers=self.headers() if headers is None else headers)

    def wait(self, job_id: str, statuses: tuple[str, ...] = ("done", "failed", "cancelled"),
             timeout: float = 90.0, until: Any = None) -> dict:
        """Poll a job until its status is one of ``statuses`` (or ``until(job)`` is true)."""
        deadline = time.monotonic() + timeout
        job: dict = {}
        while time.monotonic() < deadline:
            job = self.get(f"/v1/tasks/{job_id}").json()
            if (until is not None and until(job)) or (until is None and job.get("status") in statuses):
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} did not reach {statuses}: {job}\n{self.log()}")

    def events(self, job_id: str, timeout: float = 90.0, params: dict | None = None,
               headers: dict | None = None) -> Iterator[tuple[str, dict]]:
        """The job's SSE stream as (event type, data) pairs, until the server ends it."""
        with requests.get(self.url + f"/v1/tasks/{job_id}/events", stream=True, timeout=timeout, params=params,
                          headers=self.headers() if headers is None else headers) as response:
            response.raise_for_status()
            assert response.headers["content-type"].startswith("text/event-stream")
            kind, data = None, []
            for line in response.iter_lines(decode_unicode=True):
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif line == "" and kind is not None:
                    yield kind, json.loads("\n".join(data))
                    kind, data = None, []


def write_replay(path: Path, rules: list[dict], default: list[str] | None = None) -> Path:
    path.write_text(json.dumps({"rules": rules, "default": default or ["Thought: nothing to do."]}))
    return path


def sleepy_replay(path: Path, seconds: float = 0.4) -> Path:
    """Every step runs a cell that sleeps ``seconds`` and prints 'tick'; the other sampled reply answers @x[1].

    With expansions 2, every expansion adds one sleeping code node and one answer node, so a job runs about
    ``iterations * seconds`` and ends done with answer @x[1].
    """
    code = f"Thought: wait a little.\nAction:\n```python\nimport time\ntime.sleep({seconds})\nprint('tick')\n```"
    answer = "Thought: done.\nFormatted answer: @x[1]"
    return write_replay(path, [{"match": "Task:", "replies": [code, answer]},
                               {"match": "tick", "replies": [code, answer]}])


SIMPLE_TASK = {"id": "tick-task", "question": "Wait, then answer x.", "format": "@x[value]", "files": []}
