"""Policy backends behind one protocol: ``policy.generate(histories, SamplingParams) -> list[list[Completion]]``.

Backends: OpenAI-compatible HTTP (``openai_http``), vLLM in-process (``vllm_local``), transformers on the CPU
(``hf_local``), and a scripted replay policy (``replay``). ``load_policy(spec)`` picks one from a string.
Heavy libraries (torch, transformers, vLLM) are imported only by their backend's module.
"""

from jupiter.llm.base import child_seeds
from jupiter.llm.replay import ReplayPolicy, ReplayRule, load_replay
from jupiter.llm.spec import DEFAULT_SPEC, load_policy
from jupiter.llm.types import (
    Completion,
    FinishReason,
    Policy,
    PolicyConnectionError,
    PolicyError,
    PolicyResponseError,
    PolicySpecError,
    PolicyStats,
    SamplingParams,
)

__all__ = [
    "Policy",
    "SamplingParams",
    "Completion",
    "FinishReason",
    "PolicyStats",
    "PolicyError",
    "PolicySpecError",
    "PolicyConnectionError",
    "PolicyResponseError",
    "ReplayPolicy",
    "ReplayRule",
    "load_replay",
    "load_policy",
    "child_seeds",
    "DEFAULT_SPEC",
]
