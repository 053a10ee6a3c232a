"""A reply ends with its turn: the backends stop at the chat rendering's end-of-turn token, not only at EOS.

The fine-tuned default learned to close each reply with Gemma's ``<end_of_turn>``; the base model's EOS is
``<eos>``. A backend stopping only at EOS let the model write the following turns itself (seen: every reply of
a DABench run ran to the token limit, with the next "model" turns glued on).
"""

from __future__ import annotations

import pytest

from jupiter.llm.rendering import end_of_turn_ids
from jupiter.llm.types import SamplingParams
from jupiter.prompts import build_messages
from jupiter.task import load_task_file

pytest.importorskip("transformers")

EXAMPLE = "jupiter/examples/titanic_mean_fare.json"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from jupiter.default_model import ensure_default_model

    return AutoTokenizer.from_pretrained(str(ensure_default_model()))


def test_the_end_of_turn_token_is_a_stop_token_besides_eos(tokenizer):
    ids = end_of_turn_ids(tokenizer)
    assert tokenizer.convert_tokens_to_ids("<end_of_turn>") in ids
    assert tokenizer.eos_token_id in ids
    assert tokenizer.convert_tokens_to_ids("<end_of_turn>") != tokenizer.eos_token_id  # why EOS alone is not enough


def _first_reply(spec: str):
    from jupiter.llm.spec import load_policy

    task = load_task_file(EXAMPLE)
    with load_policy(spec) as policy:
        [[reply]] = policy.generate([build_messages(task)], SamplingParams(temperature=0, max_tokens=200, seed=0))
    return reply


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["hf:default", "vllm:default"])
def test_the_fine_tuned_default_stops_after_one_step(spec):
    if spec.startswith("vllm"):
        pytest.importorskip("vllm")
    reply = _first_reply(spec)
    assert reply.finish_reason == "stop" and reply.num_tokens < 200
    assert reply.text.startswith("Thought:") and "```python" in reply.text
    assert "model\n" not in reply.text and "<start_of_turn>" not in reply.text
