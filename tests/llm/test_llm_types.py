"""SamplingParams validation, Completion/PolicyStats, child seeds, history validation."""


import pytest

from jupiter.llm import Completion, FinishReason, PolicyStats, SamplingParams, child_seeds
from jupiter.llm.base import validate_histories


def test_defaults_stop_at_observation():
    params = SamplingParams()
    assert params.n == 1 and params.stop == ("Observation:",) and params.seed is None and not params.logprobs


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"n": 0}, "n"),
        ({"n": 1.5}, "n"),
        ({"n": True}, "n"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.01}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": ("",)}, "stop"),
        ({"stop": (1,)}, "stop"),
        ({"seed": "3"}, "seed"),
        ({"logprobs": 1}, "logprobs"),
    ],
)
def test_sampling_params_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field}\b"):
        SamplingParams(**kwargs)


def test_sampling_params_is_frozen_and_normalises_stop():
    params = SamplingParams(stop=["a", "b"], temperature=0)
    assert params.stop == ("a", "b") and params.greedy
    assert SamplingParams(stop="x").stop == ("x",)
    with pytest.raises(ValueError, match="frozen"):
        params.n = 2  # type: ignore[misc]


def test_completion_truncated_flag():
    assert Completion("x", "length").truncated
    assert not Completion("x", FinishReason.STOP).truncated


def test_stats_rates():
    stats = PolicyStats(prompt_tokens=200, cached_prompt_tokens=150, completion_tokens=50, seconds=2.0)
    assert stats.prefix_cache_hit_rate == pytest.approx(0.75)
    assert stats.tokens_per_second == pytest.approx(25.0)
    assert PolicyStats().prefix_cache_hit_rate is None
    assert stats.to_dict()["prefix_cache_hit_rate"] == pytest.approx(0.75)


def test_child_seeds_distinct_and_reproducible():
    seeds = child_seeds(7, 5)
    assert len(set(seeds)) == 5 and seeds == child_seeds(7, 5)
    assert seeds != child_seeds(8, 5)
    assert child_seeds(7, 3, salt=1) != child_seeds(7, 3, salt=0)
    assert all(0 <= s < 2**31 for s in seeds)


def test_validate_histories_names_the_bad_message():
    with pytest.raises(ValueError, match=r"histories\[1\]\[0\]"):
        validate_histories([[{"role": "user", "content": "a"}], [{"role": "robot", "content": "b"}]])
    with pytest.raises(ValueError, match=r"histories\[0\]"):
        validate_histories([[]])
    with pytest.raises(TypeError):
        validate_histories("hello")
