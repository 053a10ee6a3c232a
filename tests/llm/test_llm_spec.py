"""load_policy spec parsing (no model is loaded by these tests)."""

from pathlib import Path

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


def test_transformers_device_is_checked_before_the_model_loads(tmp_path):
    import torch

    with pytest.raises(PolicySpecError, match="device 'tpu'"):
        load_policy(f"hf:{tmp_path}#device=tpu")
    missing = torch.cuda.device_count()  # one past the last GPU (cuda:0 on a machine without one)
    with pytest.raises(PolicySpecError, match="no such CUDA device"):
        load_policy(f"hf:{tmp_path}#device=cuda:{missing}")


def test_missing_backend_package_is_named(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "jupiter.llm.vllm_local", raising=False)
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if vLLM were not installed
    with pytest.raises(PolicySpecError, match=r"'vllm:default' needs the package 'vllm'"):
        load_policy("vllm:default")


class _Loaded:
    """A stand-in backend for the choice logic of ``default`` (which backend is tried, in which order)."""

    def __init__(self, spec):
        self.name = spec.split(":")[0]
        self.model_ref = f"/models/{spec}"


def _fake_loader(monkeypatch, failing=()):
    import jupiter.llm.spec as spec_module

    tried = []

    def load(spec):
        tried.append(spec)
        if spec in failing:
            raise failing[spec]
        return _Loaded(spec)

    monkeypatch.setattr(spec_module, "_load", load)
    return tried


def test_default_picks_vllm_when_it_loads(monkeypatch, caplog):
    from jupiter.llm.spec import describe_policy

    monkeypatch.delenv("JUPITER_DEFAULT_LLM", raising=False)
    tried = _fake_loader(monkeypatch)
    caplog.set_level("INFO", logger="jupiter.llm.spec")
    policy = load_policy("default")
    assert tried == ["vllm:default"]
    details = describe_policy(policy)
    assert details == {"requested": "default", "spec": "vllm:default", "backend": "vllm",
                       "model": "/models/vllm:default", "note": "fastest backend installed"}
    assert any("default -> vLLM in-process on /models/vllm:default" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("error", [PolicySpecError("policy spec 'vllm:default' needs the package 'vllm'"),
                                   RuntimeError("Engine core initialization failed")])
def test_default_falls_back_to_transformers_and_says_why(monkeypatch, caplog, error):
    from jupiter.llm.spec import describe_policy

    monkeypatch.delenv("JUPITER_DEFAULT_LLM", raising=False)
    tried = _fake_loader(monkeypatch, failing={"vllm:default": error})
    policy = load_policy("default")
    assert tried == ["vllm:default", "hf:default"]
    details = describe_policy(policy)
    assert details["backend"] == "hf" and details["spec"] == "hf:default"
    assert str(error).split(":")[0][:20] in details["note"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "transformers" in warnings[0]


def test_default_can_be_forced(monkeypatch):
    tried = _fake_loader(monkeypatch)
    monkeypatch.setenv("JUPITER_DEFAULT_LLM", "hf")
    assert load_policy("default").choice.spec == "hf:default" and tried == ["hf:default"]
    monkeypatch.setenv("JUPITER_DEFAULT_LLM", "vllm")
    _fake_loader(monkeypatch, failing={"vllm:default": PolicySpecError("needs the package 'vllm'")})
    with pytest.raises(PolicySpecError, match="vllm"):
        load_policy("default")  # forced: no silent fallback
    monkeypatch.setenv("JUPITER_DEFAULT_LLM", "tpu")
    with pytest.raises(PolicySpecError, match="JUPITER_DEFAULT_LLM"):
        load_policy("default")


def test_every_loaded_policy_says_what_it_is(tmp_path):
    import json

    from jupiter.llm.spec import describe_policy

    script = tmp_path / "replay.json"
    script.write_text(json.dumps({"default": ["Thought: x"]}))
    with load_policy(f"replay:{script}") as policy:
        assert describe_policy(policy)["backend"] == "replay"
    with load_policy("http://127.0.0.1:9/v1#model=m") as policy:  # never contacts the server
        assert describe_policy(policy) == {"requested": "http://127.0.0.1:9/v1#model=m",
                                           "spec": "http://127.0.0.1:9/v1#model=m", "backend": "http",
                                           "model": "m", "note": None}


def test_default_base_takes_the_same_backend_choice_with_the_base_model(monkeypatch):
    from jupiter.llm.spec import describe_policy

    monkeypatch.delenv("JUPITER_DEFAULT_LLM", raising=False)
    tried = _fake_loader(monkeypatch, failing={"vllm:default-base": PolicySpecError("needs the package 'vllm'")})
    policy = load_policy("default-base")
    assert tried == ["vllm:default-base", "hf:default-base"]
    assert describe_policy(policy)["requested"] == "default-base"
    monkeypatch.setenv("JUPITER_DEFAULT_LLM", "hf")
    tried = _fake_loader(monkeypatch)
    assert load_policy("default-base").choice.spec == "hf:default-base" and tried == ["hf:default-base"]


def test_local_specs_resolve_default_and_adapter_folders_before_the_backend_is_built(monkeypatch, tmp_path):
    """hf:/vllm: hand the backend a folder: default -> fine-tuned, default-base -> base, adapter -> its merge."""
    import jupiter.llm.model_dirs as model_dirs
    from jupiter.llm.hf_local import HfConfig

    built = []
    monkeypatch.setattr("jupiter.llm.hf_local.HfPolicy", lambda config: built.append(config) or _Loaded("hf:x"))
    monkeypatch.setattr("jupiter.default_model.ensure_finetuned_default_model", lambda: tmp_path / "tuned")
    monkeypatch.setattr("jupiter.default_model.ensure_default_model", lambda: tmp_path / "base")
    monkeypatch.setattr(model_dirs, "ensure_merged", lambda path: tmp_path / f"merged-{Path(path).name}")
    for name in ("tuned", "base", "merged-adapter"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    load_policy("hf:default")
    load_policy("hf:default-base#dtype=float32")
    load_policy(f"hf:{adapter}")
    assert [c.model_dir for c in built] == [tmp_path / "tuned", tmp_path / "base", tmp_path / "merged-adapter"]
    assert isinstance(built[1], HfConfig) and built[1].dtype == "float32"
