"""A simulated noisy policy over hand-written reference solutions: trees of a realistic shape, no model.

Why: ``scale.py`` and the tree viewer's browser test need many real trees (real engine, real sandbox, real
DABench tables) grown in seconds and the same on every run. A model would make them slow and different per
machine; this policy draws steps of reference solutions (``sim_solutions.json``: per DABench dev question one
correct solution, two plausible wrong ones and erroring cells, each ending in a cell that prints its
``@name[value]`` answer) with a seeded RNG. It is a helper of these scripts and tests, not part of the product
(``benchmarks/perf`` is not installed). The study that wrote and verified the solutions and measured the search
against ReAct and voting with this policy is ``benchmarks/quality/`` at commit b134c4f.

For a history it finds the question (the task turn) and the path so far (the code cells of the assistant
turns), and for each of the ``n`` samples draws one action with an RNG seeded from ``params.seed``, the
history's position in the batch, the history's text without observations and the sample index:

- **continue** the current solution: its next cell, or its ``Formatted answer`` when all its cells ran;
- **switch** to a wrong solution (start it, or continue it where the path already has its first cells);
- **error**: one of the question's erroring cells (a typo'd column, an undefined name).

After an erroring cell it fixes it (continues its solution) with probability ``p_fix``. The current solution is
the one the latest cell unique to one solution belongs to (the correct one while the path has only shared cells,
such as the load cell); a wrong path never switches back. It never reads the label; the temperature is ignored;
``mean_logprob`` (only when asked for) is noise that is the same on average for right and wrong steps.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from jupiter.config_model import ConfigModel, PositiveFloat
from jupiter.llm.base import BasePolicy
from jupiter.llm.types import Completion, FinishReason, PolicyError, SamplingParams
from jupiter.prompts import OBSERVATION_PREFIX, Message, parse_reply
from jupiter.task import Task, TaskKind

__all__ = ["SOLUTIONS_PATH", "Cell", "Solution", "QuestionSolutions", "load_solutions", "ordered_questions",
           "task_for", "tasks_for", "Action", "SimOptions", "PathState", "read_path", "SimulatedPolicy"]

SOLUTIONS_PATH = Path(__file__).resolve().parent / "sim_solutions.json"


@dataclass(frozen=True)
class Cell:
    """One step of a solution: the thought the policy writes and the code it runs."""

    thought: str
    code: str


@dataclass(frozen=True)
class Solution:
    """A path of cells; its last cell prints ``answer`` (the text after ``Formatted answer:``)."""

    name: str
    cells: tuple[Cell, ...]
    answer: str


@dataclass(frozen=True)
class QuestionSolutions:
    """Everything the simulated policy knows about one DABench question (it never sees ``label``)."""

    id: int
    level: str
    file: str
    question: str
    label: str
    correct: Solution
    wrong: tuple[Solution, ...]
    errors: tuple[Cell, ...]

    @property
    def solutions(self) -> tuple[Solution, ...]:
        """The correct solution first, then the wrong ones (the policy's solution indices)."""
        return (self.correct, *self.wrong)


def _cells(raw: Any) -> tuple[Cell, ...]:
    return tuple(Cell(thought=str(c.get("thought", "")), code=str(c["code"])) for c in raw)


def _solution(raw: dict[str, Any]) -> Solution:
    return Solution(name=str(raw.get("name", "")), cells=_cells(raw["cells"]), answer=str(raw["answer"]))


def load_solutions(path: str | Path = SOLUTIONS_PATH) -> tuple[QuestionSolutions, ...]:
    """The questions of a solutions file, in file order. Raises ``ValueError`` naming the question id of a
    record that lacks a field or has no wrong solution or erroring cell."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    questions = []
    for raw in doc["questions"]:
        try:
            question = QuestionSolutions(
                id=int(raw["id"]), level=str(raw["level"]), file=str(raw["file"]), question=str(raw["question"]),
                label=str(raw["label"]), correct=_solution(raw["correct"]),
                wrong=tuple(_solution(w) for w in raw["wrong"]), errors=_cells(raw["errors"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: question {raw.get('id')!r}: missing or malformed {exc}") from None
        if not question.wrong or not question.errors:
            raise ValueError(f"{path}: question {question.id}: needs a wrong solution and an erroring cell")
        questions.append(question)
    return tuple(questions)


def ordered_questions(questions: Sequence[QuestionSolutions], limit: int | None = None) -> list[QuestionSolutions]:
    """Questions interleaved by level (easy, medium, hard, easy, ...) so that any prefix mixes the levels."""
    by_level: dict[str, list[QuestionSolutions]] = {}
    for question in sorted(questions, key=lambda q: q.id):
        by_level.setdefault(question.level, []).append(question)
    order = [level for level in ("easy", "medium", "hard") if level in by_level] + \
        sorted(set(by_level) - {"easy", "medium", "hard"})
    out: list[QuestionSolutions] = []
    while any(by_level[level] for level in order):
        for level in order:
            if by_level[level]:
                out.append(by_level[level].pop(0))
    return out[:limit] if limit else out


def task_for(question: QuestionSolutions, dabench_dir: str | Path, record: dict[str, Any] | None = None) -> Task:
    """The DABench task of ``question`` (constraints and format from the official question record when given)."""
    record = record or {}
    return Task(
        id=str(question.id), question=question.question, constraints=str(record.get("constraints") or ""),
        format=str(record.get("format") or ""), files=(Path(dabench_dir) / "tables" / question.file,),
        label=question.label, concepts=tuple(record.get("concepts") or ()), level=question.level,
        kind=TaskKind.QA, metadata={"benchmark": "dabench"},
    )


def tasks_for(questions: Sequence[QuestionSolutions], dabench_dir: str | Path) -> list[Task]:
    """Tasks for ``questions``, with constraints and format read from ``da-dev-questions.jsonl`` when present."""
    source = Path(dabench_dir) / "da-dev-questions.jsonl"
    records: dict[int, dict[str, Any]] = {}
    if source.is_file():
        for line in source.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                records[int(record["id"])] = record
    return [task_for(q, dabench_dir, records.get(q.id)) for q in questions]


class Action(str, enum.Enum):
    """What one sample does."""

    CONTINUE = "continue"
    SWITCH = "switch"
    ERROR = "error"


_Probability = Annotated[float, Field(ge=0, le=1)]


class SimOptions(ConfigModel):
    """The policy's probabilities and reply statistics (validated; errors name the field).

    Defaults: one rollout ends on the correct answer about 40 % of the time, since each of a solution's 3-4
    decisions stays on it with probability ~0.75.
    """

    p_switch: _Probability = 0.2  # per step: start or continue a wrong solution
    p_error: _Probability = 0.15  # per step: emit an erroring cell
    p_fix: _Probability = 0.7  # right after an erroring cell: continue the current solution
    logprob_mean: float = -0.35  # mean token log-prob of a solution's cell or answer (right or wrong alike)
    logprob_error: float = -0.55  # of an erroring cell
    logprob_noise: float = Field(0.15, ge=0)  # Gaussian noise on each reply's mean log-prob
    chars_per_token: PositiveFloat = 4.0  # num_tokens = ceil(len(text) / chars_per_token)

    @model_validator(mode="after")
    def _one_choice_per_step(self) -> SimOptions:
        if self.p_switch + self.p_error > 1.0:
            raise ValueError(f"p_switch + p_error: must be <= 1, got {self.p_switch + self.p_error}")
        return self



@dataclass(frozen=True)
class PathState:
    """Where a history stands: its question, the cells it ran, the current solution and whether it just erred."""

    question: QuestionSolutions
    codes: tuple[str, ...]
    current: int  # index into question.solutions (0 = correct)
    last_was_error: bool

    def progress(self, solution: Solution) -> int:
        """How many leading cells of ``solution`` the path has run (in any order, shared cells included)."""
        ran = set(self.codes)
        count = 0
        for cell in solution.cells:
            if cell.code not in ran:
                break
            count += 1
        return count


def read_path(history: Sequence[Message], questions: Sequence[QuestionSolutions]) -> PathState:
    """The question and path of ``history`` (raises ``PolicyError`` for a task it has no solutions for)."""
    task_turn = next((m["content"] for m in history if m["role"] == "user"), "")
    matches = [q for q in questions if task_turn.startswith(f"Task: {q.question.strip()}")]
    if not matches:
        raise PolicyError(f"simulated policy: no reference solutions for the task {task_turn[:80]!r}")
    question = max(matches, key=lambda q: len(q.question))
    codes = tuple(parsed.code for parsed in (parse_reply(m["content"]) for m in history if m["role"] == "assistant")
                  if parsed.code)
    owners: dict[str, set[int]] = {}
    for index, solution in enumerate(question.solutions):
        for cell in solution.cells:
            owners.setdefault(cell.code, set()).add(index)
    errors = {cell.code for cell in question.errors}
    current = 0
    for code in reversed(codes):
        owner = owners.get(code, set())
        if len(owner) == 1:
            current = next(iter(owner))
            break
    last_was_error = bool(codes) and codes[-1] in errors
    return PathState(question, codes, current, last_was_error)


def _rng(seed: int | None, index: int, history: Sequence[Message], sample: int) -> random.Random:
    # the path is the task and the assistant turns; observations are left out (the cells are deterministic)
    text = "\x1e".join(f"{m['role']}\x1f{m['content']}" for m in history
                        if m["role"] != "user" or not m["content"].startswith(OBSERVATION_PREFIX))
    digest = hashlib.blake2b(f"{seed}:{index}:{sample}:".encode() + text.encode(), digest_size=16).hexdigest()
    return random.Random(digest)


DEFAULT_OPTIONS = SimOptions()


class SimulatedPolicy(BasePolicy):
    """``jupiter.llm``-style policy that samples steps of reference solutions (see the module docstring)."""

    name = "simulated"

    def __init__(self, questions: Sequence[QuestionSolutions], options: SimOptions = DEFAULT_OPTIONS) -> None:
        super().__init__()
        self.questions = tuple(questions)
        self.options = options

    def draw(self, state: PathState, rng: random.Random) -> tuple[Action, str]:
        """One action and its reply text for a path."""
        o = self.options
        u = rng.random()
        if state.last_was_error:
            if u < o.p_fix:
                action = Action.CONTINUE
            else:  # no fix: another error or a different solution, in the ratio of their base rates
                rest = o.p_error + o.p_switch
                action = Action.ERROR if rest > 0 and rng.random() < o.p_error / rest else Action.SWITCH
        elif u < o.p_error:
            action = Action.ERROR
        elif u < o.p_error + o.p_switch:
            action = Action.SWITCH
        else:
            action = Action.CONTINUE
        question = state.question
        if action is Action.ERROR:
            return action, _code_reply(rng.choice(question.errors))
        target = state.current
        if action is Action.SWITCH:
            others = [i for i in range(1, len(question.solutions)) if i != state.current]
            if others:
                target = rng.choice(others)
            else:
                action = Action.CONTINUE
        solution = question.solutions[target]
        done = state.progress(solution)
        if done >= len(solution.cells):
            return action, _answer_reply(solution)
        return action, _code_reply(solution.cells[done])

    def _completion(self, action: Action, text: str, params: SamplingParams, rng: random.Random) -> Completion:
        o = self.options
        tokens = max(1, math.ceil(len(text) / o.chars_per_token))
        reason = FinishReason.STOP.value
        if tokens > params.max_tokens:
            text = text[: int(params.max_tokens * o.chars_per_token)]
            tokens, reason = params.max_tokens, FinishReason.LENGTH.value
        logprob = None
        if params.logprobs:
            base = o.logprob_error if action is Action.ERROR else o.logprob_mean
            logprob = min(-1e-3, base + rng.gauss(0.0, o.logprob_noise))
        return Completion(text=text, finish_reason=reason, mean_logprob=logprob, num_tokens=tokens)

    def _generate(self, histories: list[list[Message]], params: SamplingParams) -> list[list[Completion]]:
        outs = []
        for index, history in enumerate(histories):
            state = read_path(history, self.questions)
            samples = []
            for j in range(params.n):
                rng = _rng(params.seed, index, history, j)
                action, text = self.draw(state, rng)
                samples.append(self._completion(action, text, params, rng))
            outs.append(samples)
        return outs


def _code_reply(cell: Cell) -> str:
    return f"Thought: {cell.thought}\nAction:\n```python\n{cell.code}\n```\n"


def _answer_reply(solution: Solution) -> str:
    return f"Thought: The output above answers the question.\nFormatted answer: {solution.answer.strip()}"
