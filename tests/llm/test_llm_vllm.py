"""Real vLLM: the in-process backend, and the HTTP backend against a real OpenAI-compatible vLLM server.

Slow (each engine start takes tens of seconds on CPU); skipped where vLLM is not installed.
"""

import random
from pathlib import Path
from random import Random

import pytest

from jupiter.llm import SamplingParams, load_policy
from jupiter.llm.machine_dtype import cpu_dtype
from jupiter.llm.openai_http import HttpConfig, HttpPolicy

vllm = pytest.importorskip("vllm")
pytestmark = pytest.mark.slow

TASK = [
    {"role": "system", "content": "You are an expert data analyst who solves tasks by writing Python."},
    {"role": "user", "content": "Task: compute the mean of the column fare in data.csv."},
]
OTHER = [{"role": "user", "content": "Count from 1 to 10: 1, 2, 3,"}]
LONG_TASK = [TASK[0], {"role": "user", "content": TASK[1]["content"] + " Explain every step. " * 60}]


def _check(outs, n, max_tokens):
    assert [len(o) for o in outs] == [n] * len(outs)
    for completion in (c for o in outs for c in o):
        assert completion.finish_reason in ("stop", "length")
        assert 1 <= completion.num_tokens <= max_tokens
        assert "Observation:" not in completion.text


def test_in_process_batch_seeds_and_prefix_cache():
    torch = pytest.importorskip("torch")
    random.seed(123)
    torch.manual_seed(5)
    # the base model: the fine-tuned default is confident enough on TASK that three seeds may all sample the same
    # 16 tokens, and this test is about the engine's seeds and cache, not about the adapter
    policy = load_policy("vllm:default-base")
    try:
        # building the engine left the caller's random streams where they were
        assert random.random() == Random(123).random()
        assert torch.equal(torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(5)))
        params = SamplingParams(n=3, max_tokens=16, seed=7, logprobs=True)
        outs = policy.generate([TASK, OTHER], params)
        _check(outs, 3, 16)
        assert all(c.mean_logprob is not None and c.mean_logprob < 0 for o in outs for c in o)
        assert len({c.text for c in outs[0]}) > 1  # per-child seeds: siblings differ
        assert policy.generate([TASK, OTHER], params) == outs  # reproducible
        policy.generate([LONG_TASK], SamplingParams(n=2, max_tokens=4))
        stats = policy.stats()
        assert stats.calls == 3 and stats.prompt_tokens > 0 and stats.cached_prompt_tokens is not None
        assert stats.prefix_cache_hit_rate is not None and stats.prefix_cache_hit_rate > 0  # repeated prompts
    finally:
        policy.close()


def test_http_against_real_vllm_server(vllm_server):
    base = vllm_server.url
    completions = HttpPolicy(HttpConfig(base_url=base, model=vllm_server.model, mode="completions"))
    chat = load_policy(f"{base}#model={vllm_server.model}&mode=chat")
    discovered = load_policy(base)
    try:
        outs = completions.generate([TASK, OTHER], SamplingParams(n=3, max_tokens=16, logprobs=True))
        _check(outs, 3, 16)
        assert all(c.mean_logprob is not None for o in outs for c in o)
        seeded = SamplingParams(n=3, max_tokens=16, seed=5)
        first = chat.generate([TASK], seeded)
        _check(first, 3, 16)
        assert len({c.text for c in first[0]}) > 1  # each child has its own seed
        assert chat.generate([TASK], seeded) == first  # and the seeds are reproducible
        with_logprobs = chat.generate([OTHER], SamplingParams(n=2, max_tokens=8, logprobs=True))
        assert all(c.mean_logprob is not None and c.mean_logprob < 0 for c in with_logprobs[0])
        greedy = discovered.generate([OTHER], SamplingParams(max_tokens=8, temperature=0, logprobs=True))
        assert discovered.model == vllm_server.model and greedy[0][0].num_tokens >= 1
        assert completions.stats().prompt_tokens > 0 and chat.stats().requests == 7
        # the same long prompt twice: the second request reuses cached prefix blocks (128 tokens each on CPU)
        for _ in range(2):
            completions.generate([LONG_TASK], SamplingParams(max_tokens=2))
        rate = completions.stats().prefix_cache_hit_rate
        assert rate is not None and rate > 0
    finally:
        for policy in (completions, chat, discovered):
            policy.close()


def test_default_runs_on_vllm_where_it_is_installed(monkeypatch):
    from jupiter.llm.spec import describe_policy

    monkeypatch.delenv("JUPITER_DEFAULT_LLM", raising=False)
    policy = load_policy("default")
    try:
        details = describe_policy(policy)
        assert details["backend"] == "vllm" and details["spec"] == "vllm:default"
        assert Path(details["model"]).name.startswith("gemma3-270m-nbqa-")  # the base with the shipped adapter
        # in what this CPU computes natively (float32 where it lacks bfloat16 instructions)
        assert str(policy.llm.llm_engine.model_config.dtype) == f"torch.{cpu_dtype()}" == f"torch.{policy.dtype}"
        _check(policy.generate([TASK], SamplingParams(n=2, max_tokens=8, seed=1)), 2, 8)
    finally:
        policy.close()
