"""Verify the reference solutions by running every cell in the real sandbox on the real tables.

Checks per question: every cell of every solution runs without error; the last cell prints exactly the stored
answer; the correct solution's answer scores 1 against the label (``jupiter.answers.reward``) and matches each
sub-answer by the official DABench rule; each wrong solution's answer scores −1; the three answers are
different votes (``canonical_answer``); every erroring cell raises (status ERROR) after the data is loaded.

    python -m benchmarks.quality.verify [--write] [--ids 0,5,30] [--dabench DIR]

``--write`` stamps the file's ``verified`` entry (date, versions, question count) when every question passes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from jupiter.answers import canonical_answer, extract_answers, official_match, reward
from sandbox import ExecStatus, Sandbox, SandboxConfig

from benchmarks.paths import default_data_dir
from benchmarks.quality.solutions import SOLUTIONS_PATH, QuestionSolutions, Solution, load_solutions

__all__ = ["QuestionCheck", "verify_question", "verify_all", "write_stamp", "main"]


@dataclass
class QuestionCheck:
    """The outcome of verifying one question; ``problems`` is empty when it passed."""

    id: int
    problems: list[str] = field(default_factory=list)
    printed: dict[str, str] = field(default_factory=dict)  # solution name -> answer its last cell printed
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


def _run_solution(root, solution: Solution, where: str, check: QuestionCheck, timeout: float) -> str | None:
    """Run ``solution`` on a branch of ``root``; the last cell's observation, or None after a failing cell."""
    state = root.branch()
    try:
        observation = None
        for index, cell in enumerate(solution.cells):
            execution = state.run(cell.code, timeout=timeout)
            if execution.status is not ExecStatus.OK:
                check.problems.append(f"{where} cell {index} ended {execution.status.value}: "
                                      f"{execution.observation(300)}")
                return None
            observation = execution.observation()
        return observation
    finally:
        state.close()


def verify_question(question: QuestionSolutions, sandbox: Sandbox, tables: Path, timeout: float = 120.0
                    ) -> QuestionCheck:
    """Run every cell of ``question`` in ``sandbox`` and check the answers (see the module docstring)."""
    check = QuestionCheck(question.id)
    started = time.perf_counter()
    root = sandbox.open_root(input_files=[tables / question.file])
    try:
        label = extract_answers(question.label)
        if not label:
            check.problems.append(f"label {question.label!r} has no @name[value]")
        for kind, solution in [("correct", question.correct)] + [(f"wrong[{i}]", w) for i, w in
                                                                  enumerate(question.wrong)]:
            where = f"question {question.id} {kind} ({solution.name})"
            printed = _run_solution(root, solution, where, check, timeout)
            if printed is None:
                continue
            check.printed[solution.name] = printed.strip()
            if extract_answers(printed) != extract_answers(solution.answer):
                check.problems.append(f"{where}: prints {printed.strip()!r}, stored answer is {solution.answer!r}")
            score = reward(solution.answer, question.label)
            if kind == "correct":
                got = extract_answers(solution.answer)
                if score != 1.0 or not all(official_match(got.get(k), v) for k, v in label.items()):
                    check.problems.append(f"{where}: {solution.answer!r} does not match the label {question.label!r}")
            elif score != -1.0:
                check.problems.append(f"{where}: {solution.answer!r} is not wrong against {question.label!r}")
        keys = [canonical_answer(s.answer) for s in question.solutions]
        if len(set(keys)) != len(keys):
            check.problems.append(f"question {question.id}: two solutions give the same answer {keys}")
        loaded = root.branch()
        try:
            load = loaded.run(question.correct.cells[0].code, timeout=timeout)
            if load.status is not ExecStatus.OK:
                check.problems.append(f"question {question.id}: the load cell failed: {load.observation(300)}")
            for index, cell in enumerate(question.errors):
                probe = loaded.branch()
                try:
                    execution = probe.run(cell.code, timeout=timeout)
                finally:
                    probe.close()
                if execution.status is not ExecStatus.ERROR:
                    check.problems.append(f"question {question.id} errors[{index}] ended "
                                          f"{execution.status.value}, not an error: {cell.code!r}")
        finally:
            loaded.close()
    finally:
        root.close()
        check.seconds = time.perf_counter() - started
    return check


def verify_all(questions: Sequence[QuestionSolutions], dabench_dir: Path,
               sandbox_factory: Callable[[], Sandbox] | None = None,
               progress: Callable[[QuestionCheck], None] | None = None) -> list[QuestionCheck]:
    """Verify ``questions`` in one sandbox; one ``QuestionCheck`` each, in order."""
    tables = Path(dabench_dir) / "tables"
    factory = sandbox_factory or (lambda: Sandbox(SandboxConfig(timeout_s=120.0)))
    checks = []
    with factory() as sandbox:
        for question in questions:
            check = verify_question(question, sandbox, tables)
            checks.append(check)
            if progress is not None:
                progress(check)
    return checks


def write_stamp(path: Path, checks: Sequence[QuestionCheck]) -> dict:
    """Record a passing verification in the file's ``verified`` entry (the rest of the file is kept as is)."""
    import pandas
    import numpy

    doc = json.loads(path.read_text(encoding="utf-8"))
    stamp = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "questions": len(checks),
        "all_passed": all(c.ok for c in checks),
        "sandbox": "sandbox.Sandbox (fork backend)",
        "python": platform.python_version(),
        "pandas": pandas.__version__,
        "numpy": numpy.__version__,
        "checks": "every cell runs; last cell prints the stored answer; correct = label (reward 1, official "
                  "match); wrong answers reward -1; three distinct votes; erroring cells raise",
    }
    doc["verified"] = stamp
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return stamp


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS_PATH)
    parser.add_argument("--dabench", type=Path, default=None, help="DABench folder (questions, labels, tables/)")
    parser.add_argument("--ids", default="", help="comma-separated question ids (default: all)")
    parser.add_argument("--write", action="store_true", help="stamp 'verified' in the file when all pass")
    args = parser.parse_args(argv)
    solutions = load_solutions(args.solutions)
    questions = list(solutions.questions)
    if args.ids:
        wanted = {int(x) for x in args.ids.split(",") if x.strip()}
        questions = [q for q in questions if q.id in wanted]
    dabench = args.dabench or default_data_dir("dabench")
    checks = verify_all(questions, dabench, progress=lambda c: print(
        f"{'ok ' if c.ok else 'BAD'} {c.id:>4} {c.seconds:5.1f}s " + "; ".join(c.problems), file=sys.stderr))
    failed = [c for c in checks if not c.ok]
    summary = {"questions": len(checks), "passed": len(checks) - len(failed), "failed": [c.id for c in failed]}
    if args.write and not failed and not args.ids:
        summary["stamp"] = write_stamp(args.solutions, checks)
    print(json.dumps(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
