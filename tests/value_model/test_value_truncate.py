"""The one truncation: system + task kept, most recent steps that fit, a marker for dropped middle steps;
training and scoring produce byte-identical model input."""

from __future__ import annotations

import pytest

from jupiter.prompts import GEMMA, Turn, build_messages, render_prompt
from jupiter.task import Task
from value_model.config import ModelConfig
from value_model.data import encode_samples
from value_model.extract import Sample
from value_model.truncate import CUT_MARKER, TRUNCATION_MARKER, prepare_path, split_path, truncate_messages

TASK = Task(id="t", question="What is the mean of column a?", format="@mean[value]")


def _messages(n_steps: int, observation: str = "ok") -> list[dict]:
    turns = [Turn(thought=f"step {i}", code=f"print({i})", observation=f"{observation} {i}") for i in range(n_steps)]
    return build_messages(TASK, turns)


def _words(text: str) -> int:  # a tokenizer-free counter for logic tests
    return len(text.split())


def test_split_path_prefix_and_steps() -> None:
    prefix, steps = split_path(_messages(3))
    assert [m["role"] for m in prefix] == ["system", "user"]
    assert len(steps) == 3 and all([m["role"] for m in s] == ["assistant", "user"] for s in steps)


def test_a_path_that_fits_is_unchanged() -> None:
    messages = _messages(2)
    kept, dropped = truncate_messages(messages, _words, 10_000, GEMMA)
    assert kept == messages and dropped == 0


def test_oldest_middle_steps_are_dropped_with_a_marker() -> None:
    messages = _messages(12, observation="word " * 30)
    budget = _words(render_prompt(messages[:2] + messages[-4:], GEMMA)) + 12
    kept, dropped = truncate_messages(messages, _words, budget, GEMMA)
    assert kept[:2] == messages[:2]  # system + task always kept
    assert kept[2] == {"role": "user", "content": TRUNCATION_MARKER.format(n=dropped)}
    assert kept[3:] == messages[-(len(kept) - 3):]  # the most recent steps, whole
    assert dropped == 12 - (len(kept) - 3) // 2 and dropped > 0
    assert _words(render_prompt(kept, GEMMA)) <= budget


def test_a_latest_step_too_long_alone_keeps_its_end_and_marks_the_cut() -> None:
    """The newest text (the latest output) survives; the step's beginning is cut instead."""
    messages = _messages(3, observation="word " * 500)
    messages[-1] = {**messages[-1], "content": messages[-1]["content"] + " the final number is 42"}
    kept, dropped = truncate_messages(messages, _words, 300, GEMMA)
    assert dropped == 2 and kept[:2] == messages[:2]
    assert kept[2] == {"role": "user", "content": TRUNCATION_MARKER.format(n=2)}
    assert kept[-1]["content"].endswith("the final number is 42")  # the newest text is kept
    assert kept[-1]["content"].startswith("[... ") and "characters cut" in kept[-1]["content"]
    cut = int(kept[-1]["content"].split()[1])
    original = messages[-2]["content"] + messages[-1]["content"]
    assert cut == len(original) - len(kept[-1]["content"]) + len(CUT_MARKER.format(n=cut))  # the assistant turn went
    assert [m["role"] for m in kept[3:]] == ["user"]
    rendered = _words(render_prompt(kept, GEMMA))
    assert 290 <= rendered <= 300  # as much of the end as fits


def test_a_cut_inside_the_assistant_turn_keeps_the_whole_observation() -> None:
    messages = _messages(1, observation="result 42")
    messages[-2] = {**messages[-2], "content": "thinking " * 400 + messages[-2]["content"]}
    budget = _words(render_prompt(messages[:2] + messages[-1:], GEMMA)) + 60
    kept, dropped = truncate_messages(messages, _words, budget, GEMMA)
    assert dropped == 0 and kept[-1] == messages[-1]
    assert kept[-2]["role"] == "assistant" and kept[-2]["content"].startswith("[... ")
    assert kept[-2]["content"].endswith(messages[-2]["content"][-40:])
    assert budget - 10 <= _words(render_prompt(kept, GEMMA)) <= budget


def test_prepare_path_keeps_the_newest_text_of_an_oversized_step(tokenizer) -> None:
    """Before the fix the tokenizer cut the end: the latest output and the model-turn opener were lost."""
    messages = _messages(2, observation="value " * 20)
    huge = "".join(f"row {i}: {i * 7 % 13}\n" for i in range(2000)) + "submission written: SENTINEL_ROWS_2000"
    messages[-1] = {**messages[-1], "content": huge}
    prepared = prepare_path(messages, tokenizer, 400, GEMMA)
    assert len(prepared.input_ids) <= 400
    assert prepared.input_ids[0] == tokenizer.bos_token_id
    assert "SENTINEL_ROWS_2000" in prepared.text and "characters cut" in prepared.text
    assert prepared.text.endswith("<start_of_turn>model\n")
    decoded = tokenizer.decode(prepared.input_ids, skip_special_tokens=False)
    assert "SENTINEL_ROWS_2000" in decoded and decoded.endswith("<start_of_turn>model\n")
    assert list(prepared.input_ids) == tokenizer(prepared.text, add_special_tokens=True)["input_ids"]


def test_prepare_path_cuts_an_oversized_prefix_on_the_left(tokenizer) -> None:
    task = Task(id="t", question="describe " * 600, format="@mean[value]")
    messages = build_messages(task, [Turn(thought="t", code="print(1)", observation="LAST_OUTPUT_7")])
    prepared = prepare_path(messages, tokenizer, 200, GEMMA)
    assert len(prepared.input_ids) == 200 and prepared.input_ids[0] == tokenizer.bos_token_id
    decoded = tokenizer.decode(prepared.input_ids, skip_special_tokens=False)
    assert decoded.endswith("<start_of_turn>model\n")


def test_prepare_path_respects_the_budget(tokenizer) -> None:
    messages = _messages(40, observation="value " * 40)
    prepared = prepare_path(messages, tokenizer, 600, GEMMA)
    assert len(prepared.input_ids) <= 600
    assert prepared.dropped_steps > 0
    assert prepared.input_ids[0] == tokenizer.bos_token_id
    assert "earlier step(s) omitted" in prepared.text
    assert prepared.text.endswith("<start_of_turn>model\n")


def test_training_and_scoring_use_the_same_function_byte_for_byte(tokenizer) -> None:
    import value_model.scorer

    assert value_model.data.prepare_path is value_model.truncate.prepare_path
    assert value_model.scorer.prepare_path is value_model.truncate.prepare_path
    messages = _messages(30, observation="x = 1 " * 30)
    config = ModelConfig(backbone="unused", max_tokens=500)
    sample = Sample(messages=tuple(messages), text="", value=0.5, visits=1, value_sum=0.5)
    (trained,) = encode_samples([sample], tokenizer, config)
    scored = prepare_path(messages, tokenizer, config.max_tokens, config.template.template())
    assert trained.input_ids == scored.input_ids
    assert scored.dropped_steps > 0  # the budget really cut this path


@pytest.mark.parametrize("budget", [400, 700, 1500])
def test_truncation_is_deterministic(tokenizer, budget: int) -> None:
    messages = _messages(25, observation="abc " * 25)
    first = prepare_path(messages, tokenizer, budget, GEMMA)
    second = prepare_path([dict(m) for m in messages], tokenizer, budget, GEMMA)
    assert first == second
