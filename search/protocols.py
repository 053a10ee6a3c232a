"""The protocols through which the search sees its collaborators: every capability it uses is declared here.

The engine never imports a backend: it talks to a policy (``generate``), a notebook sandbox (``open_root``,
``branch``, ``run``) and an optional value model (``evaluate``) through these structural types, so tests can
plug in fakes and production plugs in ``jupiter.llm`` and ``sandbox`` without the search knowing which.
The shapes follow docs/CONTRACTS.md exactly.

Capabilities a collaborator may lack are protocols of their own (``Closable``, ``TokenCounter``, ``Named``,
``ReusableSandbox``, ``RestorableState``, ``BudgetedSandbox``), tested with ``isinstance`` where they are used:
a fake need not implement them, and what the search relies on is written down in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from jupiter.llm.types import SamplingParams
from jupiter.prompts import Message

__all__ = [
    "CompletionLike",
    "PolicyLike",
    "TokenCounter",
    "Named",
    "ExecStatusLike",
    "ExecutionLike",
    "StateLike",
    "SandboxLike",
    "Closable",
    "ReusableSandbox",
    "RestorableState",
    "PrefetchingState",
    "MemoryBudgetLike",
    "BudgetedSandbox",
    "Value",
]


@runtime_checkable
class CompletionLike(Protocol):
    """One sampled continuation (``jupiter.llm.Completion``)."""

    @property
    def text(self) -> str: ...

    @property
    def finish_reason(self) -> str: ...  # "stop" | "length" | ...

    @property
    def mean_logprob(self) -> float | None: ...  # mean token log-probability, None when the backend gives none

    @property
    def num_tokens(self) -> int: ...

    @property
    def prompt_tokens(self) -> int | None: ...  # the continued history's tokens (the same on every sibling)


@runtime_checkable
class PolicyLike(Protocol):
    """``jupiter.llm.Policy``: ``generate`` returns ``params.n`` completions per history, in input order."""

    def generate(self, histories: list[list[Message]], params: SamplingParams,
                 ) -> Sequence[Sequence[CompletionLike]]: ...


@runtime_checkable
class TokenCounter(Protocol):
    """A policy with its own tokenizer (in-process vLLM): the context check counts a history's tokens with it
    instead of estimating them from characters (``SearchConfig.chars_per_token``)."""

    def count_tokens(self, history: list[Message]) -> int: ...


@runtime_checkable
class Named(Protocol):
    """A collaborator with a short name for messages (``jupiter.llm.BasePolicy.name``: "http", "vllm", ...)."""

    @property
    def name(self) -> str: ...


class ExecStatusLike(Protocol):
    """``sandbox.ExecStatus``: ``value`` is the name tree files record; ``is_infrastructure`` says the sandbox,
    not the code, failed (timeout, memory or disk limit, a dead runtime)."""

    @property
    def value(self) -> str: ...

    @property
    def is_infrastructure(self) -> bool: ...


@runtime_checkable
class ExecutionLike(Protocol):
    """``sandbox.Execution``: the record of one cell run (``ok``: it ran to the end without an error;
    ``dropped_chars``: output characters the sandbox did not keep, which tree files record)."""

    @property
    def status(self) -> ExecStatusLike: ...

    @property
    def dropped_chars(self) -> int: ...

    @property
    def outputs(self) -> Sequence[dict[str, Any]]: ...

    @property
    def ok(self) -> bool: ...

    def observation(self, max_chars: int | None = None) -> str: ...


@runtime_checkable
class StateLike(Protocol):
    """``sandbox.State``: a handle on one notebook state. ``run`` mutates it; ``branch`` copies it."""

    def run(self, code: str, timeout: float | None = None) -> ExecutionLike: ...

    def branch(self) -> StateLike: ...


@runtime_checkable
class Closable(Protocol):
    """A state, sandbox or policy that holds resources until ``close()`` (idempotent)."""

    def close(self) -> None: ...


@runtime_checkable
class RestorableState(Protocol):
    """A state that can hand out a descendant recorded as having run ``cells``, rebuilt by replay when first
    used (``sandbox.State.restore``): how a continued tree gets its leaves' states back cheaply."""

    def restore(self, cells: Sequence[str]) -> StateLike: ...


@runtime_checkable
class PrefetchingState(Protocol):
    """A state that can fork its next branches in the background (``sandbox.State.prefetch``): the executor asks
    for a node's K branches before the policy call that writes their cells, so the forks overlap generation."""

    def prefetch(self, n: int) -> None: ...


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


class MemoryBudgetLike(Protocol):
    """``sandbox.MemoryBudget``: how many sandboxes of ``states`` live states each fit (None: unknown yet), and
    its size in bytes (None: unknown), which the driver's notice names."""

    def sandboxes_that_fit(self, states: int) -> int | None: ...

    @property
    def limit_bytes(self) -> int | None: ...


@runtime_checkable
class BudgetedSandbox(Protocol):
    """A sandbox whose live states share a memory budget (``sandbox.Sandbox.memory_budget``; None: none): the
    driver admits no more trees than the budget holds at their peak (``SearchConfig.fit_trees_to_memory``)."""

    @property
    def memory_budget(self) -> MemoryBudgetLike | None: ...


@runtime_checkable
class Value(Protocol):
    """A value model: one estimate in [-1, 1] per history, in input order (batched by the caller)."""

    def evaluate(self, histories: list[list[Message]]) -> Sequence[float]: ...
