"""The one truncation: system + task kept, most recent steps that fit, a marker for dropped middle steps;
training and scoring produce byte-identical model input."""

from __future__ import annotations

import pytest

import value_model.data
import value_model.truncate
from jupiter.prompts import GEMMA, Turn, build_messages, render_prompt
from jupiter.task import Task
from value_model.config import ModelConfig
from value_model.data import encode_samples
from value_model.extract import Sample
from value_model.truncate import TRUNCATION_MARKER, prepare_path, split_path, truncate_messages

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


def test_latest_step_is_kept_even_when_it_alone_is_too_long() -> None:
    messages = _messages(3, observation="word " * 500)
    kept, dropped = truncate_messages(messages, _words, 300, GEMMA)
    assert kept[-2:] == messages[-2:] and dropped == 2


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
