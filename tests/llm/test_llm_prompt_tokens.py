"""Every Completion carries the token count of the prompt it continued (so ``stats.prompt_tokens`` is
never null while the policy knows the number): the replay policy (words) and the HTTP backend against the scripted
OpenAI-shaped server (the usage block), with and without per-child seeds."""

from __future__ import annotations

import json

import pytest

from jupiter.llm import SamplingParams, load_policy
from jupiter.llm.replay import ReplayPolicy, prompt_words

HISTORIES = [
    [{"role": "system", "content": "You analyse data."}, {"role": "user", "content": "Task: the mean fare?"}],
    [{"role": "user", "content": "Task: one two three four five six"}],
]


def test_replay_completions_carry_prompt_words_and_the_policy_counts_each_history_once():
    policy = ReplayPolicy(default=["Thought: a\nFormatted answer: @x[1]", "Thought: b"])
    outs = policy.generate(HISTORIES, SamplingParams(n=3, max_tokens=50))
    assert [[c.prompt_tokens for c in o] for o in outs] == [[7, 7, 7], [7, 7, 7]]
    assert prompt_words(HISTORIES[0]) == 7
    assert policy.stats().prompt_tokens == 14  # one per history, not one per sample


@pytest.mark.parametrize("seed", [None, 5], ids=["one-request-n3", "seeded-request-per-child"])
@pytest.mark.parametrize("mode", ["chat", "completions"])
def test_http_completions_carry_the_usage_prompt_tokens(scripted_openai, seed, mode):
    policy = load_policy(f"{scripted_openai.url}#model=scripted-model&mode={mode}")
    with policy:
        outs = policy.generate(HISTORIES, SamplingParams(n=3, seed=seed, max_tokens=20))
    assert [[c.prompt_tokens for c in o] for o in outs] == [[7, 7, 7], [7, 7, 7]]  # the fixture's usage block


def test_http_without_a_usage_block_leaves_prompt_tokens_unknown(scripted_openai):
    body = {"id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}]}
    scripted_openai.raw_next(json.dumps(body).encode())
    with load_policy(f"{scripted_openai.url}#model=scripted-model&mode=chat") as policy:
        outs = policy.generate(HISTORIES[:1], SamplingParams(n=1, max_tokens=20))
    assert outs[0][0].prompt_tokens is None and outs[0][0].text == "hi"


def test_the_search_sums_prompt_tokens_per_tree():
    from jupiter.task import Task
    from sandbox import Sandbox, SandboxConfig
    from search import SearchConfig, run_search
    from search.config import Mode

    task = Task(id="t", question="Answer.", format="@x[value]", label="@x[1]")
    policy = ReplayPolicy(default=["Thought: print it.\nAction:\n```python\nprint(1)\n```"])
    config = SearchConfig(mode=Mode.INFER, iterations=3, expansions=1)
    with Sandbox(SandboxConfig()) as sandbox:
        result = run_search(task, policy, sandbox, config)
    assert result.stats.prompt_tokens == policy.stats().prompt_tokens > 0


@pytest.mark.slow
def test_hf_completions_carry_each_prompt_length_without_padding():
    pytest.importorskip("transformers")
    policy = load_policy("hf:default")  # the transformers backend by name: "default" picks vLLM where installed
    try:
        outs = policy.generate(HISTORIES, SamplingParams(n=2, max_tokens=2, seed=1))
        lengths = [len(policy.tokenizer(policy.render(h))["input_ids"]) for h in HISTORIES]
        assert [[c.prompt_tokens for c in o] for o in outs] == [[n, n] for n in lengths]
        assert lengths[0] != lengths[1]  # the batch was padded: padding is not counted
        assert policy.stats().prompt_tokens == sum(lengths)
    finally:
        policy.close()
