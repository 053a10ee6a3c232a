"""Run a drafted solution in the project's sandbox and turn it into an NbQA task with a real label.

Why run it: the label must come from the code's real output, exactly as the policy would see it in a search
(the observation text is ``Execution.observation()``, the text the search shows the model). Each step runs in
one notebook state, in order; the last steps print every answer as ``name: value`` and the label is built from
those lines. A draft is dropped when a step fails unexpectedly, an answer is missing or not a finite value, or
when a second run of the finished solution in a fresh state does not reproduce the label
(``nbqa_pipeline.verify.verify_task``).

Error-and-fix variants (a share of the tasks, chosen by the task's generator): the first computing step is
first written with a realistic mistake — a wrong column name (lower case or a typo) or a missing ``numpy``
import — its real traceback is the observation, and the next step says what was wrong and runs the corrected
code. A variant whose mistake does not fail is not used. Recipe 2 adds the two mistakes the first fine-tuned
default made most on DABench: a loosely worded question's own words used as the column name
(``df['fare_paid']`` for ``Fare``), and a column the question asks to create used before it is created; and
it marks each mistaken step (``"mistake": true``) so that training can leave it out of the loss — the model
should learn the recovery, not the mistake.
"""

from __future__ import annotations

import enum
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbqa_pipeline.synth.programs import Draft, Step
from nbqa_pipeline.synth.wording import loose_name
from nbqa_pipeline.verify import VerifyConfig, verify_task

__all__ = ["Mistake", "SolvedTask", "DropReason", "with_mistake", "run_draft"]

_MAX_VALUE_CHARS = 60
_FIX_OPENINGS = ("There is no column", "I forgot")
#: the sentences ``nbqa_pipeline.synth.wording.loosen`` puts in front of a loosely worded task's first thought
_MAPPING = re.compile(r"^(?:\"[^\"]*\" is the column .+?\. )+")


class Mistake(str, enum.Enum):
    NONE = "none"
    COLUMN_NAME = "column_name"
    MISSING_IMPORT = "missing_import"
    QUESTION_WORDS = "question_words"  # recipe 2
    NOT_CREATED = "not_created"  # recipe 2


class DropReason(str, enum.Enum):
    STEP_FAILED = "step_failed"
    ANSWER_MISSING = "answer_missing"
    ANSWER_INVALID = "answer_invalid"
    NOT_REPRODUCED = "not_reproduced"
    INFRASTRUCTURE = "infrastructure"


@dataclass(frozen=True)
class SolvedTask:
    """A draft that ran: its steps with their real observations, the label and the final thought."""

    draft: Draft
    steps: tuple[dict[str, str], ...]
    answers: dict[str, str]
    label: str
    final_thought: str
    mistake: Mistake


def _wrong_name(column: str) -> str | None:
    lower = column.lower()
    if lower != column:
        return lower
    if len(column) > 3:
        return column[:-1] if column[-1] not in "._" else column + "x"
    return None


def _question_words(draft: Draft) -> tuple[str, str] | None:
    """(the question's words for ``draft.column``, those words as a column name) when the question is loosely
    worded (``loosen``): ``("fare paid", "fare_paid")``."""
    if draft.column is None or not any(_MAPPING.match(step.thought) for step in draft.steps):
        return None
    words = loose_name(draft.column)
    if words is None or words not in draft.question + draft.constraints:
        return None
    return words, words.replace(" ", "_")


def _creation_step(draft: Draft, steps: list[Step]) -> int | None:
    """Index of the step that creates ``draft.creates`` when a later step uses it."""
    if draft.creates is None:
        return None
    made = f"df[{draft.creates!r}] ="
    for index, step in enumerate(steps[:-1]):
        if made in step.code and repr(draft.creates) in steps[index + 1].code:
            return index
    return None


def with_mistake(draft: Draft, rng: random.Random, recipe: int = 1) -> tuple[tuple[Step, ...], Mistake]:
    """The draft's steps with one realistic mistake and its fix put in front of the first step that can carry
    it; ``Mistake.NONE`` with the steps unchanged when none applies. ``recipe`` 2 adds the question-words and
    used-before-created mistakes (recipe 1 draws exactly as before, so its data stays reproducible)."""
    steps = list(draft.steps)
    choices = []
    if draft.column is not None and _wrong_name(draft.column):
        choices.append(Mistake.COLUMN_NAME)
    if any("import numpy as np\n" in s.code for s in steps):
        choices.append(Mistake.MISSING_IMPORT)
    if recipe >= 2 and _question_words(draft) is not None:
        choices.append(Mistake.QUESTION_WORDS)
    if recipe >= 2 and _creation_step(draft, steps) is not None:
        choices.append(Mistake.NOT_CREATED)
    if not choices:
        return tuple(steps), Mistake.NONE
    mistake = rng.choice(choices)
    if mistake in (Mistake.QUESTION_WORDS, Mistake.COLUMN_NAME):
        assert draft.column is not None
        if mistake is Mistake.QUESTION_WORDS:
            words, wrong = _question_words(draft)  # type: ignore[misc]
            why = f"the question's \"{words}\" is the column {draft.column!r} in the printed column list"
        else:
            wrong, why = _wrong_name(draft.column), f"it is called {draft.column!r}"
        for index, step in enumerate(steps):
            if repr(draft.column) in step.code:
                # the mistaken step has not read the column list yet: no "<phrase> is the column ..." sentence
                bad = Step(_MAPPING.sub("", step.thought), step.code.replace(repr(draft.column), repr(wrong)))
                fix = Step(f"There is no column {wrong!r}: {why}. I will use the exact name.", step.code)
                return tuple(steps[:index] + [bad, fix] + steps[index + 1:]), mistake
        return tuple(steps), Mistake.NONE
    if mistake is Mistake.NOT_CREATED:
        assert draft.creates is not None
        index = _creation_step(draft, steps)
        assert index is not None
        create, use = steps[index], steps[index + 1]
        bad = Step(use.thought, use.code)
        fix = Step(f"There is no column {draft.creates!r} yet: the question asks me to create it, so I create it "
                   f"first and then compute. {create.thought}", f"{create.code}\n\n{use.code}")
        return tuple(steps[:index] + [bad, fix] + steps[index + 2:]), mistake
    for index, step in enumerate(steps):
        if "import numpy as np\n" in step.code:
            bad = Step(step.thought, step.code.replace("import numpy as np\n", "").lstrip("\n"))
            fix = Step("I forgot to import numpy. Import it and run the step again.", step.code)
            return tuple(steps[:index] + [bad, fix] + steps[index + 1:]), mistake
    return tuple(steps), Mistake.NONE


def _answer_values(text: str, names: tuple[str, ...]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in names:
        matches = re.findall(rf"^{re.escape(name)}: (.+?)\s*$", text, flags=re.MULTILINE)
        if matches:
            found[name] = matches[-1]
    return found


def _valid(value: str) -> bool:
    if not value or len(value) > _MAX_VALUE_CHARS or "[" in value or "]" in value:
        return False
    try:
        return math.isfinite(float(value))
    except ValueError:
        return value.lower() not in ("nan", "nat", "inf", "-inf", "<na>")


def run_draft(sandbox: Any, draft: Draft, data_file: Path, steps: tuple[Step, ...], mistake: Mistake,
              mark_mistakes: bool = False) -> SolvedTask | DropReason:
    """Run ``steps`` (the draft's, perhaps with a mistake) on ``data_file``, each within ``sandbox``'s cell
    timeout; the solved task or why it was dropped. ``mark_mistakes``: the mistaken step's record gets
    ``"mistake": true`` (recipe 2)."""
    failing = _failing_steps(steps) if mistake is not Mistake.NONE else set()
    state = sandbox.open_root(input_files=[data_file])
    records: list[dict[str, str]] = []
    try:
        for index, step in enumerate(steps):
            execution = state.run(step.code)
            if execution.status.is_infrastructure:
                return DropReason.INFRASTRUCTURE
            if (index in failing) == execution.ok:  # a mistake that did not fail, or a step that did
                return DropReason.STEP_FAILED
            record = {"thought": step.thought, "python_code": step.code, "code_output": execution.observation()}
            if mark_mistakes and index in failing:
                record["mistake"] = True
            records.append(record)
    finally:
        state.close()
    answers = _answer_values("\n".join(r["code_output"] for r in records), draft.answers)
    if len(answers) != len(draft.answers):
        return DropReason.ANSWER_MISSING
    if not all(_valid(v) for v in answers.values()):
        return DropReason.ANSWER_INVALID
    label = " ".join(f"@{name}[{answers[name]}]" for name in draft.answers)
    check = verify_task(sandbox, {"task_id": "synth-check", "label": label,
                                  "steps": [r for i, r in enumerate(records) if i not in failing]},
                        [data_file], VerifyConfig())
    if check.get("status") == "infra_error":
        return DropReason.INFRASTRUCTURE
    if not check.get("reproduced"):
        return DropReason.NOT_REPRODUCED
    final = draft.final_thought.format(**answers)
    return SolvedTask(draft, tuple(records), answers, label, final, mistake)


def _failing_steps(steps: tuple[Step, ...]) -> set[int]:
    """Indices of a mistake variant's failing steps (each right before its fix), left out of the re-run."""
    return {i for i in range(len(steps) - 1) if steps[i + 1].thought.startswith(_FIX_OPENINGS)}
