"""Batched value scoring for the search engine (the ``Value`` protocol: ``evaluate(histories)``).

The heavy object is built once (``ValueScorer.load``); every call takes a batch of paths and returns one value
in [-1, 1] per path, in input order. Paths go through ``prepare_path`` — the same truncation training used —
are sorted by length so each batch pads little, and run under ``torch.inference_mode``. Values are cached
by a hash of the path's rendered text: the search asks for the same node again (e.g. after a rerun or across
trees of one task sharing a prefix path), and a hit costs no tokenizer or model call.

A value that is not a finite number (NaN: e.g. an overflow in a bf16 forward pass) is returned as NaN, never
clamped into [-1, 1] or replaced by a number: the search treats NaN as "no estimate". Such values are logged,
counted (``CacheStats.invalid``) and not cached.

The class has a plain constructor, so it can also be a Ray actor: ``ray.remote(ValueScorer).remote(dir)``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from jupiter.prompts import Message
from value_model.data import collate, shared_prefix_groups, sorted_batches
from value_model.model import ValueModel, load_tokenizer, pick_device
from value_model.truncate import path_key, prepare_path

__all__ = ["ValueScorer", "CacheStats"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    size: int
    invalid: int = 0  # scored paths whose value was not a finite number (returned as NaN)


class ValueScorer:
    """A trained value model ready to score paths. Thread-safe (one model call at a time)."""

    def __init__(self, model_dir: str | Path, device: str | None = None, batch_size: int = 8,
                 cache_size: int = 100_000, backbone: str | None = None, sort_by_length: bool = True,
                 share_prefix: bool = True, min_shared_tokens: int = 32) -> None:
        if batch_size <= 0:
            raise ValueError(f"ValueScorer.batch_size: must be > 0, got {batch_size!r}")
        if cache_size < 0:
            raise ValueError(f"ValueScorer.cache_size: must be >= 0, got {cache_size!r}")
        self.device = pick_device(device)
        self.model = ValueModel.load(model_dir, backbone=backbone, device=self.device)
        self.model.eval()
        self.config = self.model.config
        self.template = self.config.template.template()
        self.tokenizer = load_tokenizer(self.config.backbone)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.batch_size = batch_size
        self.sort_by_length = sort_by_length
        self.share_prefix = share_prefix
        self.min_shared_tokens = max(1, min_shared_tokens)
        self._cache_size = cache_size
        self._cache: OrderedDict[str, float] = OrderedDict()
        self._hits = 0
        self._misses = 0
        self._invalid = 0
        self._lock = threading.Lock()

    @classmethod
    def load(cls, directory: str | Path, device: str | None = None, **options) -> "ValueScorer":
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
        """Score already-encoded paths (no cache), in input order: values in [-1, 1], or NaN where the model's
        output is not a finite number (``clamp`` would keep NaN but turn an infinity into ±1: never a number
        the search would trust).

        Paths that start with the same tokens (``share_prefix``, at least ``min_shared_tokens`` of them) are
        scored as groups whose common prefix runs once (``ValueModel.forward_shared_prefix``): the K children
        of a node share its whole path and all nodes of a task the system and task turns, so most of each
        path's tokens are computed once per group instead of once per path.
        """
        values = [0.0] * len(sequences)
        if self.share_prefix:
            groups, rest = shared_prefix_groups(sequences, self.batch_size, self.min_shared_tokens)
        else:
            groups, rest = [], list(range(len(sequences)))
        for shared, members in groups:
            prefix = torch.tensor(sequences[members[0]][:shared], dtype=torch.long, device=self.device)
            suffixes, mask = collate([sequences[i][shared:] for i in members], self.pad_id)
            out = self.model.forward_shared_prefix(prefix, suffixes.to(self.device), mask.to(self.device))
            self._keep(values, members, out)
        lengths = [len(sequences[i]) for i in rest]
        if self.sort_by_length:
            batches = [[rest[j] for j in batch] for batch in sorted_batches(lengths, self.batch_size)]
        else:
            batches = [rest[i:i + self.batch_size] for i in range(0, len(rest), self.batch_size)]
        for batch in batches:
            input_ids, mask = collate([sequences[i] for i in batch], self.pad_id)
            self._keep(values, batch, self.model(input_ids.to(self.device), mask.to(self.device)))
        return values

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
        return CacheStats(hits=self._hits, misses=self._misses, size=len(self._cache), invalid=self._invalid)

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
