"""vLLM (v1) logits processor: exact top-k / top-p by ``jupiter.llm.nucleus`` instead of the engine's full sort.

Plugged in through vLLM's documented extension point (``LLM(..., logits_processors=[WindowedTopKTopP])``, the
v1 ``LogitsProcessor`` interface), not a fork or a patch. It declares itself argmax-invariant, so the sampler
runs it after temperature and before its own top-k/top-p (``vllm/v1/sample/sampler.py``, ``Sampler.sample``);
the requests that use it carry their top-p / top-k in ``SamplingParams.extra_args`` (``EXTRA_ARGS_KEY``) and
leave the engine's own ``top_p`` at 1 and ``top_k`` at 0, so the engine skips its sort
(``apply_top_k_top_p`` returns at once when no request asks for either) and samples from the masked logits with
its usual per-request generators: the same seed gives the same text as the engine's own top-p wherever the
kept sets agree, which they do but for ties at the cut-off (``jupiter.llm.nucleus``).

A vLLM OpenAI server can load it too: ``--logits-processors jupiter.llm.vllm_nucleus:WindowedTopKTopP``, with
requests sending ``"vllm_xargs": {"jupiter_nucleus": [top_p, top_k]}`` and ``top_p`` 1.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from jupiter.llm.nucleus import filter_top_k_top_p_

__all__ = ["EXTRA_ARGS_KEY", "WindowedTopKTopP", "extra_args"]

#: ``SamplingParams.extra_args`` key: ``[top_p, top_k]`` of a request that this processor filters.
EXTRA_ARGS_KEY = "jupiter_nucleus"


def extra_args(top_p: float, top_k: int) -> dict[str, Any] | None:
    """The ``extra_args`` that hand a request's top-p / top-k to the processor (None when both are off)."""
    if top_p >= 1.0 and top_k <= 0:
        return None
    return {EXTRA_ARGS_KEY: [float(top_p), int(top_k)]}


def _settings(params: SamplingParams, _prompt: Any, _output: Any) -> tuple[float, int] | None:
    value = (params.extra_args or {}).get(EXTRA_ARGS_KEY)
    if value is None:
        return None
    top_p, top_k = float(value[0]), int(value[1])
    return (top_p, top_k) if top_p < 1.0 or top_k > 0 else None


class WindowedTopKTopP(LogitsProcessor):
    """Per-request exact top-k / top-p without a full-vocabulary sort (see the module docstring).

    ``seconds`` and ``calls`` count the time spent in ``apply`` (for the throughput and step profiles).
    """

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, tuple[float, int]] = {}  # persistent-batch index -> (top_p, top_k)
        self._tensors: tuple[torch.Tensor, torch.Tensor] | None = None
        self._size = -1
        self.seconds = 0.0
        self.calls = 0

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        value = (sampling_params.extra_args or {}).get(EXTRA_ARGS_KEY)
        if value is None:
            return
        try:
            top_p, top_k = float(value[0]), int(value[1])
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"extra_args[{EXTRA_ARGS_KEY!r}] must be [top_p, top_k], got {value!r}") from None
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"extra_args[{EXTRA_ARGS_KEY!r}]: top_p must be in (0, 1], got {top_p}")
        if top_k < 0:
            raise ValueError(f"extra_args[{EXTRA_ARGS_KEY!r}]: top_k must be >= 0, got {top_k}")

    def is_argmax_invariant(self) -> bool:
        """Filtering keeps the most likely token, so greedy rows are unaffected: run after temperature."""
        return True

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if process_dict_updates(self.rows, batch_update, _settings):
            self._tensors = None

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        start = time.perf_counter()
        rows = logits.shape[0]
        if self._tensors is None or self._size != rows:
            top_p = torch.ones(rows, dtype=torch.float64)
            top_k = torch.zeros(rows, dtype=torch.int64)
            for index, (p, k) in self.rows.items():
                if index < rows:
                    top_p[index], top_k[index] = p, k
            self._tensors, self._size = (top_p, top_k), rows
        top_p, top_k = self._tensors
        filter_top_k_top_p_(logits, top_p.to(logits.device), top_k.to(logits.device))
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return logits


def filter_seconds(llm: Any) -> float | None:
    """Seconds the engine's ``WindowedTopKTopP`` spent filtering since it started (None: not installed).

    Read through ``LLM.collective_rpc`` (vLLM's call into its workers), for the throughput and step profiles.
    """

    def read(worker: Any) -> float | None:
        processors = worker.model_runner.input_batch.logitsprocs.argmax_invariant
        return next((p.seconds for p in processors if isinstance(p, WindowedTopKTopP)), None)

    values = [v for v in llm.collective_rpc(read) if v is not None]
    return sum(values) if values else None
