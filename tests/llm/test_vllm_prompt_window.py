"""A history longer than vLLM's window gets cut replies of its own instead of failing the whole batch.

A Ray collection lost 42 of its first 114 trees to one such prompt: the engine refused the batch, the worker
died and with it the 20 trees it was growing. Slow: builds an engine.
"""

import pytest

from jupiter.llm import FinishReason, SamplingParams, load_policy

pytestmark = pytest.mark.slow


def test_a_prompt_past_the_window_gets_length_replies_and_the_others_their_own():
    pytest.importorskip("vllm")
    with load_policy("vllm:default#max_model_len=512") as policy:
        assert policy.context_window == 512
        short = [{"role": "user", "content": "Say hello."}]
        long = [{"role": "user", "content": "word " * 2000}]
        out = policy.generate([short, long, short], SamplingParams(n=2, max_tokens=8, seed=0))
    assert [len(o) for o in out] == [2, 2, 2]
    assert all(c.finish_reason == FinishReason.LENGTH and c.text == "" and c.truncated for c in out[1])
    assert out[1][0].prompt_tokens > 512
    assert all(c.num_tokens > 0 for o in (out[0], out[2]) for c in o)
