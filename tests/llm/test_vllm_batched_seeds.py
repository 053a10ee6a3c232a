"""A batch of seeded requests larger than one engine step, through the real in-process vLLM engine.

Why: vLLM 0.32.0's CPU build crashed (``CPU Generator does not use offset``) when the scheduler split a seeded
request's prefill across steps, which happens as soon as a batch's prompts exceed the step token budget. The
backend now runs CPU engines with chunked prefill off and a budget of at least ``max_model_len``.

Slow (an engine start and a multi-step batch on CPU); skipped where vLLM is not installed.
"""

import pytest

from jupiter.llm import SamplingParams
from jupiter.llm.vllm_local import VllmConfig, VllmPolicy

vllm = pytest.importorskip("vllm")
pytestmark = pytest.mark.slow

REQUESTS = 24
MIN_PROMPT_TOKENS = 300


def _history(i: int) -> list[dict[str, str]]:
    """A distinct DABench-like task turn of 300+ tokens (distinct, so the prefix cache cannot shrink it)."""
    question = (f"Question {i}: in sales_{i}.csv, group the rows by region, compute the median of column "
                f"revenue_{i} and report the region with the highest median. ")
    return [
        {"role": "system", "content": "You are an expert data analyst who solves tasks by writing Python."},
        {"role": "user", "content": question * 12},
    ]


@pytest.fixture(scope="module")
def policy():
    policy = VllmPolicy(VllmConfig())
    try:
        yield policy
    finally:
        policy.close()


def test_cpu_engine_never_splits_a_prompt(policy):
    from vllm.platforms import current_platform

    scheduler = policy.llm.llm_engine.vllm_config.scheduler_config
    if current_platform.is_cpu():
        assert scheduler.enable_chunked_prefill is False
    if not scheduler.enable_chunked_prefill:
        assert scheduler.max_num_batched_tokens >= policy.config.max_model_len  # any prompt fits one step


def test_seeded_batch_larger_than_a_step_returns_every_request_reproducibly(policy):
    histories = [_history(i) for i in range(REQUESTS)]
    lengths = [policy.count_tokens(h) for h in histories]  # what the search's context check measures
    assert min(lengths) >= MIN_PROMPT_TOKENS
    scheduler = policy.llm.llm_engine.vllm_config.scheduler_config
    assert sum(lengths) > scheduler.max_num_batched_tokens  # the batch needs several steps

    params = SamplingParams(n=1, max_tokens=8, seed=11)
    first = policy.generate(histories, params)
    assert len(first) == REQUESTS
    assert all(len(outs) == 1 and outs[0].num_tokens >= 1 for outs in first)
    assert [outs[0].prompt_tokens for outs in first] == lengths  # count_tokens counts what the engine saw

    # the same seeds on the same schedule give the same texts (the prefix cache is emptied so that the second
    # batch is computed exactly as the first; a cached prefix changes the kernels' shapes and so the logits'
    # last bits, which can flip a sampled token)
    assert policy.llm.reset_prefix_cache()
    again = policy.generate(histories, params)
    assert [o[0].text for o in again] == [o[0].text for o in first]

    assert policy.llm.reset_prefix_cache()
    other = policy.generate(histories, SamplingParams(n=1, max_tokens=8, seed=12))
    assert [o[0].text for o in other] != [o[0].text for o in first]  # the seed is what decides
