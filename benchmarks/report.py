"""Run reports: ``summary.json`` (machine-readable), ``summary.md`` (for people) and PNG plots; run comparison.

A run folder holds ``results.jsonl`` (one line per task) and, after ``write_report``, the summary files and
``accuracy_vs_iterations.png`` (vote, value and oracle curves, as in the paper's figures). ``compare_runs``
reads several run folders' ``summary.json`` and lays their headline figures side by side.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.curves import Curve

__all__ = ["write_report", "plot_curves", "load_summary", "compare_runs", "format_table", "headline"]

log = logging.getLogger(__name__)

#: the figures shown first for each benchmark (summary key path → column title)
HEADLINES: dict[str, tuple[tuple[str, str], ...]] = {
    "dabench": (
        ("metrics.abq", "ABQ"),
        ("metrics.pasq", "PASQ"),
        ("metrics.uasq", "UASQ"),
        ("metrics.abq_all_tasks", "ABQ all tasks"),  # every selected task; an unfinished one counts wrong
        ("abq_vote_all_tasks", "ABQ vote"),
        ("abq_value_selected_all_tasks", "ABQ value"),
        ("abq_any_candidate_all_tasks", "ABQ any"),
    ),
    "aime2025": (("metrics.or", "OR"), ("metrics.vote", "Vote"), ("metrics.value", "Value"),
                 ("metrics.final", "Final")),
    "dsbench": (
        ("metrics.success_rate", "Success"),
        ("metrics.success_rate_any", "Success any (paper)"),
        ("metrics.rpg_final", "RPG"),
        ("metrics.rpg_value", "RPG value"),
        ("metrics.rpg_best", "RPG best"),
        ("metrics.rpg_final_all_tasks", "RPG all tasks"),
    ),
}
COST = (("finished", "Tasks"), ("iterations_mean", "Iter/task"), ("nodes_total", "Nodes"),
        ("model_calls_total", "Model calls"), ("seconds_total", "Seconds"))


def _get(summary: Mapping[str, Any], path: str) -> Any:
    value: Any = summary
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def headline(summary: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(title, value) pairs: the benchmark's main metrics, then the cost figures."""
    keys = HEADLINES.get(str(summary.get("benchmark")), ()) + COST
    return [(title, _get(summary, path)) for path, title in keys]


def plot_curves(curves: Sequence[Curve], path: Path, title: str, ylabel: str = "accuracy",
                xlabel: str = "search iterations") -> Path | None:
    """Accuracy vs budget (iterations, or tokens), one line per curve (matplotlib Agg; nothing on screen).

    None if no curves."""
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    figure, axes = plt.subplots(figsize=(6, 4))
    try:
        for curve in curves:
            axes.plot(curve.budgets, curve.values, marker="o" if len(curve.budgets) < 20 else None, label=curve.name)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=8))
        if max((b for c in curves for b in c.budgets), default=0) >= 10_000:  # token budgets: 120k, not 120000
            axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:g}k"))
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)
    return path


def _status_lines(summary: Mapping[str, Any]) -> list[str]:
    """A failed or unfinished run says so first: the error, what finished, what did not, how to resume."""
    status = summary.get("status")
    if status not in ("failed", "incomplete"):
        return []
    unfinished = [str(i) for i in summary.get("unfinished") or ()]
    shown = ", ".join(unfinished[:20]) + (f", … ({len(unfinished) - 20} more)" if len(unfinished) > 20 else "")
    finished, selected = summary.get("finished", 0), summary.get("selected", "?")
    lines = []
    failure = summary.get("failure") or {}
    if status == "failed":
        who = failure.get("backend") or "the run"
        lines += [f"**Run failed** ({failure.get('source', 'run')}: {who}) at {failure.get('at', '?')}:", "",
                  f"    {failure.get('error', '')}", ""]
        if failure.get("cause") and failure["cause"] not in failure.get("error", ""):
            lines += [f"Cause: `{failure['cause']}`", ""]
    else:
        lines += ["**Run not finished** (interrupted, or still running).", ""]
    lines += [f"- finished: {finished} of {selected} selected tasks; unfinished: {shown or '–'}",
              "- the figures below cover the finished tasks (the *all tasks* figures count the unfinished ones "
              "as wrong); rerun the same command to search the unfinished tasks", ""]
    return lines


def _markdown(summary: Mapping[str, Any], curves: Sequence[Curve], plot: Path | None) -> str:
    name = summary.get("benchmark", "benchmark")
    lines = [f"# {name} run summary", ""] + _status_lines(summary)
    if summary.get("run"):
        run = summary["run"]
        lines += [f"- {k}: `{v}`" for k, v in run.items()] + [""]
    lines += ["| figure | value |", "|---|---|"]
    lines += [f"| {title} | {_fmt(value)} |" for title, value in headline(summary)]
    for section, title in (("metrics.by_level", "ABQ per level (all its tasks)"),
                           ("metrics.by_concept", "ABQ per concept (all its tasks)")):
        table = _get(summary, section)
        if table:
            lines += ["", f"## {title}", "", "| | ABQ |", "|---|---|"]
            lines += [f"| {k} | {_fmt(v)} |" for k, v in table.items()]
    tasks = summary.get("tasks")
    if isinstance(tasks, list) and tasks and name == "dsbench":
        lines += ["", "## Tasks", "", "| task | metric | final | value-selected | best | submissions |",
                  "|---|---|---|---|---|---|"]
        lines += [
            f"| {t['task']} | {t['metric']} | {_fmt(t.get('final'))} | {_fmt(t.get('value_selected'))} | "
            f"{_fmt(t.get('best'))} | {t.get('scored', 0)}/{t.get('submissions', 0)} |"
            for t in tasks
        ]
    if summary.get("known_bad_labels"):
        lines += ["", "Known bad labels in this selection: "
                  + ", ".join(f"{k} ({v})" for k, v in summary["known_bad_labels"].items())]
    if curves:
        lines += ["", "## Accuracy vs iterations", ""]
        if plot is not None:
            lines += [f"![accuracy vs iterations]({plot.name})", ""]
        lines += ["| iterations | " + " | ".join(c.name for c in curves) + " |", "|---" * (len(curves) + 1) + "|"]
        for i, budget in enumerate(curves[0].budgets):
            lines.append(f"| {budget} | " + " | ".join(_fmt(c.values[i]) for c in curves) + " |")
    return "\n".join(lines) + "\n"


def write_report(run_dir: str | Path, summary: Mapping[str, Any], curves: Sequence[Curve] = ()) -> dict[str, Path]:
    """Write ``summary.json``, ``summary.md`` and the accuracy plot into ``run_dir``; return their paths."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    data = dict(summary)
    data["curves"] = [c.to_dict() for c in curves]
    paths = {"json": run_dir / "summary.json", "md": run_dir / "summary.md"}
    paths["json"].write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    plot = None
    if curves:
        ylabel = "normalised performance" if summary.get("benchmark") == "dsbench" else "accuracy"
        plot = plot_curves(curves, run_dir / "accuracy_vs_iterations.png",
                           f"{summary.get('benchmark')}: score vs iterations", ylabel)
        if plot is not None:
            paths["plot"] = plot
    paths["md"].write_text(_markdown(summary, curves, plot), encoding="utf-8")
    return paths


def load_summary(run: str | Path) -> dict[str, Any]:
    """A run's ``summary.json`` (``run`` may be the folder or the file)."""
    path = Path(run)
    path = path / "summary.json" if path.is_dir() else path
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FileNotFoundError(f"{path}: no run summary here ({exc.strerror or exc}); "
                                "run `jupiter bench ...` first") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def compare_runs(runs: Sequence[str | Path], plot: str | Path | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and rows comparing runs' headline figures; optionally one plot of every run's curves."""
    summaries = [(Path(r), load_summary(r)) for r in runs]
    titles: list[str] = []
    for _, summary in summaries:
        for title, _value in headline(summary):
            if title not in titles:
                titles.append(title)
    header = ["run", "benchmark"] + titles
    rows = []
    for path, summary in summaries:
        values = dict(headline(summary))
        rows.append([path.name or str(path), str(summary.get("benchmark", ""))] + [_fmt(values.get(t)) for t in titles])
    if plot is not None:
        curves = []
        for path, summary in summaries:
            for c in summary.get("curves") or ():
                if c["name"] in ("vote", "value"):
                    curves.append(Curve(f"{path.name}:{c['name']}", tuple(c["budgets"]), tuple(c["values"])))
        plot_curves(curves, Path(plot), "accuracy vs iterations")
    return header, rows


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table with aligned columns."""
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
