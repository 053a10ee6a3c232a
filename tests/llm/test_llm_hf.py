"""The transformers backend on the real embedded tiny model (Gemma 3 270M). Slow: loading + CPU decoding."""

import pytest

from jupiter.llm import Completion, SamplingParams, load_policy

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

HISTORIES = [
    [{"role": "system", "content": "You write Python."},
     {"role": "user", "content": "Write a function that adds two numbers."}],
    [{"role": "user", "content": "Count from 1 to 10: 1, 2, 3,"}],
]


@pytest.fixture(scope="module")
def policy():
    # the base model: these tests are about the backend's mechanics on plain continuations ("1, 2, 3,"), which
    # the fine-tuned default no longer writes (it answers in the notebook format)
    policy = load_policy("hf:default-base")
    yield policy
    policy.close()


def test_batch_shapes_seeds_and_logprobs(policy):
    params = SamplingParams(n=2, max_tokens=12, seed=3, logprobs=True, stop=("\n\n",))
    outs = policy.generate(HISTORIES, params)
    assert [len(o) for o in outs] == [2, 2]
    for completion in (c for o in outs for c in o):
        assert isinstance(completion, Completion) and completion.finish_reason in ("stop", "length")
        assert 1 <= completion.num_tokens <= 12
        assert completion.mean_logprob is not None and completion.mean_logprob < 0
        assert "\n\n" not in completion.text
    assert policy.generate(HISTORIES, params) == outs  # same seed, same batch: same samples
    stats = policy.stats()
    assert stats.calls == 2 and stats.completions == 8 and stats.prompt_tokens > 0 and stats.seconds > 0


def test_an_explicit_cpu_device_gives_the_same_samples():
    params = SamplingParams(n=2, max_tokens=8, seed=5)
    plain, on_cpu = load_policy("hf:default-base"), load_policy("hf:default-base#device=cpu")
    try:
        assert on_cpu.device.type == "cpu" and on_cpu.generate(HISTORIES, params) == plain.generate(HISTORIES, params)
    finally:
        plain.close()
        on_cpu.close()


def test_greedy_is_deterministic_and_length_is_reported(policy):
    params = SamplingParams(n=1, max_tokens=6, temperature=0, stop=("never-appears",))
    first = policy.generate(HISTORIES[1:], params)[0][0]
    assert first == policy.generate(HISTORIES[1:], params)[0][0]
    assert first.finish_reason == "length" and first.num_tokens == 6 and first.mean_logprob is None


def test_stop_string_cuts_text_and_token_count(policy):
    # stop at the first new character of the greedy continuation (which one depends on the compute dtype)
    free = policy.generate(HISTORIES[1:], SamplingParams(n=1, max_tokens=16, temperature=0, stop=()))[0][0]
    cut = next(k for k in range(1, len(free.text)) if free.text[k] not in free.text[:k])
    params = SamplingParams(n=1, max_tokens=16, temperature=0, stop=(free.text[cut],), logprobs=True)
    completion = policy.generate(HISTORIES[1:], params)[0][0]
    assert completion.text == free.text[:cut] and completion.finish_reason == "stop"
    assert 1 <= completion.num_tokens < 16
