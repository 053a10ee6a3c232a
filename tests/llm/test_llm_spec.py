"""load_policy spec parsing (no model is loaded by these tests)."""

import pytest

from jupiter.llm import PolicySpecError, load_policy
from jupiter.llm.openai_http import ApiMode, HttpConfig, HttpPolicy


@pytest.mark.parametrize("spec", ["", "   ", "bogus", "ftp://x", "replay:", "vllm:", "nope:thing"])
def test_bad_specs_are_named(spec):
    with pytest.raises(PolicySpecError) as info:
        load_policy(spec)
    assert repr(spec.strip()) in str(info.value) or "non-empty" in str(info.value)


def test_http_spec_options():
    config = HttpConfig.from_spec("http://127.0.0.1:9/v1#model=m&template=chatml&timeout=5&retries=2&concurrency=3")
    assert config.base_url == "http://127.0.0.1:9/v1" and config.model == "m"
    assert config.mode is ApiMode.COMPLETIONS and config.template == "chatml"
    assert (config.timeout, config.max_retries, config.concurrency) == (5.0, 2, 3)
    assert HttpConfig.from_spec("http://h:1/v1/").mode is ApiMode.CHAT
    assert HttpConfig.from_spec("http://h:1/v1#mode=completions").template == "gemma"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("http://h:1/v1#mode=stream", "mode"),
        ("http://h:1/v1#template=llama", "unknown prompt template 'llama'"),
        ("http://h:1/v1#colour=red", r"unknown option\(s\) \['colour'\]"),
        ("http://h:1/v1#retries=many", "retries|invalid literal"),
        ("http://h:1/v1#concurrency=0", "concurrency"),
    ],
)
def test_bad_http_specs(spec, message):
    with pytest.raises(PolicySpecError, match=message) as info:
        load_policy(spec)
    assert spec in str(info.value)


def test_http_policy_builds_without_contacting_the_server():
    policy = load_policy("http://127.0.0.1:9/v1#model=m")
    try:
        assert isinstance(policy, HttpPolicy)
    finally:
        policy.close()


def test_local_spec_errors_name_the_path(tmp_path):
    missing = tmp_path / "no-model"
    with pytest.raises(PolicySpecError, match="no-model"):
        load_policy(f"hf:{missing}")
    with pytest.raises(PolicySpecError, match="dtype"):
        load_policy(f"hf:{tmp_path}#dtype=int3")
    with pytest.raises(PolicySpecError, match="colour"):
        load_policy(f"hf:{tmp_path}#colour=1")


def test_missing_backend_package_is_named(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "jupiter.llm.vllm_local", raising=False)
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if vLLM were not installed
    with pytest.raises(PolicySpecError, match=r"'vllm:default' needs the package 'vllm'"):
        load_policy("vllm:default")
