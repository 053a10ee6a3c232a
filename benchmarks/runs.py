"""The three benchmark runs (DABench, AIME 2025, DSBench modeling) and their reports.

Each ``run_*`` solves the tasks not yet finished in ``options.out_dir``; its ``report_*`` (which ``jupiter
bench`` calls once the run ends, however it ends) recomputes the summary from ``results.jsonl`` alone — so a
report can be rebuilt at any time, including for an interrupted run, without touching the search. Every summary says
whether the run is ``complete``, ``incomplete`` (interrupted, or still running) or ``failed`` (``failure.json``: the
error that stopped it), with the selected and the unfinished task ids, so a run that died never reads as a finished one.
"""

from __future__ import annotations

import enum
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.aime import aime_correct, summarize_aime
from benchmarks.curves import accuracy_curves
from benchmarks.dabench import DabenchData, cost_summary, dabench_correct, official_responses, summarize_dabench
from benchmarks.dsbench.scoring import SubmissionScore, rpg, score_submission
from benchmarks.dsbench.tasks import DsbenchSpec
from benchmarks.records import ResultsLog, TaskRecord, iteration_numbers, read_failure, record_from_result
from benchmarks.report import write_report
from benchmarks.runner import RunOptions, RunOutcome, run_loop
from jupiter.answers import extract_answers
from jupiter.appendlog import write_records
from jupiter.task import Task, TaskError, task_from_dsbench
from search.file_capture import CapturingSandbox, SubmissionCapture, submission_files
from search.loaders import sandbox_config, sandbox_factory

__all__ = [
    "run_dabench",
    "report_dabench",
    "run_aime",
    "report_aime",
    "DsbenchData",
    "load_dsbench",
    "run_dsbench",
    "report_dsbench",
]

log = logging.getLogger(__name__)


def _records(out_dir: Path) -> list[TaskRecord]:
    return ResultsLog(out_dir / "results.jsonl").records()


class RunStatus(str, enum.Enum):
    """Where a run folder stands (``summary["status"]``)."""

    COMPLETE = "complete"  # every selected task finished
    INCOMPLETE = "incomplete"  # some did not, and no failure is recorded (interrupted, or still running)
    FAILED = "failed"  # some did not because the run died: ``failure.json`` says why


def _run_status(out_dir: Path, selected: Sequence[str], records: Sequence[TaskRecord]) -> dict[str, Any]:
    """``status``, ``selected``, ``unfinished`` (ids) and, for a failed run, ``failure`` (without traceback)."""
    finished = {r.id for r in records}
    unfinished = [i for i in selected if i not in finished]
    failure = read_failure(out_dir) if unfinished else None
    status = RunStatus.COMPLETE if not unfinished else RunStatus.FAILED if failure else RunStatus.INCOMPLETE
    out: dict[str, Any] = {"status": status.value, "selected": len(selected), "unfinished": unfinished}
    if failure is not None:
        out["failure"] = {k: v for k, v in failure.to_dict().items()
                          if k not in ("traceback", "finished", "unfinished")}
    return out


def _finish(out_dir: Path, summary: dict[str, Any], selected: Sequence[str], records: Sequence[TaskRecord],
            run: dict[str, Any] | None, score: Callable[[Any, TaskRecord], float]) -> dict[str, Any]:
    """Every report's ending: the run's status and invocation, then ``summary.{json,md}`` and the accuracy
    curves (``score``: a candidate of a record → its score)."""
    summary.update(_run_status(out_dir, selected, records))
    if run:
        summary["run"] = run
    write_report(out_dir, summary, accuracy_curves(records, score))
    return summary


# ------------------------------------------------------------------------------------------------ DABench


def run_dabench(data: DabenchData, policy: Any, config: Any, options: RunOptions, value: Any = None,
                make_sandbox: Callable[[], Any] | None = None, solver: Any = None) -> RunOutcome:
    """Solve the DABench questions in ``data`` (level and concepts on each record)."""
    return run_loop(list(data.tasks), benchmark="dabench", policy=policy, make_sandbox=make_sandbox, config=config,
                    value=value, options=options, solver=solver,
                    to_record=lambda result, task: record_from_result(
                        result, "dabench", {"level": task.level, "concepts": list(task.concepts)}))


def report_dabench(out_dir: Path, data: DabenchData, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """Summary, official ``responses.jsonl``, ``summary.{json,md}`` and the plot from ``results.jsonl``."""
    wanted = {t.id for t in data.tasks}
    records = [r for r in _records(out_dir) if r.id in wanted]
    write_records(out_dir / "responses.jsonl", official_responses(records), default=str)
    labels = {str(label["id"]): label for label in data.labels}
    return _finish(out_dir, _name_denominators(summarize_dabench(records, data)), [t.id for t in data.tasks],
                   records, run, lambda c, r: float(dabench_correct(c.answer, labels.get(r.id))))


def _name_denominators(summary: dict[str, Any]) -> dict[str, Any]:
    """Add DABench figures named by their denominator (``*_strict`` keys stay for older readers).

    ``jupiter score`` calls its every-label figures ``*_all_labels``; here the denominator is every task the
    run selected (finished or not, an unfinished one counts wrong), hence ``*_all_tasks``. The official
    ``abq``/``pasq``/``uasq`` divide by the ``answered`` tasks.
    """
    metrics = summary.get("metrics") or {}
    for name in ("abq", "pasq", "uasq"):
        if f"{name}_strict" in metrics:
            metrics[f"{name}_all_tasks"] = metrics[f"{name}_strict"]
    if "n" in metrics:
        metrics["answered"] = metrics["n"]
    for which in ("vote", "value_selected", "any_candidate"):
        if f"abq_{which}_strict" in summary:
            summary[f"abq_{which}_all_tasks"] = summary[f"abq_{which}_strict"]
    summary["denominators"] = {
        "metrics.abq, pasq, uasq": "answered: tasks with a non-empty answer (the official rule)",
        "*_all_tasks (= *_strict)": "every task this run selected; unfinished or unanswered ones count wrong",
    }
    return summary


# ------------------------------------------------------------------------------------------------ AIME


def run_aime(tasks: Sequence[Task], policy: Any, config: Any, options: RunOptions, value: Any = None,
             make_sandbox: Callable[[], Any] | None = None, solver: Any = None) -> RunOutcome:
    """Solve AIME problems (math tasks with the tool-use prompt)."""
    return run_loop(list(tasks), benchmark="aime2025", policy=policy, make_sandbox=make_sandbox, config=config,
                    value=value, options=options, solver=solver,
                    to_record=lambda result, task: record_from_result(result, "aime2025"))


def report_aime(out_dir: Path, tasks: Sequence[Task], run: dict[str, Any] | None = None) -> dict[str, Any]:
    wanted = {t.id for t in tasks}
    records = [r for r in _records(out_dir) if r.id in wanted]
    return _finish(out_dir, summarize_aime(records, total=len(tasks)), [t.id for t in tasks], records, run,
                   lambda c, r: float(aime_correct(c.answer, r.label)))


# ------------------------------------------------------------------------------------------------ DSBench


@dataclass(frozen=True)
class DsbenchData:
    """The DSBench tasks found under a user's copy of the official layout, with their scoring specs."""

    root: Path
    specs: tuple[DsbenchSpec, ...]  # the selected tasks, in order
    all_specs: tuple[DsbenchSpec, ...]  # every task of tasks.json (RPG over all counts missing ones as 0)

    def answers_path(self, name: str) -> Path:
        return self.root / "answers" / name / "test_answer.csv"


def load_dsbench(
    root: str | Path,
    specs: Sequence[DsbenchSpec],
    names: Sequence[str] | None = None,
    limit: int | None = None,
) -> DsbenchData:
    """Select the tasks present under ``root`` (``task/<name>.txt``) that ``specs`` can score.

    ``names`` picks tasks explicitly (each must exist and have a spec); otherwise every spec'd task whose
    text is present is taken, in ``specs`` order. Every selected task must have its answers file.
    """
    root = Path(root)
    if not (root / "task").is_dir():
        raise TaskError(f"DSBench data: {root / 'task'} not found "
                        f"(expected task/, data_resplit/, answers/ under {root})")
    by_name = {s.name: s for s in specs}
    if names:
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise TaskError(f"DSBench: no scoring spec for task(s) {', '.join(unknown)} (add them to tasks.json)")
        selected = [by_name[n] for n in names]
    else:
        selected = [s for s in specs if (root / "task" / f"{s.name}.txt").is_file()]
    if limit is not None:
        selected = selected[: max(0, limit)]
    for spec in selected:
        for path in (root / "task" / f"{spec.name}.txt", root / "data_resplit" / spec.name,
                     root / "answers" / spec.name / "test_answer.csv"):
            if not path.exists():
                raise TaskError(f"DSBench task {spec.name}: {path} not found")
    return DsbenchData(root=root, specs=tuple(selected), all_specs=tuple(specs))


def _best(scores: list[tuple[dict[str, Any], SubmissionScore]], higher: bool) -> dict[str, Any] | None:
    scored = [(entry, s) for entry, s in scores if s.ok]
    if not scored:
        return None
    return max(scored, key=lambda es: (es[1].normalized, es[1].value if higher else -es[1].value))[0]  # type: ignore[operator]


def _by_value(scores: list[tuple[dict[str, Any], SubmissionScore]]) -> dict[str, Any] | None:
    """The submission of the node with the highest Q (the earliest among equals): the reference code's pick."""
    return max((entry for entry, _ in scores), key=lambda entry: entry["node_value"], default=None)


def _dsbench_record(result: Any, spec: DsbenchSpec, data: DsbenchData, capture: SubmissionCapture) -> TaskRecord:
    """Score every executed node that wrote ``submission.csv`` (the paper's rule), not only the answer nodes.

    ``submissions``: one entry per writing node (tag, iteration, metric value, normalized, error, node Q,
    and the answer nodes whose file it is). ``final``: the file of the answer node the search decided on (vote
    or value decision), ``value_selected``: the writing node with the highest Q (only when a value model was
    used), ``best``: the best of all (the paper's reported figure: it scores every submission and keeps the
    best, an oracle over the tree). Each distinct file is scored once.
    """
    record = record_from_result(result, "dsbench")
    tree = result.tree
    iterations = iteration_numbers(tree, result.config.mode.is_tree)
    # tag → submission bytes of every node that wrote one and of every answer node (``submission_files``):
    # sent back by the Ray workers, or read from this process's capture
    files = dict(result.files) if result.files else submission_files(capture, result.tree.nodes)
    answers_path = data.answers_path(spec.name)
    by_digest: dict[str, SubmissionScore] = {}

    def score(blob: bytes | None) -> SubmissionScore:
        if blob is None:
            return score_submission(spec, answers_path, None)
        digest = hashlib.sha1(blob).hexdigest()
        if digest not in by_digest:
            by_digest[digest] = score_submission(spec, answers_path, blob)
        return by_digest[digest]

    writers = [n for n in tree.nodes if n.tag in files and not n.is_answer]
    writer_tags = {n.tag for n in writers}
    answer_source: dict[str, str | None] = {}  # answer tag → the writer whose file it submits
    for candidate in result.candidates:
        node = tree[candidate.tag] if candidate.tag in tree else None
        current = node.parent if node is not None else None
        while current is not None and current.tag not in writer_tags:
            current = current.parent
        has_file = current is not None and files.get(candidate.tag) is not None
        answer_source[candidate.tag] = current.tag if has_file else None
    scores: list[tuple[dict[str, Any], SubmissionScore]] = []
    for node in writers:
        result_score = score(files[node.tag])
        entry = {"tag": node.tag, "iteration": iterations.get(node.tag), "value": result_score.value,
                 "normalized": result_score.normalized, "error": result_score.error, "node_value": node.value,
                 "answers": sorted(t for t, w in answer_source.items() if w == node.tag)}
        scores.append((entry, result_score))
    capture.forget(tree.nodes)

    def answer_score(tag: str | None) -> SubmissionScore | None:
        if not tag or tag not in tree:
            return None
        answer = next((c.answer for c in result.candidates if c.tag == tag), "") or ""
        name = extract_answers(answer).get("submission_file", capture.file_name).strip()
        return score(files.get(tag) if name == capture.file_name else None)

    final = answer_score(result.chosen_tag)
    # value_answer is None without a value model (Ray results carry no value-call count)
    used_value = result.stats.value_calls > 0 or result.value_answer is not None
    by_value = _by_value(scores) if used_value else None
    best = _best(scores, spec.higher_is_better)
    extra = {
        "metric": spec.metric,
        "scoring_rule": "every executed node that wrote submission.csv",
        "submissions": [e for e, _ in scores],
        "answer_submissions": answer_source,
        "final": final.value if final else None,
        "final_error": final.error if final else "no answer decided",
        "value_selected": by_value["value"] if by_value else None,
        "best": best["value"] if best else None,
        "normalized_final": final.normalized if final else 0.0,
        "normalized_value": by_value["normalized"] if by_value else 0.0,
        "normalized_best": best["normalized"] if best else 0.0,
    }
    return TaskRecord(**{**record.__dict__, "extra": extra})


class _NamedFailures:
    """The policy, whose crashes reach the caller as a ``PolicyError`` naming it, as in the search driver (the
    task simplification calls the policy before any tree does)."""

    def __init__(self, policy: Any) -> None:
        self._policy = policy

    def generate(self, histories: Any, params: Any) -> Any:
        from search.driver import call_policy

        return call_policy(self._policy, histories, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


def run_dsbench(
    data: DsbenchData,
    policy: Any,
    config: Any,
    options: RunOptions,
    value: Any = None,
    simplify: bool = True,
    model_key: str = "",
    make_sandbox: Callable[[], Any] | None = None,
    solver: Any = None,
) -> RunOutcome:
    """Simplify each task text (cached), search with the submission format, score the file of every executed
    node that wrote ``submission.csv`` (``_dsbench_record``)."""
    from benchmarks.dsbench.simplify import simplify_descriptions

    done = ResultsLog(options.out_dir / "results.jsonl").done_ids
    descriptions: dict[str, str] = {}
    if simplify:
        texts = {s.name: (data.root / "task" / f"{s.name}.txt").read_text(encoding="utf-8", errors="replace")
                 for s in data.specs if s.name not in done}
        descriptions = simplify_descriptions(texts, _NamedFailures(policy), options.out_dir / "simplified",
                                             model_key=model_key)
    tasks = [task_from_dsbench(data.root, s.name, description=descriptions.get(s.name)) for s in data.specs]
    capture = SubmissionCapture()
    inner = make_sandbox or sandbox_factory(sandbox_config(config))
    by_name = {s.name: s for s in data.specs}
    # no checkpoints: the submission files of a tree's earlier nodes live in this process's capture only
    return run_loop(tasks, benchmark="dsbench", policy=policy, make_sandbox=lambda: CapturingSandbox(inner(), capture),
                    config=config, value=value, options=options.replace(checkpoints=False), solver=solver,
                    to_record=lambda result, task: _dsbench_record(result, by_name[task.id], data, capture))


def report_dsbench(out_dir: Path, data: DsbenchData, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """Task success, RPG (final, value-selected, best submission) over the selected tasks and over all.

    Every executed node that wrote ``submission.csv`` is scored. The paper's figures are ``success_rate_any``
    (some submission of the task scored) and ``rpg_best`` (the best submission per task: an oracle over the
    tree, as the authors' scoring script takes the max); ``success_rate`` / ``rpg_final`` are what the search's
    own decision submits, and ``rpg_value`` the highest-Q submitting node (value-model runs).
    """
    wanted = {s.name for s in data.specs}
    records = [r for r in _records(out_dir) if r.id in wanted]
    by_id = {r.id: r for r in records}
    n = len(data.specs) or 1
    figures: dict[str, dict[str, float | None]] = {"final": {}, "value": {}, "best": {}}
    rows = []
    for spec in data.specs:
        record = by_id.get(spec.name)
        extra = record.extra if record else {}
        figures["final"][spec.name] = extra.get("final")
        figures["value"][spec.name] = extra.get("value_selected")
        figures["best"][spec.name] = extra.get("best")
        subs = extra.get("submissions") or []
        rows.append({"task": spec.name, "metric": spec.metric, "final": extra.get("final"),
                     "value_selected": extra.get("value_selected"), "best": extra.get("best"),
                     "submissions": len(subs), "scored": sum(1 for s in subs if s.get("value") is not None),
                     "normalized_final": extra.get("normalized_final", 0.0), "finished": record is not None})
    metrics = {
        "success_rate": sum(v is not None for v in figures["final"].values()) / n,
        "success_rate_any": sum(v is not None for v in figures["best"].values()) / n,
        "rpg_final": rpg(figures["final"], data.specs),
        "rpg_value": rpg(figures["value"], data.specs),
        "rpg_best": rpg(figures["best"], data.specs),
        "rpg_final_all_tasks": rpg(figures["final"], data.all_specs),
        "rpg_best_all_tasks": rpg(figures["best"], data.all_specs),
        "tasks_selected": len(data.specs),
        "tasks_total": len(data.all_specs),
    }
    summary: dict[str, Any] = {"benchmark": "dsbench", "finished": len(records), "metrics": metrics, "tasks": rows,
                               **cost_summary(records)}
    summary["scoring_rule"] = "every executed node that wrote submission.csv is scored"
    summary["paper_figures"] = {"task_success": "metrics.success_rate_any", "rpg": "metrics.rpg_best"}

    def normalized(candidate: Any, record: TaskRecord) -> float:
        # an answer node submits the file of the node that wrote it (older records: the answer's own entry)
        source = (record.extra.get("answer_submissions") or {}).get(candidate.tag, candidate.tag)
        for entry in record.extra.get("submissions") or ():
            if entry.get("tag") == source:
                return float(entry.get("normalized") or 0.0)
        return 0.0

    return _finish(out_dir, summary, [s.name for s in data.specs], records, run, normalized)
