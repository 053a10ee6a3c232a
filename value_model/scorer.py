"""Batched value scoring for the search engine (the ``Value`` protocol: ``evaluate(histories)``).

The heavy object is built once (``ValueScorer.load``); every call takes a batch of paths and returns one value
in [-1, 1] per path, in input order. Paths go through ``prepare_path`` — the same truncation training used —
are sorted by length so each batch pads little, and run under ``torch.inference_mode``. Values are cached
by a hash of the path's rendered text: the search asks for the same node again (e.g. after a rerun or across
trees of one task sharing a prefix path), and a hit costs no tokenizer or model call.

A value that is not a finite number (NaN: e.g. an overflow in a bf16 forward pass) is returned as NaN, never
clamped into [-1, 1] or replaced by a number: the search treats NaN as "no estimate". Such values are logged,
counted (``CacheStats.invalid``) and not cached.

Work is shared below the value cache too: paths of one call that begin alike run their common beginning once,
and that beginning's keys and values are kept for later calls (``value_model.prefix_cache``). With
``keep_paths`` (the default) every scored path is kept as well, so a node's children continue from the node's
own whole path, which ran when the node was scored: each token of a tree runs once. Without it, siblings run as
one padded batch after their common beginning, and a node's own turn runs again when its children are scored.

The LoRA adapters are merged into the backbone's weights at load (``merge_lora``, PEFT's ``merge_adapter``): a
scorer never trains, and unmerged, each of the default model's 126 adapted projections runs two more small matmuls
and three more ops on every forward. Merged, a forward is the plain backbone's: the same values up to float
rounding (fp32: within 1e-5; bf16 rounds the merged weights, about 1e-3 on a value) for less time a scored node
(docs/value_model.md, "LoRA merged").

The class has a plain constructor, so it can also be a Ray actor: ``ray.remote(ValueScorer).remote(dir)``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from jupiter.prompts import Message
from jupiter.sft.config import Dtype
from value_model.data import collate, shared_prefix_groups, sorted_batches
from value_model.model import PrefixState, ValueModel, load_tokenizer, pick_device
from value_model.prefix_cache import DEFAULT_PREFIX_CACHE_MB, PrefixCache
from value_model.truncate import path_key, prepare_path

__all__ = ["ValueScorer", "CacheStats"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    size: int
    invalid: int = 0  # scored paths whose value was not a finite number (returned as NaN)
    prefixes: int = 0  # encoded path beginnings kept for later calls (``PrefixCache``)
    prefix_tokens_reused: int = 0  # tokens a kept beginning saved from being run again
    tokens_run: int = 0  # tokens the backbone ran (padding not counted)


class ValueScorer:
    """A trained value model ready to score paths. Thread-safe (one model call at a time)."""

    def __init__(self, model_dir: str | Path, device: str | None = None, batch_size: int = 8,
                 cache_size: int = 100_000, backbone: str | None = None, sort_by_length: bool = True,
                 share_prefix: bool = True, min_shared_tokens: int = 32,
                 prefix_cache_mb: float = DEFAULT_PREFIX_CACHE_MB, dtype: str | None = None,
                 keep_paths: bool = True, merge_lora: bool = True) -> None:
        if batch_size <= 0:
            raise ValueError(f"ValueScorer.batch_size: must be > 0, got {batch_size!r}")
        if cache_size < 0:
            raise ValueError(f"ValueScorer.cache_size: must be >= 0, got {cache_size!r}")
        if prefix_cache_mb < 0:
            raise ValueError(f"ValueScorer.prefix_cache_mb: must be >= 0, got {prefix_cache_mb!r}")
        self.device = pick_device(device)
        try:
            precision = None if dtype is None else Dtype(dtype)
        except ValueError:
            raise ValueError(f"ValueScorer.dtype: float32 or bfloat16, got {dtype!r}") from None
        # None: the device's (model.pick_dtype: bf16 on a GPU, fp32 on a CPU); the head runs in fp32 either way
        self.model = ValueModel.load(model_dir, backbone=backbone, device=self.device,
                                     dtype=None if precision is None else precision.to_torch())
        self.model.eval()
        if merge_lora:
            self.model.peft_model.merge_adapter()  # undone by ``unmerge_adapter``; the saved folder is untouched
        self.config = self.model.config
        self.template = self.config.template.template()
        self.tokenizer = load_tokenizer(self.config.backbone)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.batch_size = batch_size
        self.sort_by_length = sort_by_length
        self.share_prefix = share_prefix
        self.min_shared_tokens = max(1, min_shared_tokens)
        self.keep_paths = keep_paths
        self._cache_size = cache_size
        self.prefix_cache = PrefixCache(int(prefix_cache_mb * 2**20))
        self._prefix_tokens_reused = 0
        self._tokens_run = 0
        self._cache: OrderedDict[str, float] = OrderedDict()
        self._hits = 0
        self._misses = 0
        self._invalid = 0
        self._lock = threading.Lock()

    @classmethod
    def load(cls, directory: str | Path, device: str | None = None, **options) -> ValueScorer:
        """Load a saved value model folder (``value_config.json``, ``adapter/``, ``value_head.safetensors``)."""
        return cls(directory, device=device, **options)

    def evaluate(self, histories: list[list[Message]]) -> list[float]:
        """One value in [-1, 1] per history (a list of chat messages), in input order; NaN where the model
        gave no finite number (see the module docstring)."""
        with self._lock:
            keys = [path_key(h, self.template) for h in histories]
            todo: dict[str, Sequence[Message]] = {}
            for key, history in zip(keys, histories):
                if key in self._cache:
                    self._cache.move_to_end(key)
                    self._hits += 1
                elif key not in todo:
                    todo[key] = history
                    self._misses += 1
                else:
                    self._hits += 1  # a duplicate within this batch is scored once
            fresh = self._score(list(todo.values())) if todo else []
            results = dict(zip(todo.keys(), fresh))
            invalid = [key for key, value in results.items() if math.isnan(value)]
            if invalid:
                self._invalid += len(invalid)
                log.warning("value model: %d of %d path(s) got a non-finite value (returned as NaN, not cached)",
                            len(invalid), len(results))
            for key, value in results.items():
                if not math.isnan(value):
                    self._remember(key, value)
            return [results[k] if k in results else self._cache[k] for k in keys]

    def _score(self, histories: Sequence[Sequence[Message]]) -> list[float]:
        ids = [prepare_path(h, self.tokenizer, self.config.max_tokens, self.template).input_ids for h in histories]
        return self.score_token_ids(ids)

    @torch.inference_mode()
    def score_token_ids(self, sequences: Sequence[Sequence[int]]) -> list[float]:
        """Score already-encoded paths (no value cache), in input order: values in [-1, 1], or NaN where the
        model's output is not a finite number (``clamp`` would keep NaN but turn an infinity into ±1: never a
        number the search would trust).

        Paths that start with the same tokens (``share_prefix``, at least ``min_shared_tokens`` of them) are
        scored as groups whose common prefix runs once (``ValueModel.encode_prefix``, then ``forward_suffixes``):
        the K children of a node share its whole path and all nodes of a task the system and task turns, so most
        of each path's tokens are computed once per group instead of once per path. A group's encoded beginning is kept
        for later calls (``PrefixCache``, up to ``prefix_cache_mb`` of keys and values; 0: off): the next
        expansion below a child continues from its parent's path, and a lone path whose beginning is kept runs
        only past it.
        """
        if self.keep_paths and self.share_prefix and self.prefix_cache.budget_bytes > 0:
            return self._score_keeping_paths(sequences)
        values = [0.0] * len(sequences)
        if self.share_prefix:
            groups, rest = shared_prefix_groups(sequences, self.batch_size, self.min_shared_tokens)
            groups += self._kept_singles(sequences, rest)
            kept = {i for _, members in groups for i in members}
            rest = [i for i in rest if i not in kept]
        else:
            groups, rest = [], list(range(len(sequences)))
        for shared, members in groups:
            tokens = sequences[members[0]][:shared]
            start = self.prefix_cache.longest(tokens, shared)
            self._prefix_tokens_reused += 0 if start is None else start.length
            prefix = self.model.encode_prefix(torch.tensor(tokens, dtype=torch.long, device=self.device), start)
            suffixes, mask = collate([sequences[i][shared:] for i in members], self.pad_id)
            out = self.model.forward_suffixes(prefix, suffixes.to(self.device), mask.to(self.device))
            self._tokens_run += shared - (0 if start is None else start.length) + int(mask.sum())
            if bool(torch.isfinite(prefix.hidden_sum).all()):
                self.prefix_cache.add(tokens, prefix)
            self._keep(values, members, out)
        lengths = [len(sequences[i]) for i in rest]
        if self.sort_by_length:
            batches = [[rest[j] for j in batch] for batch in sorted_batches(lengths, self.batch_size)]
        else:
            batches = [rest[i:i + self.batch_size] for i in range(0, len(rest), self.batch_size)]
        for batch in batches:
            input_ids, mask = collate([sequences[i] for i in batch], self.pad_id)
            self._tokens_run += int(mask.sum())
            self._keep(values, batch, self.model(input_ids.to(self.device), mask.to(self.device)))
        return values

    def _score_keeping_paths(self, sequences: Sequence[Sequence[int]]) -> list[float]:
        """``score_token_ids`` with every path kept: a group's common beginning runs once (and is kept), then each
        path continues alone from the longest kept beginning of it (the group's, or its parent node's whole path
        from an earlier call) and is kept in turn. One path at a time, so no padding runs and each path's keys
        and values are its own to keep (a padded batch's would hold the padding inside Gemma 3's window)."""
        values = [0.0] * len(sequences)
        groups, _ = shared_prefix_groups(sequences, self.batch_size, self.min_shared_tokens)
        for shared, members in groups:
            self._encoded(sequences[members[0]][:shared])
        for i, sequence in enumerate(sequences):
            state = self._encoded(sequence)
            self._keep(values, [i], self.model.value_of(state))
        return values

    def _encoded(self, tokens: Sequence[int]) -> PrefixState:
        """``tokens`` through the backbone from their longest kept beginning; the result kept (when finite)."""
        start = self.prefix_cache.longest(tokens, len(tokens))
        done = 0 if start is None else start.length
        self._prefix_tokens_reused += done
        state = self.model.encode_prefix(torch.tensor(list(tokens), dtype=torch.long, device=self.device), start)
        self._tokens_run += len(tokens) - done
        if state is not start and bool(torch.isfinite(state.hidden_sum).all()):
            self.prefix_cache.add(tokens, state)
        return state

    def _kept_singles(self, sequences: Sequence[Sequence[int]], rest: Sequence[int]) -> list[tuple[int, list[int]]]:
        """Groups of one for the paths in ``rest`` whose beginning an earlier call encoded (a node's parent path,
        its task's turns): only the part past it runs."""
        singles = []
        for i in rest:
            kept = self.prefix_cache.longest(sequences[i], len(sequences[i]) - 1)
            if kept is not None and kept.length >= self.min_shared_tokens:
                singles.append((kept.length, [i]))
        return singles

    @staticmethod
    def _keep(values: list[float], indices: Sequence[int], out: torch.Tensor) -> None:
        out = out.float().cpu()
        out = torch.where(torch.isfinite(out), out.clamp(-1.0, 1.0), torch.full_like(out, float("nan")))
        for i, v in zip(indices, out.tolist()):
            values[i] = float(v)

    def _remember(self, key: str, value: float) -> None:
        if self._cache_size == 0:
            return
        self._cache[key] = value
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def cache_stats(self) -> CacheStats:
        return CacheStats(hits=self._hits, misses=self._misses, size=len(self._cache), invalid=self._invalid,
                          prefixes=len(self.prefix_cache), prefix_tokens_reused=self._prefix_tokens_reused,
                          tokens_run=self._tokens_run)

    def clear_cache(self) -> None:
        """Forget every value and every kept path beginning."""
        with self._lock:
            self._cache.clear()
            self.prefix_cache.clear()
