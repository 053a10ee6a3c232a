"""In-test fakes for the search's collaborators (pure-logic tests only; integration tests use the real ones).

FakeSandbox runs cells with ``exec`` in a copied namespace (a state is a dict), so branching is a copy and
errors are real Python exceptions. A cell containing ``INFRA_TIMEOUT`` comes back with a TIMEOUT status.
FakePolicy answers from a script keyed on a substring of the last user message, like the replay policy.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import io
from collections.abc import Callable
from dataclasses import dataclass, field


class FakeStatus(str, enum.Enum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"

    @property
    def is_infrastructure(self) -> bool:
        return self is FakeStatus.TIMEOUT


@dataclass
class FakeExecution:
    status: FakeStatus
    text: str
    outputs: list = field(default_factory=list)
    dropped_chars: int = 0

    @property
    def ok(self) -> bool:
        return self.status is FakeStatus.OK

    def observation(self, max_chars: int | None = None) -> str:
        return self.text if max_chars is None else self.text[:max_chars]


class FakeState:
    def __init__(self, namespace: dict, sandbox: FakeSandbox) -> None:
        self.namespace = namespace
        self.sandbox = sandbox
        self.closed = False
        sandbox.states.append(self)

    def branch(self) -> FakeState:
        assert not self.closed, "branching a released state"
        self.sandbox.branches += 1
        return FakeState({k: copy.copy(v) for k, v in self.namespace.items() if k != "__builtins__"}, self.sandbox)

    def run(self, code: str, timeout: float | None = None) -> FakeExecution:
        assert not self.closed, "running in a released state"
        self.sandbox.cells += 1
        if "INFRA_TIMEOUT" in code:
            return FakeExecution(FakeStatus.TIMEOUT, "TimeoutError: the cell ran past its limit")
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer):
                exec(code, self.namespace)  # test fake
        except Exception as exc:  # the cell's error is data
            return FakeExecution(FakeStatus.ERROR, buffer.getvalue() + f"{type(exc).__name__}: {exc}")
        text = buffer.getvalue()
        return FakeExecution(FakeStatus.OK, text, [{"output_type": "stream", "name": "stdout", "text": text}])

    def close(self) -> None:
        self.closed = True


class FakeSandbox:
    def __init__(self) -> None:
        self.branches = 0
        self.cells = 0
        self.closed = False
        self.states: list[FakeState] = []  # every state it handed out, in order

    def open_root(self, input_files=()) -> FakeState:
        return FakeState({}, self)

    def close(self) -> None:
        self.closed = True


@dataclass(frozen=True)
class FakeCompletion:
    text: str
    finish_reason: str = "stop"
    mean_logprob: float | None = None
    num_tokens: int = 5
    prompt_tokens: int | None = None


class FakePolicy:
    """``script``: list of (substring of the last user message, replies). Replies cycle for n > len."""

    def __init__(self, script: list[tuple[str, list[str]]], logprobs: dict[str, float] | None = None,
                 finish: Callable[[str], str] | None = None) -> None:
        self.script = script
        self.logprobs = logprobs or {}
        self.finish = finish or (lambda text: "stop")
        self.calls: list[tuple[int, int]] = []  # (histories, n) per call

    def replies_for(self, history: list[dict]) -> list[str]:
        last = [m for m in history if m["role"] == "user"][-1]["content"]
        for key, replies in self.script:
            if key in last:
                return replies
        return [""]

    def generate(self, histories, params):
        self.calls.append((len(histories), params.n))
        out = []
        for history in histories:
            replies = self.replies_for(history)
            out.append([
                FakeCompletion(r, self.finish(r), self.logprobs.get(r) if params.logprobs else None)
                for r in (replies[j % len(replies)] for j in range(params.n))
            ])
        return out


def code(thought: str, source: str) -> str:
    return f"Thought: {thought}\nAction:\n```python\n{source}\n```\n"


def answer(text: str) -> str:
    return f"Thought: done\nFormatted answer: {text}"


class ConstantValue:
    def __init__(self, value: float) -> None:
        self.value = value
        self.calls = 0

    def evaluate(self, histories):
        self.calls += 1
        return [self.value] * len(histories)
