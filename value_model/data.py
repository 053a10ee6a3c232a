"""Turning samples into batches: encoding through the shared truncation, length grouping, dynamic padding.

Paths vary from a few hundred to thousands of tokens. Padding every batch to the longest path in the data
would spend most of the compute on padding, so batches are cut from length-sorted runs (training shuffles
within large chunks first, so batches still vary from epoch to epoch) and padded only to their own longest
path. Padding is on the right and masked out of the mean pooling, so a path's value does not depend on
what it was batched with.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from jupiter.prompts import render_prompt
from value_model.config import ModelConfig
from value_model.extract import Sample
from value_model.truncate import prepare_path

__all__ = ["EncodedSample", "encode_samples", "length_grouped_batches", "sorted_batches", "collate", "common_prefix"]

#: Training shuffles, then sorts by length inside chunks of this many batches.
_GROUP_CHUNK_BATCHES = 50


@dataclass(frozen=True)
class EncodedSample:
    input_ids: tuple[int, ...]
    value: float
    truncated: bool = False  # ``prepare_path`` cut the path to fit the budget: it no longer extends its ancestors


def encode_samples(samples: Sequence[Sample], tokenizer: Any, config: ModelConfig) -> list[EncodedSample]:
    """Encode each sample's messages with ``prepare_path`` (the same truncation the scorer uses).

    A path is truncated exactly when the text ``prepare_path`` rendered differs from the whole path's (it leaves
    a path that fits untouched, and cuts tokens only after cutting text)."""
    template = config.template.template()
    out = []
    for sample in samples:
        prepared = prepare_path(sample.messages, tokenizer, config.max_tokens, template)
        truncated = prepared.text != render_prompt(sample.messages, template)
        out.append(EncodedSample(prepared.input_ids, sample.value, truncated))
    return out


def sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (deterministic: used for scoring)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def length_grouped_batches(lengths: Sequence[int], batch_size: int, rng: random.Random | None,
                           group: bool = True) -> list[list[int]]:
    """Training batches: shuffled (when ``rng``), then sorted by length inside chunks, then batch order shuffled.

    ``group=False`` gives plain shuffled batches (for comparison benchmarks).
    """
    order = list(range(len(lengths)))
    if rng is not None:
        rng.shuffle(order)
    if group:
        chunk = batch_size * _GROUP_CHUNK_BATCHES
        grouped = []
        for start in range(0, len(order), chunk):
            grouped.extend(sorted(order[start:start + chunk], key=lambda i: -lengths[i]))
        order = grouped
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if rng is not None:
        rng.shuffle(batches)
    return batches


def collate(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence of this batch → (input_ids [B, T], attention_mask [B, T])."""
    rows = [torch.tensor(sequence, dtype=torch.long) for sequence in sequences]
    return (pad_sequence(rows, batch_first=True, padding_value=pad_id),  # pad_sequence pads on the right
            pad_sequence([torch.ones_like(row) for row in rows], batch_first=True))


def shared_prefix_groups(sequences: Sequence[Sequence[int]], max_group: int, min_shared: int
                         ) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """Split sequences into groups that start with the same tokens, for ``ValueModel.forward_suffixes``.

    Returns (groups, rest): each group is (prefix length, indices) with at least 2 and at most ``max_group``
    members sharing their first ``prefix length`` (>= ``min_shared``) tokens, every member at least one token
    longer than that; ``rest`` are the indices best run whole. Sorting the sequences puts the ones with long
    common prefixes side by side (siblings share their parent's path, nodes of one task the system and task
    turns, every path the system turn); the groups are the runs of that order that need the fewest tokens in
    all (a group runs its prefix once and each member's rest), found exactly by dynamic programming. So the
    children of two nodes stay two groups with their parents' paths, not one cut down to the system turn.
    """
    order = sorted(range(len(sequences)), key=lambda i: list(sequences[i]))
    lengths = [len(sequences[i]) for i in order]
    common = [common_prefix(sequences[a], sequences[b]) for a, b in zip(order, order[1:])]
    best = [0] * (len(order) + 1)  # best[i]: fewest tokens for the first i sequences of ``order``
    split: list[tuple[int, int]] = [(0, 0)] * (len(order) + 1)  # (start of the last run, its shared prefix)
    for end in range(1, len(order) + 1):
        best[end], split[end] = best[end - 1] + lengths[end - 1], (end - 1, 0)
        shared = lengths[end - 1] - 1
        for begin in range(end - 2, max(-1, end - 1 - max_group), -1):
            shared = min(shared, common[begin], lengths[begin] - 1)
            if shared < min_shared:
                break
            cost = best[begin] + sum(lengths[begin:end]) - (end - begin - 1) * shared
            if cost < best[end]:
                best[end], split[end] = cost, (begin, shared)
    groups: list[tuple[int, list[int]]] = []
    rest: list[int] = []
    end = len(order)
    while end > 0:
        begin, shared = split[end]
        if end - begin >= 2:
            groups.append((shared, order[begin:end]))
        else:
            rest.append(order[begin])
        end = begin
    return groups[::-1], rest[::-1]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens two sequences share from their start."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
