"""``jupiter solve TASK --server URL``: the same solve, run by a ``jupiter serve`` server instead of in-process.

The task and its data files go up through ``jupiter.client``; progress comes back on the job's event stream
(a poll of the job takes over if the stream breaks); the outputs land in ``--out`` with the names a local solve
writes: result.json (the server's result dict), tree.json, solution.ipynb, tree.html. The policy and the value
model are the server's, so ``--llm``, ``--value-model``, ``--profile`` (the server's ``--profile`` applies),
``--ray`` and the settings a server decides for its jobs (``search.settings.LocalSettings`` beyond
``JobSettings``: ``--cell-timeout``) are refused here.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from jupiter.client import Client, ClientError, JobStatus
from jupiter.commands.search_args import FIELD_FLAGS, settings_from_args
from jupiter.output_paths import RunFolderState, check_run_folder, default_run_dir, move_previous_run
from jupiter.task import TaskError, load_task_file, read_setup
from search.profiles import DEFAULT_PROFILE
from search.settings import JobSettings, LocalSettings

__all__ = ["run_remote", "remote_settings"]

log = logging.getLogger(__name__)

def remote_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``settings`` object for the server from the solve arguments: the ``JobSettings`` given (mode and seed
    always; the others only if given: the server's profile decides the rest)."""
    given = settings_from_args(args).model_dump(mode="json", exclude_none=True)
    return {name: value for name, value in given.items() if name in JobSettings.model_fields}


def _refuse_local_only(args: argparse.Namespace) -> None:
    server_decides = [FIELD_FLAGS[name] for name in LocalSettings.model_fields
                      if name not in JobSettings.model_fields and getattr(args, name) is not None]
    given = [flag for flag, bad in (("--llm", args.llm != "default"),
                                    ("--value-model", args.value_model is not None),
                                    ("--profile", args.profile != DEFAULT_PROFILE),
                                    ("--ray", args.ray))
             if bad] + server_decides
    if given:
        raise TaskError(f"{', '.join(given)}: chosen by the server (jupiter serve), not with --server; "
                        "drop them or solve locally")


def _task_dict(args: argparse.Namespace) -> tuple[dict[str, Any], list[Path], str]:
    """The task record as sent (``--setup`` folded in), its data files resolved locally, and its id."""
    task = load_task_file(args.task, data_dir=args.data_dir)  # TaskError names the problem
    record = json.loads(Path(args.task).read_text(encoding="utf-8"))
    if args.setup is not None:
        record["setup"] = read_setup(args.setup)
    return record, list(task.files), task.id


def _follow(client: Any, job_id: str, total: int | None, show: bool) -> dict[str, Any]:
    """Show progress from the event stream until ``done``; then the job JSON (polling if the stream broke)."""
    bar = tqdm(total=total, desc=f"job {job_id}", unit="it", file=sys.stderr, disable=not show)
    try:
        for event in client.events(job_id):
            if event.type == "iteration":
                bar.n = int(event.data.get("iterations", bar.n))
                bar.set_postfix(nodes=event.data.get("nodes"), answers=event.data.get("answers"), refresh=False)
                bar.refresh()
            elif event.type == "status":
                bar.set_description(f"job {job_id} {event.data.get('status', '')}".rstrip())
            elif event.type == "done":
                break
    except ClientError as exc:
        log.warning("event stream of job %s: %s; polling instead", job_id, exc)
    finally:
        bar.close()
    return client.wait(job_id, poll=1.0)


def run_remote(args: argparse.Namespace) -> int:
    """Solve ``args.task`` on ``args.server``; exit code as a local solve's (0 answer, 1 none, 2 error)."""
    _refuse_local_only(args)
    record, files, task_id = _task_dict(args)
    out = default_run_dir(args.out, task_id)
    # as a local solve: a bad --out fails before the job is sent, not after the server has searched
    folder = check_run_folder(out, force=args.force)
    if folder.state is RunFolderState.INTERRUPTED:
        previous = move_previous_run(out)
        print(f"jupiter: {out} holds an interrupted run; starting over, its files are kept in {previous}",
              file=sys.stderr)
    try:
        with Client(args.server, token=args.token) as client:
            job_id = client.submit(record, files, remote_settings(args))
            print(f"submitted {task_id} as job {job_id} to {args.server}", file=sys.stderr)
            job = _follow(client, job_id, args.iterations, show=not args.no_progress)
            status = JobStatus(job["status"])
            out.mkdir(parents=True, exist_ok=True)
            result = dict(job.get("result") or {}, server=args.server, job_id=job_id)
            if status is JobStatus.DONE:
                (out / "result.json").write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str)
                                                 + "\n", encoding="utf-8")
                for name in ("tree.json", "solution.ipynb", "tree.html"):
                    client.download(job_id, name, out / name)
    except ClientError as exc:
        hint = " (the server needs --token)" if exc.status == 401 and not args.token else ""
        print(f"jupiter: error: {exc}{hint}", file=sys.stderr)
        return 2
    if status is not JobStatus.DONE:
        print(f"jupiter: error: job {job_id} {status.value}: {job.get('error') or 'no details'}", file=sys.stderr)
        return 2
    answer = result.get("answer")
    print(answer if answer is not None else "no answer found")
    print(f"wrote {out}", file=sys.stderr)
    return 0 if answer is not None else 1
