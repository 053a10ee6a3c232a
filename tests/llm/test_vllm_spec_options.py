"""The in-process vLLM backend's spec options for sampling and the engine's batch (no engine is built)."""

import pytest

pytest.importorskip("vllm")

from jupiter.llm.types import PolicySpecError
from jupiter.llm.vllm_local import VllmConfig, _nucleus


def _on_cpu(monkeypatch, cpu: bool) -> None:
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self: cpu, raising=False)


def test_the_windowed_top_p_is_the_default_on_cpu_builds_and_the_engines_elsewhere(monkeypatch):
    _on_cpu(monkeypatch, True)
    assert _nucleus(VllmConfig()) == "window"
    assert _nucleus(VllmConfig(nucleus="engine")) == "engine"
    _on_cpu(monkeypatch, False)
    assert _nucleus(VllmConfig()) == "engine"
    assert _nucleus(VllmConfig(nucleus="window")) == "window"


def test_spec_options_parse_and_bad_values_are_named():
    config = VllmConfig.from_spec("default", {"nucleus": "engine", "max_num_seqs": "64", "block_size": "32",
                                              "log_stats": "1"}, "vllm:default#...")
    assert (config.nucleus, config.max_num_seqs, config.block_size, config.log_stats) == ("engine", 64, 32, True)
    with pytest.raises(PolicySpecError, match="nucleus"):
        VllmConfig.from_spec("default", {"nucleus": "sorted"}, "vllm:default#nucleus=sorted")
    with pytest.raises(PolicySpecError, match="block_size"):
        VllmConfig(block_size=0)
    with pytest.raises(PolicySpecError, match="max_num_seqs"):
        VllmConfig(max_num_seqs=True)


def test_windowed_requests_leave_the_engines_top_p_off():
    from jupiter.llm.vllm_nucleus import EXTRA_ARGS_KEY, extra_args

    assert extra_args(1.0, 0) is None  # nothing to filter: no processor work at all
    assert extra_args(0.95, 0) == {EXTRA_ARGS_KEY: [0.95, 0]}
    assert extra_args(1.0, 40) == {EXTRA_ARGS_KEY: [1.0, 40]}
