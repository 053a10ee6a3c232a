"""The HTTP backend against a real scripted HTTP server on 127.0.0.1 (faults, shapes, seeds; the retry rule is
test_llm_endpoint.py's)."""

import pytest

from jupiter.llm import PolicyResponseError, SamplingParams, load_policy
from jupiter.llm.openai_http import HttpConfig, HttpPolicy
from jupiter.prompts import render_prompt


def chat(text):
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def make(server, **kwargs):
    config = HttpConfig(base_url=server.url, **{"model": "m", "backoff": 0.5, **kwargs})
    return HttpPolicy(config, sleep=lambda seconds: None)  # no waiting on the back-off


def test_chat_batch_in_input_order_with_logprobs(scripted_openai):
    with make(scripted_openai, concurrency=4) as policy:
        histories = [chat(f"question {i}") for i in range(6)]
        outs = policy.generate(histories, SamplingParams(n=2, logprobs=True, max_tokens=32))
        assert [len(o) for o in outs] == [2] * 6
        for i, completions in enumerate(outs):
            assert [c.text for c in completions] == [f"reply {k} to: question {i}" for k in range(2)]
            assert completions[1].mean_logprob == pytest.approx(-0.6)
            assert completions[0].num_tokens == 5 and completions[0].finish_reason == "stop"
        request = scripted_openai.received[0]
        assert request["_path"] == "/v1/chat/completions" and request["messages"][0]["role"] == "system"
        assert request["n"] == 2 and request["stop"] == ["Observation:"] and request["logprobs"] is True
        assert "seed" not in request
        stats = policy.stats()
        assert (stats.calls, stats.prompts, stats.completions, stats.requests) == (1, 6, 12, 6)
        assert stats.prompt_tokens == 42 and stats.completion_tokens == 60


def test_completions_mode_renders_the_template(scripted_openai):
    policy = load_policy(f"{scripted_openai.url}#model=m&template=gemma")
    try:
        outs = policy.generate([chat("hi")], SamplingParams(n=3, temperature=0.7, top_p=0.9))
        assert len(outs[0]) == 3 and outs[0][0].mean_logprob is None
        request = scripted_openai.received[0]
        assert request["_path"] == "/v1/completions" and request["prompt"] == render_prompt(chat("hi"))
        assert (request["temperature"], request["top_p"], request["n"]) == (0.7, 0.9, 3)
        # no logprobs: per-choice counts come from the usage total, split by length; the sum stays exact
        assert sum(c.num_tokens for c in outs[0]) == sum(len(c.text.split()) for c in outs[0])
    finally:
        policy.close()


def test_seed_with_n_gives_each_child_its_own_request_and_seed(scripted_openai):
    with make(scripted_openai) as policy:
        outs = policy.generate([chat("a"), chat("b")], SamplingParams(n=3, seed=11))
        assert [len(o) for o in outs] == [3, 3]
        seeds = [r["seed"] for r in scripted_openai.received]
        assert len(seeds) == 6 and len(set(seeds)) == 6 and all(r["n"] == 1 for r in scripted_openai.received)
        first = sorted(seeds)
        scripted_openai.received.clear()
        policy.generate([chat("a"), chat("b")], SamplingParams(n=3, seed=11))
        assert sorted(r["seed"] for r in scripted_openai.received) == first  # reproducible


def test_equal_histories_with_n1_get_their_own_seeds(scripted_openai):
    """Vote runs whose first replies were equal must not stay clones: one seed per history."""
    with make(scripted_openai) as policy:
        policy.generate([chat("a"), chat("a"), chat("a")], SamplingParams(n=1, seed=5))
        seeds = [r["seed"] for r in scripted_openai.received]
        assert len(seeds) == 3 and len(set(seeds)) == 3


def test_retries_exhausted_names_url_and_status(scripted_openai):
    for _ in range(3):
        scripted_openai.fail_next(500, "still broken")
    with make(scripted_openai, max_retries=2) as policy:
        with pytest.raises(PolicyResponseError, match=r"/v1/chat/completions answered HTTP 500.*still broken"):
            policy.generate([chat("x")], SamplingParams())


def test_client_error_names_the_status_and_the_servers_text(scripted_openai):
    scripted_openai.fail_next(400, '{"error": "max_tokens too large"}')
    with make(scripted_openai) as policy:
        with pytest.raises(PolicyResponseError, match=r"HTTP 400 \(attempt 1 of 6\).*max_tokens too large"):
            policy.generate([chat("x")], SamplingParams())


@pytest.mark.parametrize(
    "body, message",
    [
        (b"<html>oops</html>", "not JSON"),
        (b'{"choices": "nope"}', "no choices"),
        (b'{"choices": []}', "0 choices, expected 1"),
        (b'{"choices": [{"index": 0, "message": {"role": "assistant"}, "finish_reason": "stop"}]}', None),
        (b'{"choices": [{"index": 0, "finish_reason": "stop"}]}', "without text"),
        (b"[1, 2]", "not an object"),
    ],
)
def test_malformed_responses_give_clear_errors(scripted_openai, body, message):
    scripted_openai.raw_next(body)
    with make(scripted_openai) as policy:
        if message is None:  # a message with no content (e.g. tool calls only) is an empty reply
            assert policy.generate([chat("x")], SamplingParams())[0][0].text == ""
            return
        with pytest.raises(PolicyResponseError, match=message) as info:
            policy.generate([chat("x")], SamplingParams())
    assert scripted_openai.url in str(info.value)


def test_model_discovered_and_api_key_sent(scripted_openai, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("JUPITER_API_KEY", raising=False)
    policy = load_policy(scripted_openai.url)
    with policy:
        policy.generate([chat("x")], SamplingParams())
        assert policy.model == "scripted-model"
    request = scripted_openai.received[0]
    assert request["model"] == "scripted-model" and request["_authorization"] == "Bearer sk-test"
