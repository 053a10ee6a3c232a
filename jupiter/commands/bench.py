"""``jupiter bench``: run DABench, AIME 2025 or DSBench data modeling, rebuild a run's report, compare runs.

    jupiter bench dabench [--data DIR] [--llm SPEC] [--value-model DIR] [--mode infer|collect|react|vote]
                          [--limit N] [--ids ID ...] [--out DIR] [--ray]
    jupiter bench aime    [--data DIR] ...
    jupiter bench dsbench --data DSBENCH_ROOT [--tasks NAME ...] [--no-simplify] ...
    jupiter bench report  RUN_DIR            (rebuild summary.{json,md} and plots from results.jsonl)
    jupiter bench compare RUN_DIR RUN_DIR ... [--plot FILE]
    jupiter bench compare --equal-tokens RUN_DIR ... [--plot FILE] (DABench arms at equal generated tokens)
    jupiter bench revote  RUN_DIR ... (decide again under each vote key: --vote-key exact | format)

A run folder is resumable: rerunning the same command skips the tasks already in ``results.jsonl``.
When the policy backend dies mid-run the command prints one line naming the backend and the cause, exits
with 1, and leaves ``failure.json`` (what finished, what did not, the error) beside a report that says the
run failed; rerunning the same command searches the unfinished tasks.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.paths import default_data_dir
from jupiter import console_log
from jupiter.commands.helpformat import HelpFormatter
from jupiter.commands.search_args import (
    add_checkpoint_argument,
    add_search_arguments,
    add_value_dtype_argument,
    add_value_model_argument,
    config_from_args,
    print_config,
)
from jupiter.llm import PolicyError, load_policy
from jupiter.llm.base import BasePolicy
from jupiter.output_paths import check_output_file, check_output_folder
from jupiter.task import TaskError
from search import ConfigError
from search.loaders import load_value

__all__ = ["add_parser"]

log = logging.getLogger(__name__)

BENCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "dabench": {},
    "aime": {},
    "dsbench": {"iterations": 50, "max_depth": 25},
}


def _common(parser: argparse.ArgumentParser, benchmark: str) -> None:
    parser.add_argument("--data", type=Path, help="benchmark folder (default: the shared copy beside the checkout)")
    parser.add_argument("--llm", default="default",
                        help="policy spec: default | replay:FILE.json | http://HOST:PORT/v1#model=NAME | vllm:DIR | "
                             "hf:DIR")
    add_value_model_argument(parser)
    add_value_dtype_argument(parser)
    add_search_arguments(parser)
    parser.set_defaults(bench_defaults=BENCH_DEFAULTS[benchmark])
    parser.add_argument("--concurrency", type=int, help="trees searched together (one batched model call per step)")
    parser.add_argument("--limit", type=int, help="only the first N tasks")
    parser.add_argument("--ids", nargs="+", help="only these task ids")
    parser.add_argument("--out", type=Path, help="run folder (default: runs/<benchmark>-<mode>-<time>)")
    parser.add_argument("--ray", action="store_true", help="run the trees on Ray (search.ray_driver)")
    parser.add_argument("--no-trees", action="store_true", help="do not save trees/<id>.json")
    add_checkpoint_argument(parser, "checkpoints/<id>.json")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark (DABench, AIME 2025, DSBench) or compare runs",
                                   description=__doc__, formatter_class=HelpFormatter)
    inner = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    resumable = ("finished tasks are saved in the run folder's results.jsonl and the trees in flight in checkpoints/; "
                 "rerun the same command to resume")
    runners = (("dabench", "InfiAgent-DABench closed-form questions: ABQ / PASQ / UASQ", run_dabench_command),
               ("aime", "AIME 2025 with the tool-use prompt: OR and Vote accuracy", run_aime_command),
               ("dsbench", "DSBench data modeling: task success and RPG", run_dsbench_command))
    runner_parsers: dict[str, argparse.ArgumentParser] = {}
    for name, help_text, handler in runners:
        runner = runner_parsers[name] = inner.add_parser(name, help=help_text, formatter_class=HelpFormatter)
        runner.set_defaults(handler=handler, interrupted_note=resumable, quiet_console=True)
        _common(runner, name)
    ds = runner_parsers["dsbench"]
    ds.add_argument("--tasks", nargs="+", help="task names (default: every task of tasks.json present under --data)")
    ds.add_argument("--tasks-json", type=Path, help="scoring metadata (default: the shared dsbench/tasks.json)")
    ds.add_argument("--no-simplify", action="store_true", help="search on the full competition text")
    report = inner.add_parser("report", help="rebuild a run's summary and plots from its results.jsonl",
                              formatter_class=HelpFormatter)
    report.add_argument("run", type=Path)
    report.set_defaults(handler=report_command)
    compare = inner.add_parser("compare", help="print a table of several runs' headline figures, or compare "
                                               "DABench runs at equal generated tokens (--equal-tokens)",
                               formatter_class=HelpFormatter)
    compare.add_argument("runs", nargs="+", type=Path)
    compare.add_argument("--plot", type=Path, help="also plot every run's accuracy-vs-iterations curves here "
                                                   "(--equal-tokens: ABQ against generated tokens)")
    compare.add_argument("--json", action="store_true", help="print JSON instead of a table")
    compare.add_argument("--equal-tokens", action="store_true",
                         help="DABench runs side by side at equal generated tokens (a tree run as if stopped after "
                              "each iteration, a vote run with its first k paths), with each run's failures "
                              "(format-valid replies, wrong logic, code errors by type) read from its trees")
    compare.add_argument("--data", type=Path, default=None,
                         help="with --equal-tokens: the DABench folder (default: the shared data)")
    compare.add_argument("--tokenizer", type=Path, default=None,
                         help="with --equal-tokens: the policy's tokenizer folder (default: the embedded model's, "
                              "which the fine-tuned default shares)")
    compare.set_defaults(handler=compare_command)
    revote = inner.add_parser("revote", help="decide DABench runs again under each vote key (--vote-key)",
                              formatter_class=HelpFormatter)
    revote.add_argument("runs", nargs="+", type=Path)
    revote.add_argument("--data", type=Path, default=None, help="the DABench folder (default: the shared data)")
    revote.add_argument("--json", action="store_true", help="print one JSON object per run")
    revote.set_defaults(handler=revote_command)
    parser.set_defaults(handler=lambda args: parser.print_help() or 2)


# --------------------------------------------------------------------------------------------- helpers


def _config(args: argparse.Namespace) -> Any:
    """The profile's settings for the mode (the paper's by default), the benchmark's own budget where the
    profile has none for it (DSBench: 50 iterations, depth 25), then the flags."""
    extra: dict[str, Any] = {"max_trees_in_flight": args.concurrency}
    for name, value in getattr(args, "bench_defaults", {}).items():
        if getattr(args, name, None) is None:
            extra[name] = value
    return config_from_args(args, **extra)


def _fit_context(config: Any, policy: BasePolicy) -> Any:
    """Cap the search's context budget at the policy's window when it has one (in-process vLLM: its
    ``max_model_len``). Why: a history longer than the engine's window fails the whole batched call, so a
    path must end (``context_limit``) before it gets there; the policy's ``count_tokens`` measures it."""
    from search.config import fit_context

    fitted = fit_context(config, policy.context_window)
    if fitted is not config:
        log.info("context_limit %d -> %d: the policy's context window", config.context_limit, fitted.context_limit)
    return fitted


def _out_dir(args: argparse.Namespace, benchmark: str) -> Path:
    if args.out is not None:
        return args.out
    return Path("runs") / f"{benchmark}-{args.mode}-{time.strftime('%Y%m%d-%H%M%S')}"


def _run_info(args: argparse.Namespace, benchmark: str, config: Any, data: Path | None) -> dict[str, Any]:
    return {
        "benchmark": benchmark,
        "llm": args.llm,
        "value_model": str(args.value_model) if args.value_model else None,
        "value_dtype": args.value_dtype if args.value_model else None,
        "mode": args.mode,
        "profile": args.profile,
        "data": str(data) if data else None,
        "config": config.to_dict(),
        "ray": bool(args.ray),
        "seed": args.seed,
        "ids": list(args.ids) if args.ids else None,
        "limit": args.limit,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _options(args: argparse.Namespace, out_dir: Path) -> Any:
    from benchmarks.runner import RunOptions

    return RunOptions(out_dir=out_dir, seed=args.seed, progress=not args.no_progress,
                      save_trees=not args.no_trees and not args.ray, ray=args.ray,
                      checkpoint_every_s=args.checkpoint_every)


def _failed(args: argparse.Namespace, out_dir: Path, exc: Exception, task_ids: list[str], policy: Any,
            report: Any) -> int:
    """The run died (``exc``): record it in ``failure.json``, rebuild the report over what finished, say it
    in one line naming the backend and the cause, and exit 1. The traceback is in ``failure.json`` (and in
    the log with ``-v``)."""
    from benchmarks.runner import describe_backend, record_failure

    log.debug("the run failed", exc_info=exc)
    failure, path = record_failure(out_dir, exc, task_ids, describe_backend(policy, args.llm))
    try:
        report()
    except Exception:  # the failure line matters more than the report
        log.exception("%s: could not rebuild the report", out_dir)
    print(f"jupiter bench: error: {failure.line(path)}", file=sys.stderr)
    log_file = console_log.log_path()
    if log_file is not None:
        print(f"jupiter bench: what the backend and other programs printed: {log_file}", file=sys.stderr)
    return 1


def _print_result(out_dir: Path, outcome: Any, summary: dict[str, Any]) -> None:
    from benchmarks.report import format_table, headline

    pairs = headline(summary)
    print(format_table([t for t, _ in pairs], [[_short(v) for _, v in pairs]]))
    continued = f" ({outcome.continued} continued from a checkpoint)" if outcome.continued else ""
    print(f"ran {outcome.ran} task(s){continued}, skipped {outcome.skipped} already done, {outcome.failed} with "
          f"errors; report: {out_dir / 'summary.md'}")


def _short(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _run(args: argparse.Namespace, benchmark: str, data: Path | None, task_ids: list[str], search: Any,
         report: Any, info: dict[str, Any] | None = None) -> int:
    """A benchmark run, the same for each benchmark: config, policy, value model, run.json, the search, the
    report, errors → exit codes. ``search(policy, config, options, value, solver)`` searches the benchmark's
    tasks and returns the run's outcome; ``report(out_dir, brief)`` rebuilds the summary from results.jsonl."""
    from benchmarks.runner import RayUnavailableError, solver_for, write_run_info

    try:
        config = _config(args)
    except (ConfigError, ValueError) as exc:
        print(f"jupiter bench: error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print_config(args, config)
        return 0
    out_dir = check_output_folder(_out_dir(args, benchmark))  # resumable, but it must be a writable folder
    console_log.log_to(out_dir)  # other programs' output (vLLM's hints, warnings) ends in OUT/jupiter.log
    # DSBench scores each answer node's submission file: on Ray the workers read it from their sandboxes.
    ray_options: dict[str, Any] = {"checkpoint_every_s": args.checkpoint_every}
    if args.ray and benchmark == "dsbench":
        ray_options["capture_file"] = "submission.csv"
    try:
        solver = solver_for(args.ray, args.llm, args.value_model, out_dir / "ray", **ray_options)
    except RayUnavailableError as exc:
        print(f"jupiter bench: error: {exc}", file=sys.stderr)
        return 2
    info = {**_run_info(args, benchmark, config, data), **(info or {})}
    rebuild = lambda: report(out_dir, _run_brief(info))  # noqa: E731
    # On Ray the workers load the policy and the value model themselves; the driver needs the policy only for
    # DSBench's task simplification (one call per task; --no-simplify skips it).
    policy = value = None
    if not args.ray or info.get("simplify"):
        value = None if args.ray else load_value(args.value_model, dtype=args.value_dtype)
        try:
            policy = load_policy(args.llm)
        except PolicyError as exc:
            print(f"jupiter bench: error: --llm: {exc}", file=sys.stderr)
            return 2
        config = _fit_context(config, policy)
    write_run_info(out_dir, info)
    try:
        outcome = search(policy, config, _options(args, out_dir), value, solver)
    except TaskError:
        raise
    except KeyboardInterrupt:
        rebuild()  # the report of what finished
        raise
    except Exception as exc:  # also a policy that dies while simplifying DSBench's task texts
        return _failed(args, out_dir, exc, task_ids, policy, rebuild)
    finally:
        if policy is not None:
            policy.close()
    _print_result(out_dir, outcome, rebuild())
    return 0


# --------------------------------------------------------------------------------------------- commands


def run_dabench_command(args: argparse.Namespace) -> int:
    from benchmarks.dabench import load_dabench
    from benchmarks.runs import report_dabench, run_dabench

    data = load_dabench(args.data, ids=args.ids, limit=args.limit)
    return _run(args, "dabench", data.folder, [t.id for t in data.tasks],
                lambda policy, config, options, value, solver: run_dabench(data, policy, config, options, value=value,
                                                                           solver=solver),
                lambda out_dir, brief: report_dabench(out_dir, data, run=brief))


def run_aime_command(args: argparse.Namespace) -> int:
    from benchmarks.aime import load_aime
    from benchmarks.runs import report_aime, run_aime

    tasks = load_aime(args.data, ids=args.ids, limit=args.limit)
    return _run(args, "aime2025", args.data or default_data_dir("aime2025"), [t.id for t in tasks],
                lambda policy, config, options, value, solver: run_aime(tasks, policy, config, options, value=value,
                                                                        solver=solver),
                lambda out_dir, brief: report_aime(out_dir, tasks, run=brief))


def run_dsbench_command(args: argparse.Namespace) -> int:
    from benchmarks.dsbench import load_specs
    from benchmarks.metrics import MetricError
    from benchmarks.runs import load_dsbench, report_dsbench, run_dsbench

    if args.data is None:
        raise TaskError("jupiter bench dsbench: --data is required (the folder holding task/, data_resplit/, answers/)")
    try:
        specs = load_specs(args.tasks_json)
    except MetricError as exc:
        raise TaskError(str(exc)) from None
    data = load_dsbench(args.data, specs, names=args.tasks or args.ids, limit=args.limit)
    if not data.specs:
        listed = args.tasks_json or default_data_dir("dsbench") / "tasks.json"
        raise TaskError(f"jupiter bench dsbench: no task of {listed} found under {args.data / 'task'}")
    info = {"simplify": not args.no_simplify, "tasks": [s.name for s in data.specs],
            "tasks_json": str(args.tasks_json) if args.tasks_json else None}
    return _run(args, "dsbench", args.data, [s.name for s in data.specs],
                lambda policy, config, options, value, solver: run_dsbench(
                    data, policy, config, options, value=value, simplify=not args.no_simplify, model_key=args.llm,
                    solver=solver),
                lambda out_dir, brief: report_dsbench(out_dir, data, run=brief), info)


def _run_brief(info: dict[str, Any]) -> dict[str, Any]:
    config = info.get("config") or {}
    return {"llm": info.get("llm"), "value_model": info.get("value_model"), "mode": info.get("mode"),
            "iterations": config.get("iterations"), "expansions": config.get("expansions"),
            "max_depth": config.get("max_depth")}


def report_command(args: argparse.Namespace) -> int:
    """Rebuild a run's report from ``run.json`` + ``results.jsonl``."""
    from benchmarks.aime import load_aime
    from benchmarks.dabench import load_dabench
    from benchmarks.dsbench import load_specs
    from benchmarks.runs import load_dsbench, report_aime, report_dabench, report_dsbench

    info_path = args.run / "run.json"
    if not info_path.is_file():
        raise TaskError(f"{args.run}: no run.json here (not a `jupiter bench` run folder)")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    ids = info.get("ids") or None
    limit = info.get("limit")
    benchmark = info.get("benchmark")
    data_dir = Path(info["data"]) if info.get("data") else None
    if benchmark == "dabench":
        summary = report_dabench(args.run, load_dabench(data_dir, ids=ids, limit=limit), run=_run_brief(info))
    elif benchmark == "aime2025":
        summary = report_aime(args.run, load_aime(data_dir, ids=ids, limit=limit), run=_run_brief(info))
    elif benchmark == "dsbench":
        specs = load_specs(info.get("tasks_json"))
        data = load_dsbench(data_dir, specs, names=info.get("tasks") or ids, limit=limit)
        summary = report_dsbench(args.run, data, run=_run_brief(info))
    else:
        raise TaskError(f"{info_path}: unknown benchmark {benchmark!r}")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("tasks",)}, default=str))
    return 0


def revote_command(args: argparse.Namespace) -> int:
    from benchmarks.dabench import load_dabench
    from benchmarks.revote import revote

    missing = [run for run in args.runs if not (run / "results.jsonl").is_file()]
    if missing:  # before the data loads: a mistyped folder is the likelier mistake
        print(f"jupiter bench revote: error: {missing[0] / 'results.jsonl'}: no results.jsonl (not a benchmark run "
              "folder)", file=sys.stderr)
        return 2
    data = load_dabench(args.data)
    for run in args.runs:
        try:
            outcome = revote(run, data)
        except FileNotFoundError as exc:
            print(f"jupiter bench revote: error: {exc}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps(outcome))
        else:
            right = outcome["right"]
            print(f"{run}: {outcome['questions']} questions; right with --vote-key exact {right['exact']}, "
                  f"format {right['format']} (gained {' '.join(outcome['gained']) or '-'}, lost "
                  f"{' '.join(outcome['lost']) or '-'}; decided differently: "
                  f"{' '.join(outcome['decided_differently']) or '-'})")
    return 0


def compare_command(args: argparse.Namespace) -> int:
    from benchmarks.report import compare_runs, format_table

    if args.plot is not None:
        check_output_file(args.plot, "--plot")
    if args.equal_tokens:
        return _compare_at_equal_tokens(args)
    given = [flag for flag, value in (("--data", args.data), ("--tokenizer", args.tokenizer)) if value is not None]
    if given:
        print(f"jupiter bench compare: error: {given[0]} is for --equal-tokens", file=sys.stderr)
        return 2
    try:
        header, rows = compare_runs(args.runs, plot=args.plot)
    except (FileNotFoundError, ValueError) as exc:
        print(f"jupiter bench compare: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([dict(zip(header, row)) for row in rows]))
    else:
        print(format_table(header, rows))
    return 0


def _compare_at_equal_tokens(args: argparse.Namespace) -> int:
    """``--equal-tokens``: the runs' arms (``benchmarks.equal_tokens``), as tables, JSON and a plot."""
    from benchmarks.dabench import load_dabench
    from benchmarks.equal_tokens import load_arm, markdown, plot, to_json, tokenizer_counter
    from jupiter.default_model import ModelError

    missing = [run for run in args.runs if not (run / "results.jsonl").is_file()]
    if missing:  # before the data and the tokenizer load: a mistyped folder is the likelier mistake
        print(f"jupiter bench compare: error: {missing[0] / 'results.jsonl'}: no results.jsonl (not a benchmark "
              "run folder)", file=sys.stderr)
        return 2
    data = load_dabench(args.data)
    try:
        count = tokenizer_counter(args.tokenizer)
    except ImportError as exc:
        print(f"jupiter bench compare: error: --equal-tokens re-tokenises the replies and needs transformers "
              f"(pip install 'jupiter-nbsearch[train]'): {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, ModelError) as exc:
        print(f"jupiter bench compare: error: --tokenizer {args.tokenizer or 'default'}: {exc}", file=sys.stderr)
        return 2
    names = [run.name or str(run) for run in args.runs]
    if len(set(names)) < len(names):  # two runs of one name (a/seed-0, b/seed-0): their paths tell them apart
        names = [str(run) for run in args.runs]
    try:
        arms = [load_arm(run, data, count, name) for run, name in zip(args.runs, names)]
    except (OSError, ValueError) as exc:
        print(f"jupiter bench compare: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(to_json(arms)) if args.json else markdown(arms))
    if args.plot is not None:
        plot(arms, args.plot)
    return 0
