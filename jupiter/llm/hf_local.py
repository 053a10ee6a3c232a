"""Policy backend running a Hugging Face causal LM with transformers, in this process (CPU by default;
``#device=cuda`` runs it on a GPU, where vLLM is not installed).

It is what ``default`` means: the embedded Gemma 3 270M (``jupiter.default_model``) needs no server, so
``jupiter solve`` works on a fresh CPU machine. One ``generate`` call runs the whole batch: prompts are left
padded and each is expanded to ``n`` samples (``num_return_sequences``).

Sampling goes through transformers' ``LogitsProcessor`` list, in this order: ``_RecordLogprobs`` sees the raw
logits first, so ``mean_logprob`` is the model's own log-probability of each generated token (what vLLM
reports too), not the probability after temperature and top-p; then transformers' ``TemperatureLogitsWarper``;
then top-k / top-p by ``WindowedTopKTopP`` (``jupiter.llm.nucleus``: exact, without the full-vocabulary sort
of transformers' ``TopPLogitsWarper``), or, with ``#nucleus=engine``, transformers' own ``TopKLogitsWarper``
and ``TopPLogitsWarper``. Stop strings are applied to the decoded text:
the text is cut at the first stop string and ``finish_reason`` becomes ``stop``.

Randomness: each call seeds its own fork of torch's RNG (``torch.random.fork_rng``, the GPU's too on CUDA), from
``params.seed`` or fresh OS entropy, so a seeded call is reproducible and no call changes the process-wide RNG
state.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Literal, get_args

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from jupiter.config_model import ConfigModel, PositiveInt
from jupiter.llm.base import BasePolicy
from jupiter.llm.machine_dtype import cpu_dtype
from jupiter.llm.nucleus import WINDOWS, filter_top_k_top_p_
from jupiter.llm.rendering import ModelFolder, TemplateName, end_of_turn_ids, render_for_tokenizer, template_by_name
from jupiter.llm.types import Completion, FinishReason, PolicySpecError, SamplingParams
from jupiter.prompts import Message
from jupiter.torch_device import check_device

__all__ = ["HfConfig", "HfPolicy", "WindowedTopKTopP", "NUCLEUS_CHOICES"]

#: Who applies top-p / top-k (``HfConfig.nucleus``): our windowed filter or transformers' own warpers.
Nucleus = Literal["window", "engine"]
NUCLEUS_CHOICES = get_args(Nucleus)

log = logging.getLogger(__name__)

_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32}


class HfConfig(ConfigModel):
    """Settings of the transformers backend.

    Attributes:
        model_dir: a Hugging Face model folder; None means the embedded default model, fine-tuned
            (``jupiter.default_model.ensure_finetuned_default_model``). ``hf:SPEC`` strings resolve
            ``default``, ``default-base`` and adapter folders first (``jupiter.llm.model_dirs``).
        dtype: ``bfloat16`` (half the memory, what the default model is stored in) or ``float32``. None: what
            this CPU computes natively (``jupiter.llm.machine_dtype.cpu_dtype``: float32 without bfloat16
            instructions, about twice as fast there); bfloat16 on a GPU.
        device: ``cpu`` (default), ``cuda`` or ``cuda:N``: where the model runs. Why: a GPU machine without vLLM
            (the value-model script, scripts/value_model_gpu.sh) still generates there.
        template: ``gemma`` / ``chatml`` to force ``render_prompt`` with that template; None uses the
            tokenizer's chat template when it has one, else Gemma's.
        threads: torch intra-op threads; None leaves torch's setting alone.
        nucleus: ``window`` (default): top-k / top-p by ``WindowedTopKTopP``; ``engine``: transformers' own
            warpers, which sort the whole vocabulary (for comparison).
    """

    config_error = PolicySpecError

    model_dir: ModelFolder | None = None
    dtype: Literal["bfloat16", "bf16", "float32", "fp32"] | None = None
    template: TemplateName | None = None
    threads: PositiveInt | None = None
    nucleus: Nucleus = "window"
    device: str = "cpu"

    @classmethod
    def from_spec(cls, target: str, options: Mapping[str, str], spec: str) -> HfConfig:
        """From ``hf:PATH|default#dtype=...&template=...&threads=...&nucleus=window|engine&device=cpu|cuda``;
        errors name the spec."""
        known = {"dtype", "template", "threads", "nucleus", "device"}
        unknown = set(options) - known
        if unknown:
            raise PolicySpecError(f"policy spec {spec!r}: unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
        try:
            return cls(
                model_dir=None if target == "default" else Path(target).expanduser(),
                dtype=options.get("dtype"),
                template=options.get("template") or None,
                threads=int(options["threads"]) if "threads" in options else None,
                nucleus=options.get("nucleus", "window"),
                device=check_device(options.get("device", "cpu")),
            )
        except (PolicySpecError, ValueError) as exc:
            raise PolicySpecError(f"policy spec {spec!r}: {exc}") from None


class _RecordLogprobs(LogitsProcessor):
    """Records the raw log-probability of each chosen token; returns the scores unchanged (first in the list).

    At step t the processor sees the token chosen at step t-1 (the last column of ``input_ids``) and looks
    it up in the log-softmax it kept from step t-1; the final step's token is looked up by ``finish``.
    Only one (rows × vocabulary) matrix is kept at a time.
    """

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None
        self.chosen: list[torch.Tensor] = []  # one (rows,) tensor per generated token

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.float()
        if self.previous is not None:
            self.chosen.append(self.previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self.previous = torch.log_softmax(scores, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor, steps: int) -> torch.Tensor:
        """(rows, steps) log-probs of the generated tokens."""
        chosen = list(self.chosen)
        if self.previous is not None and len(chosen) < steps:
            chosen.append(self.previous.gather(1, sequences[:, -1:]).squeeze(1))
        return torch.stack(chosen, dim=1) if chosen else torch.zeros(sequences.shape[0], 0)


class WindowedTopKTopP(LogitsProcessor):
    """transformers' ``TopKLogitsWarper`` + ``TopPLogitsWarper`` in one warper, without sorting the vocabulary.

    The same kept tokens (``jupiter.llm.nucleus``; ties at the cut-off are all kept), masked to ``-inf`` in
    place. Put it after ``TemperatureLogitsWarper``, as transformers orders its own warpers.
    """

    def __init__(self, top_p: float = 1.0, top_k: int = 0, windows: tuple[int, ...] = WINDOWS) -> None:
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        self.top_p, self.top_k, self.windows = float(top_p), int(top_k), windows

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return filter_top_k_top_p_(scores, self.top_p, self.top_k, self.windows)


def sampling_processors(params: SamplingParams, nucleus: str = "window") -> list[LogitsProcessor]:
    """The warpers after the log-prob recorder: temperature, then top-k / top-p (none when greedy or off)."""
    if params.greedy:
        return []
    out: list[LogitsProcessor] = []
    if params.temperature != 1.0:
        out.append(TemperatureLogitsWarper(params.temperature))
    if params.top_p >= 1.0 and params.top_k == 0:
        return out
    if nucleus == "window":
        out.append(WindowedTopKTopP(params.top_p, params.top_k))
    else:
        if params.top_k:
            out.append(TopKLogitsWarper(params.top_k))
        if params.top_p < 1.0:
            out.append(TopPLogitsWarper(params.top_p))
    return out


class HfPolicy(BasePolicy):
    """transformers policy; the model is loaded once at construction (a few seconds for the default)."""

    name = "hf"

    def __init__(self, config: HfConfig = HfConfig()) -> None:
        super().__init__()
        self.config = config
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        if config.model_dir is None:  # the default policy: the embedded model with the shipped fine-tuning
            from jupiter.default_model import ensure_finetuned_default_model

            model_dir = ensure_finetuned_default_model()
        else:
            model_dir = Path(config.model_dir)
        self.model_dir = model_dir
        self.model_ref = str(model_dir)
        self.nucleus = config.nucleus
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.tokenizer.padding_side = "left"
        self.device = torch.device(config.device)
        on_gpu = self.device.type == "cuda"
        self.dtype = config.dtype or ("bfloat16" if on_gpu else cpu_dtype())
        if config.dtype is None and self.dtype == "float32":
            log.info("computing in float32: this CPU has no bfloat16 instructions (#dtype=bfloat16 forces it)")
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=_DTYPES[self.dtype])
        self.model = self.model.to(self.device).eval()
        self._rng_devices = [self.device.index or 0] if on_gpu else []
        self._template = template_by_name(config.template) if config.template else None
        pad = self.tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else self.tokenizer.eos_token_id
        self._end_ids = end_of_turn_ids(self.tokenizer)

    def render(self, history: list[Message]) -> str:
        """The prompt text for one history (tokenizer chat template, else the Gemma template)."""
        return render_for_tokenizer(history, self.tokenizer, self._template)

    def _generate(self, histories: list[list[Message]], params: SamplingParams) -> list[list[Completion]]:
        prompts = [self.render(h) for h in histories]
        # transformers refuses num_return_sequences > 1 without sampling: greedy copies go in as repeated rows
        copies = params.n if params.greedy else 1
        batch = self.tokenizer([p for p in prompts for _ in range(copies)], return_tensors="pt", padding=True)
        batch = batch.to(self.device)
        prompt_len = batch["input_ids"].shape[1]
        # each prompt once; transformers re-reads it for each of the n samples (num_return_sequences)
        prompt_tokens = int(batch["attention_mask"].sum()) // copies
        self._usage.add(prompt_tokens=prompt_tokens, sent_prompt_tokens=prompt_tokens * params.n, requests=1)
        recorder = _RecordLogprobs()
        processors = LogitsProcessorList([recorder, *sampling_processors(params, self.config.nucleus)])
        # temperature, top-k and top-p come from `processors`; the warpers of the generation config stay off
        sampling = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0} if not params.greedy else {}
        generation = GenerationConfig(
            max_new_tokens=params.max_tokens,
            num_return_sequences=params.n // copies,
            eos_token_id=self._end_ids,
            pad_token_id=self._pad_id,
            **sampling,
        )
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little")
        with torch.inference_mode(), torch.random.fork_rng(devices=self._rng_devices):
            torch.manual_seed(seed)
            sequences = self.model.generate(
                **batch, generation_config=generation, logits_processor=processors
            )
        new_tokens = sequences[:, prompt_len:].cpu()
        logprobs = recorder.finish(sequences, new_tokens.shape[1]).cpu()
        completions = [self._completion(new_tokens[row], logprobs[row], params) for row in range(new_tokens.shape[0])]
        lengths = [int(n) for n in batch["attention_mask"].sum(dim=1).tolist()][::copies]  # padding excluded
        return [[replace(c, prompt_tokens=lengths[i]) for c in completions[i * params.n : (i + 1) * params.n]]
                for i in range(len(histories))]

    def _completion(self, tokens: torch.Tensor, logprobs: torch.Tensor, params: SamplingParams) -> Completion:
        ids = tokens.tolist()
        length, reason = len(ids), FinishReason.LENGTH.value
        for k, token in enumerate(ids):
            if token in self._end_ids:
                length, reason = k + 1, FinishReason.STOP.value
                break
        content = [t for t in ids[:length] if t not in self._end_ids]
        text = self.tokenizer.decode(content, skip_special_tokens=True)
        cut = min((text.find(s) for s in params.stop if s in text), default=-1)
        if cut >= 0:
            text, reason = text[:cut], FinishReason.STOP.value
            length = self._tokens_until(content, params.stop)
        mean = float(logprobs[:length].mean()) if params.logprobs and length > 0 else None
        return Completion(text=text, finish_reason=reason, mean_logprob=mean, num_tokens=length)

    def _tokens_until(self, ids: list[int], stops: tuple[str, ...]) -> int:
        """Fewest leading tokens whose text contains a stop string (binary search: decoding is monotone)."""
        low, high = 1, len(ids)
        while low < high:
            mid = (low + high) // 2
            text = self.tokenizer.decode(ids[:mid], skip_special_tokens=True)
            if any(s in text for s in stops):
                high = mid
            else:
                low = mid + 1
        return low

    def _close(self) -> None:
        self.model = None
        self.tokenizer = None
