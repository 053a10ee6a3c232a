"""The scripted replay policy: rule matching, cycling, logprobs, stop strings, file format errors."""

import json

import pytest

from jupiter.llm import Policy, PolicySpecError, ReplayPolicy, ReplayRule, SamplingParams, load_policy


def chat(*contents):
    roles = ["system"] + ["user", "assistant"] * len(contents)
    return [{"role": r, "content": c} for r, c in zip(roles, ("sys",) + contents)]


SCRIPT = {
    "default": ["I do not know"],
    "rules": [
        {"match": "shape", "replies": ["Thought: a\nAction:\n```python\ndf.shape\n```", "Thought: b"],
         "logprobs": [-0.2, -1.5]},
        {"match": "(3, 2)", "replies": ["Thought: done\nFormatted answer: @shape[3,2]"]},
    ],
}


@pytest.fixture
def script_path(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return path


def test_first_matching_rule_answers_in_input_order(script_path):
    policy = load_policy(f"replay:{script_path}")
    assert isinstance(policy, Policy)
    histories = [chat("what is the shape?"), chat("hello"), chat("what is the shape?", "x", "Observation:\n(3, 2)")]
    outs = policy.generate(histories, SamplingParams(n=3, logprobs=True))
    assert [len(o) for o in outs] == [3, 3, 3]
    assert [c.text for c in outs[0]] == [SCRIPT["rules"][0]["replies"][k] for k in (0, 1, 0)]
    assert [c.mean_logprob for c in outs[0]] == [-0.2, -1.5, -0.2]
    assert {c.text for c in outs[1]} == {"I do not know"} and outs[1][0].mean_logprob is None
    assert outs[2][0].text.endswith("@shape[3,2]")
    assert all(c.finish_reason == "stop" for o in outs for c in o)


def test_matches_last_user_message_not_assistant():
    policy = ReplayPolicy(rules=[ReplayRule(match="needle", replies=("hit",))], default=("miss",))
    history = [{"role": "user", "content": "plain"}, {"role": "assistant", "content": "needle"}]
    assert policy.generate([history], SamplingParams())[0][0].text == "miss"


def test_deterministic_and_logprobs_only_when_asked(script_path):
    policy = load_policy(f"replay:{script_path}")
    first = policy.generate([chat("shape")], SamplingParams(n=2, seed=1))
    assert first == policy.generate([chat("shape")], SamplingParams(n=2, seed=2))
    assert all(c.mean_logprob is None for c in first[0])


def test_cycle_across_calls():
    policy = ReplayPolicy(rules=[{"match": "", "replies": ["a", "b", "c"]}], cycle_across_calls=True)
    texts = [policy.generate([chat("q")], SamplingParams(n=2))[0] for _ in range(2)]
    assert [c.text for c in texts[0] + texts[1]] == ["a", "b", "c", "a"]


def test_stop_string_and_max_tokens_cut_the_reply():
    policy = ReplayPolicy(default=["Thought: x\nObservation:\nmade up", "one two three four"])
    outs = policy.generate([chat("q")], SamplingParams(n=2, max_tokens=3))[0]
    assert outs[0].text == "Thought: x\n" and outs[0].finish_reason == "stop"
    assert outs[1].text == "one two three" and outs[1].finish_reason == "length" and outs[1].truncated


def test_stats_and_close():
    policy = ReplayPolicy(default=["a b"])
    policy.generate([chat("q"), chat("r")], SamplingParams(n=2))
    stats = policy.stats()
    assert (stats.calls, stats.prompts, stats.completions, stats.completion_tokens) == (1, 2, 4, 8)
    policy.close()
    policy.close()  # idempotent
    with pytest.raises(Exception, match="closed"):
        policy.generate([chat("q")], SamplingParams())


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not readable JSON"),
        ("[]", "JSON object"),
        ('{"rules": [{"match": "a"}]}', r"rules\[0\] has no 'replies'"),
        ('{"rules": [{"match": "a", "replies": ["x"], "logprobs": [1, 2]}]}', r"rules\[0\].*2 values for 1"),
        ('{"rules": [{"match": "a", "replies": ["x"], "colour": 1}]}', "unknown keys"),
        ('{"defaults": []}', "unknown keys"),
    ],
)
def test_bad_scripts_name_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(PolicySpecError, match=message) as info:
        load_policy(f"replay:{path}")
    assert "bad.json" in str(info.value)


def test_missing_script(tmp_path):
    with pytest.raises(PolicySpecError, match="does not exist"):
        load_policy(f"replay:{tmp_path / 'nope.json'}")
