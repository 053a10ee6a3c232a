"""One definition of prompt tokens (each history once per call, whatever the K samples cost) and a prefix-cache
hit rate that counts reuse across turns apart from the K requests of one expansion sharing their prompt.

Before: a seeded solve on vLLM reported ``result.stats.prompt_tokens`` 3,897 and ``policy_stats.prompt_tokens``
11,691 (K = 3 requests per history), and its hit rate counted the siblings' hits on each other as reuse."""

from __future__ import annotations

import pytest

from jupiter.llm import SamplingParams, load_policy
from jupiter.llm.base import RequestUsage, prompt_usage
from jupiter.task import Task

HISTORIES = [
    [{"role": "system", "content": "You analyse data."}, {"role": "user", "content": "Task: the mean fare?"}],
    [{"role": "user", "content": "Task: one two three four five six"}],
]


def test_k_requests_of_one_history_count_its_prompt_once_and_their_hits_on_each_other_apart():
    requests = [RequestUsage(0, 300, 256), RequestUsage(0, 300, 288), RequestUsage(0, 300, 288),  # history 0
                RequestUsage(1, 40, 0), RequestUsage(1, 40, 32), RequestUsage(1, 40, 32),
                RequestUsage(2, None, None)]  # a request whose usage the server did not report
    assert prompt_usage(requests) == {"prompt_tokens": 340, "sent_prompt_tokens": 1020,
                                      "cached_prompt_tokens": 256, "sibling_cached_prompt_tokens": 640}
    assert prompt_usage([RequestUsage(0, 10)], samples_per_request=3) == {"prompt_tokens": 10,
                                                                        "sent_prompt_tokens": 30}


def test_rates_are_over_their_own_denominators():
    from jupiter.llm import PolicyStats

    stats = PolicyStats(prompt_tokens=340, sent_prompt_tokens=1020, cached_prompt_tokens=256,
                        sibling_cached_prompt_tokens=640)
    assert stats.prefix_cache_hit_rate == pytest.approx(256 / 340)
    assert stats.sibling_cache_hit_rate == pytest.approx(640 / 680)
    assert stats.to_dict()["sibling_cache_hit_rate"] == stats.sibling_cache_hit_rate
    assert PolicyStats(prompt_tokens=5, sent_prompt_tokens=5).sibling_cache_hit_rate is None


@pytest.mark.parametrize("seed", [None, 5], ids=["one-request-n3", "seeded-request-per-child"])
def test_http_counts_each_history_once_however_many_requests(scripted_openai, seed):
    with load_policy(f"{scripted_openai.url}#model=scripted-model&mode=chat") as policy:
        policy.generate(HISTORIES, SamplingParams(n=3, seed=seed, max_tokens=20))
        stats = policy.stats()
    assert stats.prompt_tokens == 14  # the fixture reports 7 per request
    assert stats.sent_prompt_tokens == (42 if seed is not None else 14)
    assert stats.requests == (6 if seed is not None else 2)


TASK = Task(id="t", question="What is 2 + 3? Print it with Python.", format="@x[value]", label="@x[5]")


def _solve(policy) -> tuple[object, object]:
    from sandbox import Sandbox, SandboxConfig
    from search import Mode, SearchConfig, run_search

    config = SearchConfig(mode=Mode.INFER, iterations=2, expansions=3, max_tokens=24)
    with Sandbox(SandboxConfig()) as sandbox:
        result = run_search(TASK, policy, sandbox, config, seed=11)
    return result, policy.stats()


@pytest.mark.slow
def test_a_solve_on_the_real_tiny_model_reports_one_prompt_token_figure():
    """transformers (``hf:default``): the tree's count is the policy's; the K samples re-read the prompt."""
    pytest.importorskip("transformers")
    policy = load_policy("hf:default")
    try:
        result, stats = _solve(policy)
    finally:
        policy.close()
    assert result.stats.prompt_tokens == stats.prompt_tokens > 0
    assert stats.sent_prompt_tokens == 3 * stats.prompt_tokens
    assert stats.cached_prompt_tokens is None and stats.prefix_cache_hit_rate is None  # no prefix cache


@pytest.mark.slow
def test_a_seeded_vllm_solve_separates_cross_turn_reuse_from_sibling_sharing():
    """vLLM in process: each of the K seeded samples is its own request (one seed per request), yet the prompt
    is counted once, and the hit rate is reuse across turns and nodes only."""
    pytest.importorskip("vllm")
    policy = load_policy("vllm:default")
    try:
        result, stats = _solve(policy)
    finally:
        policy.close()
    assert result.stats.prompt_tokens == stats.prompt_tokens > 0
    assert stats.sent_prompt_tokens == 3 * stats.prompt_tokens and stats.requests >= 3 * stats.prompts
    assert stats.cached_prompt_tokens is not None and stats.sibling_cached_prompt_tokens is not None
    # the second iteration's histories start with the root's system prompt and task (> one 128-token block)
    assert 0 < stats.cached_prompt_tokens < stats.prompt_tokens
    assert 0 <= stats.prefix_cache_hit_rate < 1
