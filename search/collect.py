"""Trajectory collection on Ray: search every task with the paper's collection settings, one tree file each.

    python search/collect.py --tasks nbqa.jsonl --out runs/collect --llm http://127.0.0.1:8000/v1#model=m
    ray job submit --working-dir . -- python search/collect.py --tasks nbqa.jsonl --out /shared/collect --llm ...

Defaults are the paper's collection settings: 50 iterations, depth 10, K = 3 children per expansion,
temperature 1.0, top_p 0.95, c_puct 1.25, rewards ±1 against the label (``--partial-credit`` for shares).
``--dry-run`` prints the cost estimate and starts nothing; ``--check-working-dir DIR`` reports what
``ray job submit --working-dir DIR`` would upload. The output folder is resumable: see ``search.ray_manifest``.
Exit status: 0 when every task finished, 1 when some gave up or errored, 2 on bad arguments, 130 on Ctrl-C.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (``python search/collect.py``): import the repo's packages
    _REPO = str(Path(__file__).resolve().parents[1])
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # search/ itself must not shadow top-level names
    if _REPO not in sys.path:
        sys.path.insert(0, _REPO)

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any, Sequence  # noqa: E402

__all__ = ["COLLECT_DEFAULTS", "CostEstimate", "estimate_cost", "build_config", "main"]

log = logging.getLogger("search.collect")

#: The paper's collection settings (SearchConfig field → value); ``search.profiles`` is their one source.
COLLECT_DEFAULTS: dict[str, Any] = {
    "iterations": 50, "max_depth": 10, "expansions": 3, "temperature": 1.0, "top_p": 0.95, "c_puct": 1.25,
    "partial_credit": False,
}  # tests/ray/test_ray_units.py checks that the paper profile still gives exactly these


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
        from dataclasses import asdict

        return asdict(self)


def estimate_cost(trees: int, skipped: int, config: Any, workers: int, observed_nodes: Sequence[int] = ()) -> CostEstimate:
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="search/collect.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    io = p.add_argument_group("input and output")
    io.add_argument("--tasks", type=Path, help="tasks: NbQA JSONL (with labels), DABench JSONL, a JSON list or one task")
    io.add_argument("--data-dir", type=Path, default=None, help="where relative data-file names resolve first")
    io.add_argument("--labels", type=Path, default=None, help="DABench label JSONL joined to --tasks by id")
    io.add_argument("--out", type=Path, help="output folder (trees/, manifest.jsonl, summary.json); resumable")
    io.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    model = p.add_argument_group("models")
    model.add_argument("--llm", default="default",
                       help="policy spec: http(s)://HOST:PORT/v1#model=NAME, vllm:PATH, hf:PATH, replay:FILE, default")
    model.add_argument("--value-model", type=Path, default=None, help="value-model folder (shared scorer actor)")
    search = p.add_argument_group("search (unset: the profile's collection settings; see --print-config)")
    search.add_argument("--profile", choices=("paper", "v0.1"), default="paper",
                        help="named settings (search.profiles): 'paper' = the seed paper and its reference code")
    search.add_argument("--iterations", type=int, default=None, help="iterations per tree (paper: 50)")
    search.add_argument("--max-depth", type=int, default=None, help="a live node deeper than this is terminal (10)")
    search.add_argument("-k", "--expansions", type=int, default=None, help="samples per expansion (paper: 3)")
    search.add_argument("--temperature", type=float, default=None, help="sampling temperature (paper: 1.0)")
    search.add_argument("--top-p", type=float, default=None, help="nucleus top_p (paper: 0.95)")
    search.add_argument("--c-puct", type=float, default=None, help="PUCT exploration (paper: 1.25)")
    search.add_argument("--max-tokens", type=int, default=None, help="most tokens per reply (1024)")
    search.add_argument("--cell-timeout", type=float, default=None, help="seconds per cell (180)")
    search.add_argument("--print-config", action="store_true", help="print the resolved settings as JSON and exit")
    search.add_argument("--partial-credit", action="store_true", help="reward 2*share-1 instead of ±1")
    search.add_argument("--trees-per-worker", type=int, default=16, help="trees each worker advances together")
    search.add_argument("--seed", type=int, default=0)
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
    return p


#: SearchConfig fields whose flag here differs from ``jupiter solve``'s (error messages name the flag)
_FLAGS = {"max_trees_in_flight": "--trees-per-worker", "partial_credit": "--partial-credit"}


def build_config(args: argparse.Namespace) -> Any:
    """The SearchConfig of a collection from the CLI arguments (COLLECT mode)."""
    from search.config import Mode
    from search.profiles import resolve_profile

    return resolve_profile(
        getattr(args, "profile", "paper"), Mode.COLLECT, iterations=args.iterations, max_depth=args.max_depth,
        expansions=args.expansions, temperature=args.temperature, top_p=args.top_p, c_puct=args.c_puct,
        max_tokens=args.max_tokens, cell_timeout=args.cell_timeout, partial_credit=args.partial_credit,
        max_trees_in_flight=args.trees_per_worker,
    )


def _check_working_dir(args: argparse.Namespace) -> int:
    from search.ray_workdir import DEFAULT_EXCLUDES, check_working_dir

    report = check_working_dir(args.check_working_dir, excludes=DEFAULT_EXCLUDES + tuple(args.exclude or ()))
    print(json.dumps(report.to_dict()))
    print(report.describe(), file=sys.stderr)
    return 1 if report.over_limit else 0


def _dry_run(args: argparse.Namespace, tasks: list, config: Any) -> int:
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
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.check_working_dir is not None:
        try:
            return _check_working_dir(args)
        except NotADirectoryError as exc:
            parser.error(str(exc))
    if args.print_config:
        from search.config import ConfigError

        try:
            print(json.dumps({"profile": args.profile, "config": build_config(args).to_dict()}, indent=2))
        except ConfigError as exc:
            from jupiter.commands.search_args import flag_message

            parser.error(flag_message(str(exc), _FLAGS))
        return 0
    if args.tasks is None or (args.out is None and not args.dry_run):
        parser.error("--tasks and --out are required (or --check-working-dir DIR)")

    from jupiter.task import TaskError, load_tasks
    from search.config import ConfigError

    from jupiter.commands.outputs import check_output_folder
    from jupiter.commands.search_args import flag_message

    try:
        config = build_config(args)
        tasks = load_tasks(args.tasks, data_dir=args.data_dir, labels=args.labels)
        if args.out is not None and not args.dry_run:
            check_output_folder(args.out)  # resumable, but a file or an unwritable place fails before Ray starts
    except (TaskError, ConfigError) as exc:
        parser.error(flag_message(str(exc), _FLAGS))
    if args.limit is not None:
        tasks = tasks[: args.limit]
    unlabeled = [t.id for t in tasks if t.label is None]
    if unlabeled:
        parser.error(f"--tasks {args.tasks}: {len(unlabeled)} task(s) have no label, which collection needs "
                     f"to score answers (first: {unlabeled[0]}); pass --labels for DABench questions")
    if args.dry_run:
        return _dry_run(args, tasks, config)

    from search.ray_driver import RayResources, describe, solve_tasks_ray

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


if __name__ == "__main__":
    sys.exit(main())
