"""Training samples: loss only on the assistant turns (and their end-of-turn token), prompts token-identical to
what the policy backends send, and bad input rejected with the file and line named."""

from __future__ import annotations

import json
import random

import pytest
from sft_rows import sharegpt_row

from jupiter.llm.rendering import render_for_tokenizer
from jupiter.sft.data import IGNORE, SftDataError, encode_all, encode_conversation, end_marker, read_sharegpt


def test_backend_prompt_ids_are_a_prefix_of_the_sample_for_every_assistant_turn(sft_file, tokenizer):
    for conversation in read_sharegpt(sft_file):
        sample = encode_conversation(conversation, tokenizer, None, max_len=4096)
        messages = list(conversation.messages)
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        assert len(turns) == 3
        for k in turns:
            # exactly what HfPolicy sends: render_for_tokenizer, then the tokenizer (which adds BOS)
            prompt_ids = tokenizer([render_for_tokenizer(messages[:k], tokenizer, None)])["input_ids"][0]
            assert prompt_ids[0] == tokenizer.bos_token_id and prompt_ids[1] != tokenizer.bos_token_id
            assert list(sample.input_ids[: len(prompt_ids)]) == prompt_ids
            # the first token the model must produce after that prompt is a labelled one
            assert sample.labels[len(prompt_ids)] == sample.input_ids[len(prompt_ids)]
            assert sample.labels[len(prompt_ids) - 1] == IGNORE


def test_system_prompt_is_folded_into_the_first_user_turn(sft_file, tokenizer):
    conversation = read_sharegpt(sft_file)[0]
    sample = encode_conversation(conversation, tokenizer, None, max_len=4096)
    text = tokenizer.decode(sample.input_ids)
    system = conversation.messages[0]["content"]
    assert text.startswith("<bos><start_of_turn>user\n" + system + "\n\nTask: ")
    assert text.count("<bos>") == 1


def test_labels_cover_exactly_the_assistant_replies_and_their_end_of_turn(sft_file, tokenizer):
    conversation = read_sharegpt(sft_file)[0]
    sample = encode_conversation(conversation, tokenizer, None, max_len=4096)
    labelled = [t for t, label in zip(sample.input_ids, sample.labels) if label != IGNORE]
    assert all(label in (IGNORE, token) for token, label in zip(sample.input_ids, sample.labels))
    replies = [m["content"] for m in conversation.messages if m["role"] == "assistant"]
    # the labelled tokens are the replies, each closed by the end-of-turn token, and nothing else
    assert tokenizer.decode(labelled) == "".join(r + "<end_of_turn>" for r in replies)
    end_id = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    assert sum(1 for t in labelled if t == end_id) == 3
    assert sample.input_ids[-1] == end_id and sample.labels[-1] == end_id
    # observations, the task and the system prompt carry no loss
    unlabelled = tokenizer.decode([t for t, label in zip(sample.input_ids, sample.labels) if label == IGNORE])
    assert "Observation:" in unlabelled and "Task:" in unlabelled
    assert replies[-1].split("Formatted answer: ")[1] not in unlabelled  # the answer, e.g. @mean[47.6]


def test_end_marker_of_the_gemma_rendering(tokenizer):
    assert end_marker(tokenizer, None) == "<end_of_turn>"


def test_a_sample_cut_by_max_len_keeps_what_fits_and_one_with_nothing_left_is_dropped(sft_file, tokenizer):
    conversations = read_sharegpt(sft_file)
    full = encode_conversation(conversations[0], tokenizer, None, max_len=4096)
    first_label = next(i for i, label in enumerate(full.labels) if label != IGNORE)
    cut = encode_conversation(conversations[0], tokenizer, None, max_len=first_label + 5)
    assert cut.truncated and len(cut.input_ids) == first_label + 5
    assert cut.input_ids == full.input_ids[: first_label + 5]
    samples, report = encode_all(conversations, tokenizer, None, max_len=first_label)
    assert samples == [] and report.dropped_no_loss == len(conversations)


def test_gpt_turns_named_in_no_loss_turns_are_context_only(tmp_path, tokenizer):
    row = sharegpt_row(0, random.Random(0))
    row["no_loss_turns"] = [1]  # the first gpt turn: a deliberate mistake in synthesized data
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    conversation = read_sharegpt(path)[0]
    sample = encode_conversation(conversation, tokenizer, None, max_len=4096)
    replies = [m["content"] for m in conversation.messages if m["role"] == "assistant"]
    labelled = [t for t, label in zip(sample.input_ids, sample.labels) if label != IGNORE]
    assert tokenizer.decode(labelled) == "".join(r + "<end_of_turn>" for r in replies[1:])
    assert replies[0] in tokenizer.decode(sample.input_ids)  # still in the context of the later turns


def test_missing_file_is_named(tmp_path):
    with pytest.raises(SftDataError, match="nope.jsonl does not exist"):
        read_sharegpt(tmp_path / "nope.jsonl")


@pytest.mark.parametrize("line, match", [
    ("{not json", "line 3: not valid JSON"),
    ('{"conversations": []}', "line 3: 'conversations' must be a non-empty list"),
    ('{"conversations": [{"from": "gpt", "value": "x"}]}', r"line 3: conversations\[0\] is from 'gpt'"),
    ('{"conversations": [{"from": "human", "value": 1}]}', r"line 3: conversations\[0\] must be"),
    ('{"conversations": [{"from": "human", "value": "q"}]}', "line 3: no gpt turn"),
    ('[1, 2]', "line 3: a row must be a JSON object"),
    ('{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "no_loss_turns": [0]}',
     "line 3: 'no_loss_turns' must list indices of gpt turns"),
    ('{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "no_loss_turns": [5]}',
     "line 3: 'no_loss_turns' must list indices of gpt turns"),
])
def test_malformed_row_names_its_line(tmp_path, line, match):
    path = tmp_path / "bad.jsonl"
    rng = random.Random(0)
    path.write_text(json.dumps(sharegpt_row(0, rng)) + "\n\n" + line + "\n", encoding="utf-8")
    with pytest.raises(SftDataError, match=match):
        read_sharegpt(path)


def test_trailing_human_turn_is_dropped(tmp_path):
    row = sharegpt_row(0, random.Random(0))
    row["conversations"].append({"from": "human", "value": "Observation:\nmore"})
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert read_sharegpt(path)[0].messages[-1]["role"] == "assistant"
