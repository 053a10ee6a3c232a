"""A simulated noisy policy over verified reference solutions (the issue-12 setting, reproducible, no model).

For a history it finds the question (the task turn) and the path so far (the code cells of the assistant
turns), and for each of the ``n`` samples draws one action with an RNG seeded from ``params.seed``, the
history's position in the batch, the history's text and the sample index (deterministic, and different per
history and sample; observations do not enter the seed):

- **continue** the current solution: its next cell, or its ``Formatted answer`` when all its cells ran;
- **switch** to a wrong solution (start it, or continue it where the path already has its first cells);
- **error**: one of the question's erroring cells (a typo'd column, an undefined name).

After an erroring cell the policy fixes it (continues its solution) with probability ``p_fix``. The current
solution is the one that the latest cell unique to one solution belongs to (the correct one while the path has
only shared cells, such as the load cell). Once on a wrong solution it never switches back to the correct one.

Honest by construction: the policy knows only what the reference solutions encode (their cells and the answers
those cells print); it never reads the label. The sampling temperature is ignored (every mode samples from the
same distribution, so a comparison measures the search, not the temperature), and ``mean_logprob`` (asked for
only when a PUCT prior uses it) is a noisy per-action value that is the same on average for right and wrong
continuations, so the prior cannot tell them apart either.
"""

from __future__ import annotations

import enum
import hashlib
import math
import random
from dataclasses import dataclass
from typing import Sequence

from jupiter.llm.base import BasePolicy
from jupiter.llm.types import Completion, FinishReason, PolicyError, SamplingParams
from jupiter.prompts import OBSERVATION_PREFIX, Message, parse_reply

from benchmarks.quality.solutions import Cell, QuestionSolutions, Solution

__all__ = ["Action", "SimOptions", "PathState", "SimulatedPolicy", "read_path"]


class Action(str, enum.Enum):
    """What one sample does."""

    CONTINUE = "continue"
    SWITCH = "switch"
    ERROR = "error"


@dataclass(frozen=True)
class SimOptions:
    """The simulated policy's probabilities and reply statistics (validated; errors name the field).

    Defaults: a single rollout ends on the correct answer about a third of the time (issue 12: 14/40 for one
    ReAct rollout), since each of a solution's 3–4 decisions stays on it with probability ~0.75.
    """

    p_switch: float = 0.2  # per step: start or continue a wrong solution
    p_error: float = 0.15  # per step: emit an erroring cell
    p_fix: float = 0.7  # right after an erroring cell: continue the current solution
    logprob_mean: float = -0.35  # mean token log-prob of a solution's cell or answer (right or wrong alike)
    logprob_error: float = -0.55  # of an erroring cell (typos are a little less likely)
    logprob_noise: float = 0.15  # Gaussian noise on each reply's mean log-prob
    chars_per_token: float = 4.0  # num_tokens = ceil(len(text) / chars_per_token)

    def __post_init__(self) -> None:
        for name in ("p_switch", "p_error", "p_fix"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"SimOptions.{name}: must be a probability in [0, 1], got {value!r}")
        if self.p_switch + self.p_error > 1.0:
            raise ValueError(f"SimOptions.p_switch + p_error: must be <= 1, got {self.p_switch + self.p_error}")
        if self.chars_per_token <= 0:
            raise ValueError(f"SimOptions.chars_per_token: must be > 0, got {self.chars_per_token!r}")
        if self.logprob_noise < 0:
            raise ValueError(f"SimOptions.logprob_noise: must be >= 0, got {self.logprob_noise!r}")


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
    # The path is the task and the assistant turns; observations are left out: the cells are deterministic, and
    # a status-only notebook (``ablate``) then draws exactly what the real sandbox would have drawn.
    text = "\x1e".join(f"{m['role']}\x1f{m['content']}" for m in history
                        if m["role"] != "user" or not m["content"].startswith(OBSERVATION_PREFIX))
    digest = hashlib.blake2b(f"{seed}:{index}:{sample}:".encode() + text.encode(), digest_size=16).hexdigest()
    return random.Random(digest)


class SimulatedPolicy(BasePolicy):
    """``jupiter.llm``-style policy that samples steps of reference solutions (see the module docstring)."""

    name = "simulated"

    def __init__(self, questions: Sequence[QuestionSolutions], options: SimOptions = SimOptions()) -> None:
        super().__init__()
        self.questions = tuple(questions)
        self.options = options

    # -------------------------------------------------------------------------------- one sample

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
