"""The ``stats`` report: what each stage kept and dropped, and what the dataset looks like.

Markdown (``report.md``) with tables and PNG plots next to it: counts per filter reason, per extraction
outcome, per concept, per data-file type, solution lengths, and the verified share. Any input may be
missing; its sections are left out.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbqa_pipeline.jsonl import read_jsonl

__all__ = ["StatsReport", "collect_stats", "write_report"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StatsReport:
    filter_verdicts: dict[str, int]
    filter_reasons: dict[str, int]
    invalid_causes: dict[str, int]
    extract_outcomes: dict[str, int]
    task_outcomes: dict[str, int]
    concepts: dict[str, int]
    difficulty: dict[str, int]
    file_types: dict[str, int]
    solution_steps: dict[int, int]
    solution_code_lines: list[int]
    verified: dict[str, int]
    label_in_outputs: dict[str, int]
    nbqa_records: int


def collect_stats(filter_file: Path | None = None, extract_file: Path | None = None,
                  nbqa_file: Path | None = None, verify_file: Path | None = None) -> StatsReport:
    filt = list(read_jsonl(filter_file)) if filter_file else []
    extr = list(read_jsonl(extract_file)) if extract_file else []
    nbqa = list(read_jsonl(nbqa_file)) if nbqa_file else []
    ver = list(read_jsonl(verify_file)) if verify_file else []
    tasks = [t for r in extr for t in r.get("tasks", ())]
    ok_tasks = [t for t in tasks if t.get("status") == "ok"]
    dataset = nbqa or [{"concepts": t.get("concepts"), "difficulty": t.get("difficulty"),
                        "solution": t.get("steps"), "file_names": t.get("file_names")} for t in ok_tasks]
    file_types: Counter[str] = Counter()
    for rec in filt or extr:
        for f in rec.get("data_files", ()):
            name = f.get("path", "")
            file_types["url" if f.get("is_url") else (Path(name).suffix.lower() or "(none)")] += 1
    verified = Counter("infra_error" if r.get("status") == "infra_error" else
                       "skipped" if r.get("status") == "skipped" else
                       ("reproduced" if r.get("reproduced") else "not_reproduced") for r in ver)
    return StatsReport(
        filter_verdicts=dict(Counter(r.get("verdict") for r in filt)),
        filter_reasons=dict(Counter(reason for r in filt for reason in r.get("reasons", ()))),
        invalid_causes=dict(Counter(r["invalid_cause"] for r in filt if r.get("invalid_cause"))),
        extract_outcomes=dict(Counter(r.get("status") if r.get("status") == "ok" else f"dropped: {r.get('reason')}"
                                      for r in extr)),
        task_outcomes=dict(Counter(t.get("status") if t.get("status") == "ok" else f"dropped: {t.get('reason')}"
                                   for t in tasks)),
        concepts=dict(Counter(c for r in dataset for c in r.get("concepts") or ())),
        difficulty=dict(Counter(str(r.get("difficulty")) for r in dataset)),
        file_types=dict(file_types),
        solution_steps=dict(sorted(Counter(len(r.get("solution") or ()) for r in dataset).items())),
        solution_code_lines=sorted(sum(len((s.get("python_code") or "").splitlines()) for s in r.get("solution") or ())
                                   for r in dataset),
        verified=dict(verified),
        label_in_outputs=dict(Counter(str(t.get("label_in_outputs")) for t in ok_tasks)),
        nbqa_records=len(nbqa) if nbqa else len(ok_tasks),
    )


def _table(title: str, counts: Mapping[Any, int]) -> list[str]:
    if not counts:
        return []
    total = sum(counts.values())
    lines = [f"## {title}", "", "| value | count | share |", "|---|---:|---:|"]
    for key, value in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        lines.append(f"| {key} | {value} | {value / total:.1%} |")
    return [*lines, ""]


def _bar(path: Path, title: str, counts: Mapping[Any, int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = sorted(counts.items(), key=lambda kv: -kv[1])
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(items) + 1.2))
    ax.barh([str(k) for k, _ in items][::-1], [v for _, v in items][::-1], color="#4C72B0")
    ax.set_title(title)
    ax.set_xlabel("count")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _hist(path: Path, title: str, values: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.hist(values, bins=min(30, max(5, len(set(values)))), color="#55A868")
    ax.set_title(title)
    ax.set_xlabel("lines of code")
    ax.set_ylabel("tasks")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_report(stats: StatsReport, out_dir: Path) -> Path:
    """Write ``report.md`` and its PNG plots to ``out_dir``; returns the markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# NbQA pipeline report", "", f"Tasks in the dataset: **{stats.nbqa_records}**", ""]
    plots = [("filter_reasons.png", "Filter: notebooks per failed rule", stats.filter_reasons),
             ("concepts.png", "Tasks per concept", stats.concepts),
             ("file_types.png", "Data files per type", stats.file_types)]
    sections = [("Filter verdicts", stats.filter_verdicts),
                ("Filter reasons (a notebook may fail several)", stats.filter_reasons),
                ("Invalid notebooks by cause", stats.invalid_causes),
                ("Extraction outcomes (notebooks)", stats.extract_outcomes),
                ("Extraction outcomes (tasks)", stats.task_outcomes), ("Concepts", stats.concepts),
                ("Difficulty", stats.difficulty), ("Data file types", stats.file_types),
                ("Solution steps per task", stats.solution_steps), ("Verification", stats.verified),
                ("Label values found in the notebook's own outputs", stats.label_in_outputs)]
    for title, counts in sections:
        lines += _table(title, counts)
    if stats.verified:
        ran = stats.verified.get("reproduced", 0) + stats.verified.get("not_reproduced", 0)
        if ran:
            lines += [f"Label reproduced by running the solution: **{stats.verified.get('reproduced', 0) / ran:.1%}** "
                      f"of {ran} tasks run.", ""]
    for name, title, counts in plots:
        if counts:
            _bar(out_dir / name, title, counts)
            lines += [f"![{title}]({name})", ""]
    if stats.solution_code_lines:
        _hist(out_dir / "solution_lengths.png", "Solution length (lines of code)", stats.solution_code_lines)
        values = stats.solution_code_lines
        lines += ["## Solution length", "", f"min {values[0]}, median {values[len(values) // 2]}, max {values[-1]} "
                  "lines of code", "", "![Solution length](solution_lengths.png)", ""]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines))
    return path
