"""The shared retry rule (``jupiter.llm.retry``) against a real HTTP server on 127.0.0.1, and its two users."""

from __future__ import annotations

import logging
import socket

import pytest
import requests

from jupiter.llm.openai_http import HttpConfig, HttpPolicy
from jupiter.llm.retry import REFUSED_RETRY_S, Backoff, TransportFailure, connection_refused, send_with_retries
from jupiter.llm.types import PolicyConnectionError, SamplingParams
from nbqa_pipeline.llm_client import ChatClient, LLMConfig, LLMError
from tests.llm.servers import ScriptedOpenAI, scripted_openai  # noqa: F401 - fixture
from tests.ports import free_port


def _post(server: ScriptedOpenAI):
    return lambda: requests.post(f"{server.url}/chat/completions", json={"messages": [{"content": "hi"}]},
                                 timeout=5)


def test_backoff_doubles_honours_retry_after_and_caps() -> None:
    backoff = Backoff(first=0.5, cap=3.0)
    assert [backoff.delay(i) for i in range(4)] == [0.5, 1.0, 2.0, 3.0]

    response = requests.Response()
    response.headers["Retry-After"] = "1.25"
    assert backoff.delay(0, response) == 1.25
    response.headers["Retry-After"] = "120"
    assert backoff.delay(0, response) == 3.0
    response.headers["Retry-After"] = "Wed, 21 Oct 2015 07:28:00 GMT"  # a date: fall back to the computed wait
    assert backoff.delay(2, response) == 2.0


def test_retryable_statuses_are_retried_then_the_answer_returned(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.fail_next(503)
    scripted_openai.fail_next(429, headers={"Retry-After": "0.2"})
    waits, attempts = [], []
    done = send_with_retries(_post(scripted_openai), max_retries=3, backoff=Backoff(0.01, 1.0), sleep=waits.append,
                             what="test", on_attempt=attempts.append)
    assert done.response.status_code == 200 and done.count == 3
    assert waits == [0.01, 0.2] and attempts == [0, 1, 2]
    assert len(scripted_openai.received) == 3


def test_final_statuses_are_not_retried(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.fail_next(400)
    waits: list[float] = []
    done = send_with_retries(_post(scripted_openai), max_retries=3, backoff=Backoff(0.01, 1.0), sleep=waits.append,
                             what="test")
    assert done.response.status_code == 400 and done.count == 1 and waits == []


def test_spent_retries_return_the_last_retryable_response(scripted_openai: ScriptedOpenAI) -> None:
    for _ in range(3):
        scripted_openai.fail_next(502)
    done = send_with_retries(_post(scripted_openai), max_retries=2, backoff=Backoff(0.0, 1.0), sleep=lambda s: None,
                             what="test")
    assert done.response.status_code == 502 and done.count == 3


def test_refused_connection_fails_after_one_quick_retry_without_warnings(caplog) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/chat/completions"  # a closed port: the OS refuses at once
    waits: list[float] = []
    caplog.set_level(logging.DEBUG, logger="jupiter.llm.retry")
    with pytest.raises(TransportFailure) as info:
        send_with_retries(lambda: requests.post(url, json={}, timeout=2), max_retries=5, backoff=Backoff(0.5, 30.0),
                          sleep=waits.append, what=url)
    assert info.value.refused and info.value.attempts == 2
    assert isinstance(info.value.cause, ConnectionRefusedError) and "refused" in str(info.value.cause).lower()
    assert isinstance(info.value.__cause__, requests.ConnectionError)
    assert waits == [REFUSED_RETRY_S]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_timeouts_keep_the_backoff() -> None:
    # A listening socket that never answers: the connection is made, the read times out.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1/chat/completions"
        waits: list[float] = []
        with pytest.raises(TransportFailure) as info:
            send_with_retries(lambda: requests.post(url, json={}, timeout=0.2), max_retries=2,
                              backoff=Backoff(0.01, 1.0), sleep=waits.append, what=url)
    assert not info.value.refused and info.value.attempts == 3
    assert isinstance(info.value.cause, requests.Timeout)
    assert waits == [0.01, 0.02]


def test_connection_refused_is_found_inside_the_requests_wrappers() -> None:
    root = ConnectionRefusedError(111, "Connection refused")
    wrapped = requests.ConnectionError(OSError("pool: max retries"))
    wrapped.args[0].reason = OSError("new connection")  # urllib3 keeps the cause in .reason
    wrapped.args[0].reason.__context__ = root
    assert connection_refused(wrapped) is root
    assert connection_refused(requests.ConnectionError("reset by peer")) is None


def test_http_policy_on_a_closed_port_fails_fast_with_one_line_naming_the_url(caplog) -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    waits: list[float] = []
    caplog.set_level(logging.INFO)
    policy = HttpPolicy(HttpConfig(base_url=base, model="m", concurrency=3), sleep=waits.append)
    try:
        with pytest.raises(PolicyConnectionError) as info:
            policy.generate([[{"role": "user", "content": "hi"}]] * 3, SamplingParams(n=2, seed=1, max_tokens=8))
    finally:
        policy.close()
    message = str(info.value)
    assert "\n" not in message and f"{base}/chat/completions" in message and "refused" in message.lower()
    assert all(w == REFUSED_RETRY_S for w in waits) and len(waits) <= 6  # one quick retry per request
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_nbqa_client_counts_retries_and_failures_through_the_shared_rule(scripted_openai: ScriptedOpenAI) -> None:
    waits: list[float] = []
    client = ChatClient(LLMConfig(base_url=scripted_openai.url, model="m", backoff=0.01, max_backoff=0.05,
                                  max_retries=2), sleep=waits.append)
    scripted_openai.fail_next(500)
    scripted_openai.fail_next(429, headers={"Retry-After": "30"})
    reply = client.chat([{"role": "user", "content": "hi"}])
    assert reply.text.startswith("reply 0") and waits == [0.01, 0.05]  # Retry-After capped by max_backoff
    scripted_openai.fail_next(404)
    with pytest.raises(LLMError, match="HTTP 404"):
        client.chat([{"role": "user", "content": "hi"}])
    usage = client.usage()
    assert (usage.calls, usage.retries, usage.failed_calls) == (1, 2, 1)


def test_nbqa_client_config_rejects_a_bad_backoff() -> None:
    with pytest.raises(ValueError, match="max_backoff"):
        LLMConfig(base_url="http://127.0.0.1:1/v1", model="m", max_backoff=0)
