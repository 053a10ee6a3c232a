"""The in-process vLLM backend's scheduler settings: on a CPU build no prompt is ever split across steps.

Fast (no engine is built); skipped where vLLM is not installed. The engine-level test is
``test_vllm_batched_seeds.py`` (slow).
"""

import pytest

vllm = pytest.importorskip("vllm")

from jupiter.llm.types import PolicySpecError  # noqa: E402
from jupiter.llm.vllm_local import VllmConfig, _scheduler_settings  # noqa: E402


def _on_cpu(monkeypatch, cpu: bool) -> None:
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self: cpu, raising=False)


def test_cpu_builds_prefill_every_prompt_whole(monkeypatch):
    _on_cpu(monkeypatch, True)
    assert _scheduler_settings(VllmConfig()) == {"enable_chunked_prefill": False, "max_num_batched_tokens": 4096}
    # the step budget grows with the context, so the longest prompt still fits one step
    assert _scheduler_settings(VllmConfig(max_model_len=8192))["max_num_batched_tokens"] == 8192
    assert _scheduler_settings(VllmConfig(chunked_prefill=True)) == {"enable_chunked_prefill": True}


def test_other_builds_keep_vllms_defaults(monkeypatch):
    _on_cpu(monkeypatch, False)
    assert _scheduler_settings(VllmConfig()) == {}
    assert _scheduler_settings(VllmConfig(chunked_prefill=False)) == {"enable_chunked_prefill": False}


def test_the_spec_option_and_its_errors():
    assert VllmConfig.from_spec("default", {"chunked_prefill": "1"}, "vllm:default#chunked_prefill=1").chunked_prefill
    assert VllmConfig.from_spec("default", {"chunked_prefill": "0"}, "s").chunked_prefill is False
    assert VllmConfig.from_spec("default", {"chunked_prefill": "auto"}, "s").chunked_prefill is None
    with pytest.raises(PolicySpecError, match="chunked_prefill"):
        VllmConfig(chunked_prefill="yes")
