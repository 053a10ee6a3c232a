"""``jupiter solve TASK.json``: search one task and write result.json, tree.json, solution.ipynb, tree.html.

Defaults are the paper's inference settings (mode ``infer``). With ``--value-model`` the search is
value-guided (c_puct 0 unless given); without one, ``infer`` falls back to PUCT with c_puct 1.25 and
log-prob (or uniform) priors, and says so in result.json. With no ``--llm`` the embedded default model runs
on the CPU: keep ``--iterations``/``--expansions``/``--max-tokens`` small there.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupiter import console_log
from jupiter.commands.helpformat import HelpFormatter
from jupiter.commands.interrupts import EXIT_INTERRUPTED, StopSignals
from jupiter.commands.search_args import (
    add_checkpoint_argument,
    add_search_arguments,
    add_value_dtype_argument,
    add_value_model_argument,
    config_from_args,
    print_config,
)
from jupiter.llm import PolicyError, load_policy
from jupiter.llm.spec import PolicyChoice, describe_policy
from jupiter.output_paths import (
    RunFolderState,
    check_output_folder,
    check_run_folder,
    default_run_dir,
    move_previous_run,
)
from jupiter.task import TaskError, load_task_file, load_tasks, read_setup
from sandbox import Sandbox
from search import Mode
from search.checkpoints import CHECKPOINTS, SavedSearch, TreeCheckpoints
from search.config import fit_context
from search.loaders import load_value, sandbox_config
from search.outputs import write_outputs
from search.resumable import search_trees

__all__ = ["add_parser", "run", "solve_local", "solve_on_ray"]

log = logging.getLogger(__name__)

MODES = ("infer", "collect", "react", "vote")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "solve",
        help="solve one task by tree search and write the tree, a notebook and a result",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("task", type=Path,
                        help="task JSON (our layout, NbQA, DABench or AIME); with --ray, a file of many tasks "
                             "(JSONL or a JSON list)")
    parser.add_argument("--llm", default="default",
                        help="policy spec: default | replay:FILE.json | http://HOST:PORT/v1#model=NAME | "
                             "vllm:PATH | hf:PATH (default: the embedded model)")
    add_value_model_argument(parser)
    add_value_dtype_argument(parser)
    add_search_arguments(parser, MODES)
    parser.add_argument("--data-dir", type=Path, default=None, help="folder holding the task's data files")
    parser.add_argument("--setup", type=Path, default=None, metavar="FILE.py",
                        help="a setup cell (imports, data loading) run once in the root state of every task; "
                             "replaces a task's own 'setup'")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default runs/<task id>-<time>)")
    parser.add_argument("--force", action="store_true",
                        help="write into an --out that already holds a finished run (its files are replaced)")
    add_checkpoint_argument(parser, "OUT/checkpoints/")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    remote = parser.add_argument_group("solving on a server (jupiter serve)")
    remote.add_argument("--server", default=None, metavar="URL",
                        help="submit to this jupiter serve server (http://HOST:PORT) and download its outputs "
                             "into --out; the server's policy and value model are used")
    remote.add_argument("--token", default=None, help="the server's access token (with --server)")
    batch = parser.add_argument_group("batch solving on Ray")
    batch.add_argument("--ray", action="store_true",
                       help="solve every task of TASK (a JSONL/JSON list) on Ray; writes OUT/trees/, "
                            "OUT/manifest.jsonl, OUT/summary.json; a rerun skips finished ids")
    batch.add_argument("--ray-address", default=None,
                       help="Ray cluster address (default: $RAY_ADDRESS, else a private local Ray)")
    batch.add_argument("--labels", type=Path, default=None, help="DABench label JSONL joined to the tasks by id")
    batch.add_argument("--workers", type=int, default=None, help="tree workers (default: what the cluster fits)")
    parser.set_defaults(handler=run, quiet_console=True)
    return parser


def _fail(message: str) -> int:
    print(f"jupiter: error: {message}", file=sys.stderr)
    return 2


def _config(args: argparse.Namespace, has_value: bool) -> tuple[Any, list[str]]:
    """The search settings (profile + flags) and notes for result.json on what they mean for this run."""
    config = config_from_args(args)
    notes: list[str] = [f"profile {args.profile}"]
    if config.mode is Mode.INFER:
        guide = "value-model estimates" if has_value else "failures only (-1; no value model)"
        notes.append(f"infer: c_puct {config.c_puct}, selection guided by {guide}; "
                     f"answer by {config.decision.value}")
    return config, notes


def _with_setup(task: Any, setup: Path | None) -> Any:
    """``task`` with the ``--setup`` file's code as its setup cell (unchanged without ``--setup``)."""
    return task if setup is None else task.replace(setup=read_setup(setup))


def solve_on_ray(args: argparse.Namespace) -> int:
    """``--ray``: every task of the file on Ray (the machinery of ``search/collect.py``); a rerun resumes.

    parse the tasks → settings → Ray (its workers load the policy and the value model) → summary.
    """
    from search.ray_driver import solve_tasks_ray

    config, notes = _config(args, args.value_model is not None)
    if args.print_config:
        print_config(args, config)
        return 0
    if args.out is not None:
        check_output_folder(args.out)  # resumable: earlier trees stay, but it must be a writable folder
    args.interrupted_note = "finished trees are saved in the output folder; rerun the same command to resume"
    tasks = [_with_setup(t, args.setup) for t in load_tasks(args.task, data_dir=args.data_dir, labels=args.labels)]
    if config.mode is Mode.COLLECT:
        unlabeled = [t.id for t in tasks if t.label is None]
        if unlabeled:
            raise TaskError(f"{args.task}: --mode collect needs labels; no label for {', '.join(unlabeled[:5])}")
    if args.value_model is not None and not args.value_model.is_dir():  # the workers load it: say so now
        raise TaskError(f"--value-model {args.value_model}: folder not found")
    out = args.out or Path("runs") / f"batch-{time.strftime('%Y%m%d-%H%M%S')}"
    summary = solve_tasks_ray(tasks, args.llm, config, out, value_model=args.value_model,
                              address=args.ray_address or os.environ.get("RAY_ADDRESS"),
                              workers=args.workers, seed=args.seed, progress=not args.no_progress,
                              checkpoint_every_s=args.checkpoint_every)
    for note in notes:
        log.info(note)
    print(json.dumps(summary.to_dict(), default=str))
    print(f"wrote {out}", file=sys.stderr)
    if summary.tree_errors or summary.gave_up:
        print(f"jupiter: error: {_ray_failure_line(out, [t.id for t in tasks], args.llm)}", file=sys.stderr)
        return 1
    return 0


def _ray_failure_line(out: Path, task_ids: list[str], llm: str) -> str:
    """One line for a Ray batch in which trees failed: how many, the backend, the first failure's cause, and
    where the record is (``manifest.jsonl``: every attempt's status and error; a rerun retries them)."""
    from search.ray_manifest import Manifest, TaskStatus  # Ray's run record: a local solve never loads it

    manifest = Manifest(out)
    latest = manifest.latest()
    failed = [latest[i] for i in task_ids if i in latest and latest[i].status is not TaskStatus.OK]
    unfinished = [i for i in task_ids if i not in latest or latest[i].status is not TaskStatus.OK]
    first = failed[0] if failed else None
    cause = "unknown"
    if first is not None:
        reason = " ".join(str(first.error or "").split())[:400]
        cause = f"{first.task_id}: {first.status.value}" + (f" ({first.cause.value})" if first.cause else "") + \
            (f": {reason}" if reason else "")
    return (f"{len(unfinished)} of {len(task_ids)} task(s) did not finish on Ray (--llm {llm}); first: {cause}; "
            f"recorded in {manifest.path}; rerun the same command to retry them")


def run(args: argparse.Namespace) -> int:
    """The ``solve`` command: on a server (``--server``), on Ray (``--ray``) or here — three separate paths."""
    if args.server:
        from jupiter.commands.solve_remote import run_remote

        return run_remote(args)
    return solve_on_ray(args) if args.ray else solve_local(args)


def solve_local(args: argparse.Namespace) -> int:
    """One task in this process: parse → settings → policy → search → write, then the exit code."""
    if args.print_config:
        print_config(args, _config(args, args.value_model is not None)[0])
        return 0
    task = _with_setup(load_task_file(args.task, data_dir=args.data_dir), args.setup)
    out = default_run_dir(args.out, task.id)
    folder = check_run_folder(out, force=args.force)  # before any model loads: a bad --out fails at once
    console_log.log_to(out)  # other programs' output ends in OUT/jupiter.log
    value = load_value(args.value_model, dtype=args.value_dtype)
    config, notes = _config(args, value is not None)
    if config.mode is Mode.COLLECT and task.label is None:
        raise TaskError(f"{args.task}: --mode collect needs a task with a label")
    try:
        policy = load_policy(args.llm)
    except PolicyError as exc:
        return _fail(f"--llm: {exc}")
    llm_backend = describe_policy(policy)  # which backend `default` picked, and why
    print(PolicyChoice(**llm_backend).line(), file=sys.stderr)
    config = fit_context(config, policy.context_window)  # a path ends before the engine's window
    checkpoints = TreeCheckpoints(out / CHECKPOINTS, args.checkpoint_every, settings=config.to_dict())
    saved = None
    if folder.state is RunFolderState.INTERRUPTED:
        saved = checkpoints.load(task)
        previous = move_previous_run(out)
        if saved is None:
            print(f"jupiter: {out} holds an interrupted run with no tree to continue (or one grown with other "
                  f"settings); starting over, its files are kept in {previous}", file=sys.stderr)
        else:
            print(f"jupiter: {out} holds an interrupted run; continuing its tree ({len(saved.tree.nodes)} nodes, "
                  f"{saved.stats.iterations} of {config.iterations} iterations, saved {saved.saved_at}); its files "
                  f"are kept in {previous}", file=sys.stderr)
    try:
        run = _search_and_write(task, policy, value, config, args, out, notes,
                                {"llm": args.llm, "llm_backend": llm_backend}, checkpoints, saved)
    finally:
        policy.close()
    return _exit_code(run, task.id, out)


@dataclass
class _LocalRun:
    """How a local search ended: its result (None when the policy failed before any step finished), the
    policy failure that ended it, and whether a stop was asked for."""

    result: Any
    failure: str | None
    stopped: bool


def _search_and_write(task: Any, policy: Any, value: Any, config: Any, args: argparse.Namespace, out: Path,
                      notes: list[str], extra: dict[str, Any], checkpoints: TreeCheckpoints,
                      saved: SavedSearch | None = None) -> _LocalRun:
    """Search ``task`` in a fresh sandbox (continuing ``saved``), with a progress bar and Ctrl-C handling, and
    write its files into ``out`` (also the tree so far when the policy fails or a stop comes outside a step).

    The tree is checkpointed as it grows (``checkpoints``, removed once its files are written:
    ``search.resumable``) so that a rerun after a kill, even SIGKILL, continues it."""
    from tqdm import tqdm

    bar = tqdm(total=config.iterations, initial=saved.stats.iterations if saved else 0, desc=f"solve {task.id}",
               unit="it", file=sys.stderr, disable=args.no_progress)

    def progress(step: Any) -> None:
        bar.n = step.iterations
        bar.refresh()

    result: Any = None
    failure: str | None = None
    policy_name = f"{extra['llm_backend'].get('backend', '?')} (--llm {args.llm})"
    closers: list[threading.Thread] = []  # a second Ctrl-C's sandbox close: waited for before exiting
    with StopSignals("the search") as signals:
        try:
            with Sandbox(sandbox_config(config)) as sandbox:
                bar.write(sandbox.describe(), file=sys.stderr)  # the isolation in use, as the llm line names the model
                # a second Ctrl-C ends the running cells' processes (their step is dropped), so the driver
                # need not wait for them; closing on its own thread, as the handler may interrupt a lock holder
                def close_now() -> None:
                    closers.append(threading.Thread(target=sandbox.close, daemon=True))
                    closers[-1].start()

                signals.at_once = close_now
                # the run layer checkpoints the tree, continues ``saved`` and hands back what the tree had when
                # the policy fails or a Ctrl-C comes between steps (then raises): each result is written here
                # before the checkpoint it replaces is removed
                try:
                    for result in search_trees([task], policy, lambda: sandbox, config, value, seed=args.seed,
                                               checkpoints=checkpoints, resume=lambda _task: saved,
                                               on_step=progress, stop=signals.stop, close_sandboxes=False,
                                               policy_name=policy_name):
                        signals.writing = True
                        result.notes.extend(notes)
                        write_outputs(result, out, dict(extra, policy_stats=policy.stats().to_dict()))
                except PolicyError as exc:  # the tree so far (if any) is written above
                    failure = result.error if result is not None else f"the policy failed: {policy_name}: {exc}"
                except KeyboardInterrupt:
                    if result is None:
                        raise
        finally:
            bar.close()
            for closer in closers:  # no runtime process may outlive us
                closer.join(timeout=60)
    return _LocalRun(result, failure, signals.requested)


def _exit_code(run: _LocalRun, task_id: str, out: Path) -> int:
    """Say how the local run ended (the answer on stdout, the rest on stderr) and return the exit code."""
    if run.result is None:
        return _fail(str(run.failure))
    if run.failure is not None:
        return _fail(f"{run.failure}; the tree so far is in {out}")
    result = run.result
    if result.interrupted or run.stopped:
        print(result.answer if result.answer is not None else "no answer found")
        print(f"jupiter: interrupted; wrote the tree so far and the best answer so far to {out} (result.json has "
              "\"interrupted\": true). A rerun with the same --out continues the search from its checkpoint and "
              "keeps these files in previous-<time>/", file=sys.stderr)
        return EXIT_INTERRUPTED
    if result.error:
        return _fail(f"{task_id}: {result.error}")
    print(result.answer if result.answer is not None else "no answer found")
    print(f"wrote {out}", file=sys.stderr)
    return 0 if result.answer is not None else 1
