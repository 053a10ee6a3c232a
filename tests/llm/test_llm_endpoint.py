"""The model servers' HTTP client (``jupiter.llm.endpoint``) and its retry rule, against a real HTTP server on
127.0.0.1; then what each of its two users adds on a failure (the policy's and the NbQA client's wording and
counters). The rule itself is tested here once."""

from __future__ import annotations

import socket
import time

import pytest

from jupiter.llm.endpoint import Endpoint, Unreachable
from jupiter.llm.openai_http import HttpConfig, HttpPolicy
from jupiter.llm.types import PolicyConnectionError, SamplingParams
from nbqa_pipeline.llm_client import ChatClient, LLMConfig, LLMError
from tests.llm.servers import ScriptedOpenAI  # the fixture scripted_openai comes from conftest.py
from tests.ports import free_port

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def _endpoint(url: str, waits: list[float], **kwargs: object) -> Endpoint:
    return Endpoint(url, **{"timeout": 5.0, "max_retries": 3, "backoff": 0.01, "max_backoff": 1.0,
                            "sleep": waits.append, **kwargs})  # type: ignore[arg-type]


def test_retryable_statuses_are_retried_then_the_answer_returned(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.fail_next(503)
    scripted_openai.fail_next(502)
    scripted_openai.fail_next(429, headers={"Retry-After": "2"})
    waits: list[float] = []
    done = _endpoint(scripted_openai.url, waits, max_backoff=5.0).call("POST", "/chat/completions", CHAT)
    assert done.response.status_code == 200 and done.attempts == 4 and len(scripted_openai.received) == 4
    assert waits == [0.02, 2.0]  # at once, then the back-off doubled, then the server's Retry-After


def test_a_retry_after_that_is_not_a_number_of_seconds_leaves_the_back_off(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.fail_next(503)
    scripted_openai.fail_next(503, headers={"Retry-After": "0.2"})  # seconds must be a whole number
    waits: list[float] = []
    done = _endpoint(scripted_openai.url, waits).call("POST", "/chat/completions", CHAT)
    assert done.response.status_code == 200 and waits == [0.02]


def test_a_servers_retry_after_is_capped_by_the_longest_back_off(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.fail_next(500)
    scripted_openai.fail_next(429, headers={"Retry-After": "30"})
    waits: list[float] = []
    done = _endpoint(scripted_openai.url, waits, max_backoff=0.05).call("POST", "/chat/completions", CHAT)
    assert done.response.status_code == 200 and waits == [0.05]


def test_final_statuses_are_not_retried(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.fail_next(400)
    waits: list[float] = []
    done = _endpoint(scripted_openai.url, waits).call("POST", "/chat/completions", CHAT)
    assert done.response.status_code == 400 and done.attempts == 1 and waits == []


def test_spent_retries_return_the_last_retryable_response(scripted_openai: ScriptedOpenAI) -> None:
    for _ in range(3):
        scripted_openai.fail_next(502)
    done = _endpoint(scripted_openai.url, [], max_retries=2).call("POST", "/chat/completions", CHAT)
    assert done.response.status_code == 502 and done.attempts == 3


def test_a_refused_connection_fails_at_once_without_the_back_off() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # a closed port: the OS refuses at once
    waits: list[float] = []
    started = time.monotonic()
    with pytest.raises(Unreachable) as info:
        _endpoint(url, waits, max_retries=5, backoff=30.0, max_backoff=30.0).call("POST", "/chat/completions", CHAT)
    assert info.value.reason == "connection refused" and waits == [] and time.monotonic() - started < 5


def test_read_timeouts_keep_the_back_off() -> None:
    with socket.socket() as silent:  # a listening socket that never answers: connected, then the read times out
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        waits: list[float] = []
        endpoint = _endpoint(f"http://127.0.0.1:{silent.getsockname()[1]}/v1", waits, timeout=0.2, max_retries=2)
        with pytest.raises(Unreachable, match="timed out"):
            endpoint.call("POST", "/chat/completions", CHAT)
    assert waits == [0.02]  # three attempts: the second at once, the third after the doubled back-off


def test_http_policy_on_a_closed_port_fails_fast_with_one_line_naming_the_url() -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    policy = HttpPolicy(HttpConfig(base_url=base, model="m", concurrency=3, backoff=30.0))
    with policy, pytest.raises(PolicyConnectionError) as info:
        policy.generate([[{"role": "user", "content": "hi"}]] * 3, SamplingParams(n=2, seed=1, max_tokens=8))
    assert str(info.value) == f"cannot reach the model server at {base}/chat/completions: connection refused"


def test_http_policy_counts_requests_and_retries(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.fail_next(429)
    scripted_openai.fail_next(503)
    with HttpPolicy(HttpConfig(base_url=scripted_openai.url, model="m", backoff=0.0), sleep=lambda s: None) as policy:
        assert policy.generate([[{"role": "user", "content": "x"}]], SamplingParams())[0][0].text == "reply 0 to: x"
    assert policy.stats().retries == 2 and policy.stats().requests == 3


def test_nbqa_client_counts_retries_and_failures(scripted_openai: ScriptedOpenAI) -> None:
    client = ChatClient(LLMConfig(base_url=scripted_openai.url, model="m", backoff=0.0, max_retries=2),
                        sleep=lambda s: None)
    scripted_openai.fail_next(500)
    scripted_openai.fail_next(429)
    assert client.chat([{"role": "user", "content": "hi"}]).text.startswith("reply 0")
    scripted_openai.fail_next(404)
    with pytest.raises(LLMError, match="HTTP 404"):
        client.chat([{"role": "user", "content": "hi"}])
    usage = client.usage()
    assert (usage.calls, usage.retries, usage.failed_calls) == (1, 2, 1)


def test_nbqa_client_config_rejects_a_bad_backoff() -> None:
    with pytest.raises(ValueError, match="max_backoff"):
        LLMConfig(base_url="http://127.0.0.1:1/v1", model="m", max_backoff=0)
