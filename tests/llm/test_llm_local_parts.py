"""Pieces of the local backends that need no model: prompt rendering, the sampler, lazy imports."""

import json
import subprocess
import sys

import pytest

from jupiter.llm.rendering import render_for_tokenizer, template_by_name
from jupiter.prompts import CHATML, GEMMA, render_prompt

MESSAGES = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]


class TemplatedTokenizer:
    chat_template = "{{ bos_token }}..."
    bos_token = "<bos>"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "<bos>" + "|".join(m["content"] for m in messages) + "|model:"


class PlainTokenizer:
    chat_template = None


def test_rendering_prefers_the_tokenizers_template_and_drops_bos():
    assert render_for_tokenizer(MESSAGES, TemplatedTokenizer(), None) == "S|U|model:"
    assert render_for_tokenizer(MESSAGES, PlainTokenizer(), None) == render_prompt(MESSAGES, GEMMA)
    assert render_for_tokenizer(MESSAGES, TemplatedTokenizer(), CHATML) == render_prompt(MESSAGES, CHATML)
    assert template_by_name("ChatML") is CHATML


def test_importing_the_package_loads_no_heavy_backend():
    code = (
        "import json, sys, jupiter.llm; "
        "print(json.dumps([m for m in ('torch', 'transformers', 'vllm', 'requests') if m in sys.modules]))"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert loaded == []


def _apply(processors, ids, scores):
    for processor in processors:
        scores = processor(ids, scores)
    return scores


def test_sampler_records_raw_logprobs_and_applies_top_p():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from jupiter.llm import SamplingParams
    from jupiter.llm.hf_local import _RecordLogprobs, sampling_processors

    recorder = _RecordLogprobs()
    processors = [recorder, *sampling_processors(SamplingParams(temperature=0.5, top_p=0.6))]
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    out = _apply(processors, torch.tensor([[9]]), logits.clone())
    # temperature 0.5 sharpens to ~[0.69, 0.25, 0.06, 0.01]; top-p 0.6 keeps only the first token
    assert torch.isfinite(out[0, 0]) and torch.isinf(out[0, 1:]).all()
    _apply(processors, torch.tensor([[9, 1]]), logits.clone())  # token 1 was chosen at step 0
    final = torch.tensor([[9, 1, 2]])  # token 2 chosen at step 1
    recorded = recorder.finish(final, steps=2)
    expected = torch.log(torch.tensor([[0.3, 0.15]]))
    assert torch.allclose(recorded, expected, atol=1e-5)  # raw model log-probs, not the sharpened ones


def test_sampler_top_p_keeps_the_token_that_crosses_the_threshold():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from jupiter.llm import SamplingParams
    from jupiter.llm.hf_local import sampling_processors

    logits = torch.log(torch.tensor([[0.1, 0.5, 0.3, 0.1]]))
    for nucleus in ("window", "engine"):  # ours and transformers' own TopPLogitsWarper keep the same tokens
        out = _apply(sampling_processors(SamplingParams(top_p=0.7), nucleus), torch.tensor([[0]]), logits.clone())
        assert torch.isfinite(out[0, 1]) and torch.isfinite(out[0, 2])  # 0.5, then 0.3 crosses 0.7
        assert torch.isinf(out[0, 0]) and torch.isinf(out[0, 3])
    assert sampling_processors(SamplingParams(temperature=0)) == []  # greedy: no warper at all
