"""The small protocols through which the search sees its collaborators.

The engine never imports a backend: it talks to a policy (``generate``), a notebook sandbox (``open_root``,
``branch``, ``run``) and an optional value model (``evaluate``) through these structural types, so tests can
plug in fakes and production plugs in ``jupiter.llm`` and ``sandbox`` without the search knowing which.
The shapes follow docs/CONTRACTS.md exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from jupiter.prompts import Message

__all__ = [
    "CompletionLike",
    "PolicyLike",
    "ExecutionLike",
    "StateLike",
    "SandboxLike",
    "ReusableSandbox",
    "RestorableState",
    "Value",
]


@runtime_checkable
class CompletionLike(Protocol):
    """One sampled continuation (``jupiter.llm.Completion``)."""

    text: str
    finish_reason: str  # "stop" | "length" | ...
    mean_logprob: float | None  # mean token log-probability, None when the backend gives none
    num_tokens: int


@runtime_checkable
class PolicyLike(Protocol):
    """``jupiter.llm.Policy``: ``generate`` returns ``params.n`` completions per history, in input order."""

    def generate(self, histories: list[list[Message]], params: Any) -> list[list[CompletionLike]]: ...


class ExecStatusLike(Protocol):
    """``sandbox.ExecStatus``: ``value`` is the name tree files record; ``is_infrastructure`` says the sandbox,
    not the code, failed (timeout, memory or disk limit, a dead runtime)."""

    @property
    def value(self) -> str: ...

    @property
    def is_infrastructure(self) -> bool: ...


@runtime_checkable
class ExecutionLike(Protocol):
    """``sandbox.Execution``: the record of one cell run."""

    status: ExecStatusLike
    outputs: list[dict]

    def observation(self) -> str: ...


@runtime_checkable
class StateLike(Protocol):
    """``sandbox.State``: a handle on one notebook state. ``run`` mutates it; ``branch`` copies it."""

    def run(self, code: str, timeout: float | None = None) -> ExecutionLike: ...

    def branch(self) -> StateLike: ...


@runtime_checkable
class RestorableState(Protocol):
    """A state that can hand out a descendant recorded as having run ``cells``, rebuilt by replay when first
    used (``sandbox.State.restore``): how a continued tree gets its leaves' states back cheaply."""

    def restore(self, cells: Sequence[str]) -> StateLike: ...


@runtime_checkable
class SandboxLike(Protocol):
    """``sandbox.Sandbox``: owns the processes; hands out root states."""

    def open_root(self, input_files: Sequence[Path] = ()) -> StateLike: ...


@runtime_checkable
class ReusableSandbox(Protocol):
    """A sandbox that can serve another tree: ``reset()`` closes all its states and drops their files, and says
    whether the sandbox can be used again (``sandbox.Sandbox.reset``). ``close()`` ends it."""

    def reset(self) -> bool: ...

    def close(self) -> None: ...


@runtime_checkable
class Value(Protocol):
    """A value model: one estimate in [-1, 1] per history, in input order (batched by the caller)."""

    def evaluate(self, histories: list[list[Message]]) -> list[float]: ...
