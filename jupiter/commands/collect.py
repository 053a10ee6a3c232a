"""Trajectory collection on Ray: the command line of ``search/collect.py`` and what it runs.

Every task is searched with the profile's collection settings (the paper's: ``search.profiles``), one tree file
each, resumably (``search.ray_manifest``). The search flags are ``search.settings``' (the same as ``jupiter
solve``'s); ``--trees-per-worker`` and ``--partial-credit`` are collection's own. ``--dry-run`` prints the cost
estimate and starts nothing; ``--check-working-dir DIR`` reports what ``ray job submit --working-dir DIR``
would upload. Exit status: 0 when every task finished, 1 when some gave up or errored, 2 on bad arguments,
130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupiter.commands.search_args import add_search_arguments, flag_message, settings_given
from jupiter.output_paths import check_output_folder
from jupiter.task import Task, TaskError, load_tasks
from search.config import ConfigError, Mode, SearchConfig
from search.settings import resolve_settings

__all__ = ["CostEstimate", "estimate_cost", "build_config", "collect_parser", "main"]

log = logging.getLogger("search.collect")

#: the search settings collection takes as flags (its mode is fixed; the answer decision does not apply)
_SEARCH_FLAGS = ("iterations", "max_depth", "expansions", "temperature", "top_p", "c_puct", "max_tokens",
                 "cell_timeout")
#: SearchConfig fields whose flag here differs from ``jupiter solve``'s (error messages name the flag)
_FLAGS = {"max_trees_in_flight": "--trees-per-worker", "partial_credit": "--partial-credit"}


@dataclass(frozen=True)
class CostEstimate:
    """What a collection will cost, before it starts.

    Upper bounds assume every iteration expands a node into K children; ``expected_nodes`` uses the mean
    nodes per tree already recorded in the output folder's manifest when there is one (a resumed run), else
    the upper bound. ``policy_requests`` are histories sent to the model (one per expansion, n = K each);
    ``batched_calls`` are the engine's model calls when each of ``workers`` workers advances
    ``trees_per_worker`` trees together.
    """

    trees: int
    skipped: int
    iterations: int
    expansions: int
    max_nodes_per_tree: int
    max_nodes: int
    expected_nodes: int
    expected_from: str
    policy_requests: int
    completions: int
    max_completion_tokens: int
    batched_calls: int
    workers: int
    trees_per_worker: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_cost(trees: int, skipped: int, config: SearchConfig, workers: int,
                  observed_nodes: Sequence[int] = ()) -> CostEstimate:
    """The dry-run estimate for ``trees`` trees under ``config`` on ``workers`` workers (pure arithmetic)."""
    per_tree = 1 + config.iterations * config.expansions
    if observed_nodes:
        mean = sum(observed_nodes) / len(observed_nodes)
        expected, source = int(round(mean * trees)), f"mean of {len(observed_nodes)} finished tree(s)"
    else:
        expected, source = per_tree * trees, "upper bound"
    requests = trees * config.iterations
    completions = requests * config.expansions
    rounds = math.ceil(trees / max(1, workers * config.max_trees_in_flight)) if trees else 0
    return CostEstimate(
        trees=trees, skipped=skipped, iterations=config.iterations, expansions=config.expansions,
        max_nodes_per_tree=per_tree, max_nodes=per_tree * trees, expected_nodes=expected, expected_from=source,
        policy_requests=requests, completions=completions, max_completion_tokens=completions * config.max_tokens,
        batched_calls=rounds * config.iterations * max(1, min(workers, trees)), workers=workers,
        trees_per_worker=config.max_trees_in_flight,
    )


def collect_parser() -> argparse.ArgumentParser:
    """The arguments of ``search/collect.py``."""
    p = argparse.ArgumentParser(prog="search/collect.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    io = p.add_argument_group("input and output")
    io.add_argument("--tasks", type=Path,
                    help="tasks: NbQA JSONL (with labels), DABench JSONL, a JSON list or one task")
    io.add_argument("--data-dir", type=Path, default=None, help="where relative data-file names resolve first")
    io.add_argument("--labels", type=Path, default=None, help="DABench label JSONL joined to --tasks by id")
    io.add_argument("--out", type=Path, help="output folder (trees/, manifest.jsonl, summary.json); resumable")
    io.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    model = p.add_argument_group("models")
    model.add_argument("--llm", default="default",
                       help="policy spec: http(s)://HOST:PORT/v1#model=NAME, vllm:PATH, hf:PATH, replay:FILE, default")
    model.add_argument("--value-model", type=Path, default=None, help="value-model folder (shared scorer actor)")
    add_search_arguments(p, modes=(Mode.COLLECT.value,), with_mode=False, fields=_SEARCH_FLAGS,
                         aliases={"expansions": "-k"},
                         title="search (unset: the profile's collection settings; see --print-config)")
    search = p.add_argument_group("collection")
    search.add_argument("--partial-credit", action="store_true", help="reward 2*share-1 instead of ±1")
    search.add_argument("--trees-per-worker", type=int, default=16, help="trees each worker advances together")
    ray = p.add_argument_group("ray")
    ray.add_argument("--ray-address", default=None, help="cluster address (default: $RAY_ADDRESS, else a local Ray)")
    ray.add_argument("--ray-temp-dir", type=Path, default=None,
                     help="temp dir of a local Ray started here (default Ray's /tmp/ray)")
    ray.add_argument("--workers", type=int, default=None, help="tree workers (default: what the cluster fits)")
    ray.add_argument("--worker-cpus", type=float, default=1.0)
    ray.add_argument("--worker-memory-mb", type=int, default=2048)
    ray.add_argument("--policy-memory-mb", type=int, default=6144)
    ray.add_argument("--max-retries", type=int, default=2, help="retries of a task whose worker died")
    run = p.add_argument_group("run")
    run.add_argument("--dry-run", action="store_true", help="print the cost estimate (JSON) and exit")
    run.add_argument("--check-working-dir", type=Path, default=None, metavar="DIR",
                     help="report the upload size of DIR for `ray job submit --working-dir` and exit")
    run.add_argument("--exclude", action="append", default=None,
                     help="extra exclude pattern for --check-working-dir (repeatable)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--log-level", default="INFO")
    p.set_defaults(mode=Mode.COLLECT.value)
    return p


def build_config(args: argparse.Namespace) -> SearchConfig:
    """The SearchConfig of a collection from its arguments (COLLECT mode). Raises ``ConfigError`` naming the
    setting (``_flag_error`` turns it into the flag)."""
    return resolve_settings(settings_given(args), args.profile, max_trees_in_flight=args.trees_per_worker,
                            partial_credit=args.partial_credit or None)


def _flag_error(exc: Exception) -> str:
    return flag_message(str(exc), _FLAGS, owners=("SearchConfig", "settings"))


def _check_working_dir(args: argparse.Namespace) -> int:
    from search.ray_workdir import DEFAULT_EXCLUDES, check_working_dir

    report = check_working_dir(args.check_working_dir, excludes=DEFAULT_EXCLUDES + tuple(args.exclude or ()))
    print(json.dumps(report.to_dict()))
    print(report.describe(), file=sys.stderr)
    return 1 if report.over_limit else 0


def _dry_run(args: argparse.Namespace, tasks: list[Task], config: SearchConfig) -> int:
    from search.ray_manifest import Manifest, TaskStatus

    latest = Manifest(args.out).latest() if args.out else {}
    done = {i for i, r in latest.items() if r.status is TaskStatus.OK}
    todo = [t for t in tasks if t.id not in done]
    observed = [r.nodes for r in latest.values() if r.status is TaskStatus.OK and r.nodes]
    workers = args.workers or 1
    estimate = estimate_cost(len(todo), len(tasks) - len(todo), config, workers, observed)
    print(json.dumps({"dry_run": estimate.to_dict(), "config": config.to_dict(), "llm": args.llm}))
    print(f"dry run: {estimate.trees} tree(s) to collect ({estimate.skipped} already done); up to "
          f"{estimate.max_nodes} nodes, expected {estimate.expected_nodes} ({estimate.expected_from}); "
          f"{estimate.policy_requests} policy requests × K={estimate.expansions}; up to "
          f"{estimate.max_completion_tokens} completion tokens" + ("" if args.workers else
                                                                    " (pass --workers for batched-call counts)"),
          file=sys.stderr)
    return 0


def _local_ray_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """ray.init options for a local Ray started by this command (ignored when joining a cluster)."""
    if args.ray_temp_dir is None or args.ray_address or os.environ.get("RAY_ADDRESS"):
        return None
    return {"_temp_dir": str(args.ray_temp_dir.expanduser().resolve())}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``search/collect.py`` with ``argv``; returns its exit status (argument errors exit 2 via argparse)."""
    parser = collect_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.check_working_dir is not None:
        try:
            return _check_working_dir(args)
        except NotADirectoryError as exc:
            parser.error(str(exc))
    try:
        config = build_config(args)
    except ConfigError as exc:
        parser.error(_flag_error(exc))
    if args.print_config:
        print(json.dumps({"profile": args.profile, "config": config.to_dict()}, indent=2))
        return 0
    if args.tasks is None or (args.out is None and not args.dry_run):
        parser.error("--tasks and --out are required (or --check-working-dir DIR)")
    try:
        tasks = load_tasks(args.tasks, data_dir=args.data_dir, labels=args.labels)
    except TaskError as exc:
        parser.error(str(exc))
    if args.limit is not None:
        tasks = tasks[: args.limit]
    unlabeled = [t.id for t in tasks if t.label is None]
    if unlabeled:
        parser.error(f"--tasks {args.tasks}: {len(unlabeled)} task(s) have no label, which collection needs "
                     f"to score answers (first: {unlabeled[0]}); pass --labels for DABench questions")
    if args.dry_run:
        return _dry_run(args, tasks, config)
    try:
        check_output_folder(args.out)  # resumable; a file or an unwritable place fails before Ray starts
    except TaskError as exc:
        parser.error(str(exc))

    from search.ray_driver import RayResources, describe, solve_tasks_ray  # imports Ray: only for a real run

    resources = RayResources(worker_cpus=args.worker_cpus, worker_memory_mb=args.worker_memory_mb,
                             policy_memory_mb=args.policy_memory_mb)
    try:
        summary = solve_tasks_ray(tasks, args.llm, config, args.out, value_model=args.value_model,
                                  address=args.ray_address, workers=args.workers, max_retries=args.max_retries,
                                  seed=args.seed, resources=resources, progress=not args.no_progress,
                                  ray_init=_local_ray_options(args))
    except KeyboardInterrupt:
        print(f"interrupted: rerun the same command to resume from {args.out}", file=sys.stderr)
        return 130
    print(json.dumps({"summary": summary.to_dict()}))
    print(describe(summary), file=sys.stderr)
    return 0 if summary.gave_up == 0 and summary.tree_errors == 0 else 1
