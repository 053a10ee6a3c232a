"""Training batches for ``Trainer``: packs of one tree's paths, and per-path batches for the rest.

Why packs: a node's path is its parent's path plus one turn, so per-path training recomputes the shared
beginnings once per descendant. ``plan_batches`` groups the samples of one tree (the file in their ``sources``)
into packs whose trie (``value_model.packing``) fits ``TrainConfig.pack_tokens``, splitting a large tree into
several; a pack is one batch and its loss the MSE over its samples. Samples that cannot share go per path,
length-grouped into batches of ``batch_size`` as before: those without a tree, those ``prepare_path`` cut to the
token budget (they no longer begin with their ancestors' tokens), and those left alone in a pack.

Why the items of ``TrainingBatches`` are whole batches: ``Trainer`` then runs with one item per device batch
(``per_device_train_batch_size=1``) and a sequential sampler, and the dataset decides each epoch's batches
itself in ``set_epoch`` (seeded by the epoch, which accelerate's data loader passes on every epoch and again
after a resume skipped into one), so a run and its resume see the same batches in the same order.
``collate`` turns an item into tensors: ``input_ids``/``attention_mask`` for a per-path batch, a ``PackedTree``
under ``packed`` for a pack, and the targets under ``labels`` in both.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from value_model.data import EncodedSample, common_prefix, length_grouped_batches, sorted_batches
from value_model.data import collate as pad_batch
from value_model.extract import Sample
from value_model.packing import pack_sequences

__all__ = ["BatchPlan", "tree_of", "plan_batches", "TrainingBatches", "EvalBatches", "collate"]


@dataclass(frozen=True)
class BatchPlan:
    """Which samples train as packs (each a tuple of sample indices, trie order) and which per path."""

    packs: tuple[tuple[int, ...], ...]
    per_path: tuple[int, ...]

    @property
    def packed_samples(self) -> int:
        return sum(len(p) for p in self.packs)


def tree_of(sample: Sample) -> str | None:
    """The tree a sample came from: the file (and line, for JSONL) of its first source ``"file#tag"``."""
    if not sample.sources:
        return None
    return str(sample.sources[0]).rsplit("#", 1)[0]


def plan_batches(encoded: Sequence[EncodedSample], trees: Sequence[str | None], budget: int,
                 packing: bool = True) -> BatchPlan:
    """Packs of at most ``budget`` packed tokens per tree, and the samples that go per path.

    Within a tree the paths are taken in token order, so that each one shares the longest beginning with the one
    before (in sorted order, the longest common prefix with any earlier sequence is the one with its
    predecessor): the pack's trie grows by the path's length minus that prefix, and a path that would take the
    trie past ``budget`` starts the next pack. A pack of one path gains nothing and goes per path.
    """
    if not packing:
        return BatchPlan((), tuple(range(len(encoded))))
    per_path: list[int] = []
    groups: dict[str, list[int]] = {}
    for index, (sample, tree) in enumerate(zip(encoded, trees)):
        if tree is None or sample.truncated or len(sample.input_ids) > budget:
            per_path.append(index)
        else:
            groups.setdefault(tree, []).append(index)
    packs: list[tuple[int, ...]] = []
    for members in groups.values():
        members = sorted(members, key=lambda i: (encoded[i].input_ids, i))
        current: list[int] = []
        size = 0
        for index in members:
            ids = encoded[index].input_ids
            grow = len(ids) - (common_prefix(encoded[current[-1]].input_ids, ids) if current else 0)
            if current and size + grow > budget:
                packs.append(tuple(current))
                current, size, grow = [], 0, len(ids)
            current.append(index)
            size += grow
        packs.append(tuple(current))
    per_path += [p[0] for p in packs if len(p) == 1]
    return BatchPlan(tuple(p for p in packs if len(p) > 1), tuple(sorted(per_path)))


class TrainingBatches(torch.utils.data.Dataset):
    """One epoch's batches, one per item: ``{"pack": bool, "input_ids": [...], "values": [...]}``.

    ``set_epoch(e)`` picks epoch ``e``'s batches: the per-path samples length-grouped anew
    (``length_grouped_batches`` seeded with ``"{seed}:epoch:{e}"``, as the training loop before ``Trainer`` did),
    the packs fixed, all of them in an order shuffled by the same seed. The number of batches is the same in
    every epoch, as ``Trainer`` needs.
    """

    def __init__(self, encoded: Sequence[EncodedSample], plan: BatchPlan, batch_size: int, seed: int,
                 length_grouping: bool = True) -> None:
        self.encoded = list(encoded)
        self.plan = plan
        self.batch_size = batch_size
        self.seed = seed
        self.length_grouping = length_grouping
        self.epochs_seen: list[int] = []  # every epoch set (tests check that the data loader sets it)
        self._batches = self.epoch_batches(0)

    def set_epoch(self, epoch: int) -> None:
        self.epochs_seen.append(int(epoch))
        self._batches = self.epoch_batches(int(epoch))

    def epoch_batches(self, epoch: int) -> list[tuple[bool, tuple[int, ...]]]:
        """(is a pack, sample indices) of each batch of ``epoch``, in training order."""
        rng = random.Random(f"{self.seed}:epoch:{epoch}")
        rest = self.plan.per_path
        grouped = length_grouped_batches([len(self.encoded[i].input_ids) for i in rest], self.batch_size, rng,
                                         group=self.length_grouping)
        batches = [(False, tuple(rest[i] for i in batch)) for batch in grouped]
        if self.plan.packs:  # without packs, the order is length_grouped_batches' own
            batches += [(True, pack) for pack in self.plan.packs]
            rng.shuffle(batches)
        return batches

    def __len__(self) -> int:
        return len(self._batches)

    def __getitem__(self, index: int) -> dict[str, Any]:
        packed, members = self._batches[index]
        return {"pack": packed, "input_ids": [self.encoded[i].input_ids for i in members],
                "values": [self.encoded[i].value for i in members]}


class EvalBatches(torch.utils.data.Dataset):
    """Held-out samples in per-path batches of similar length (longest first), in a fixed order."""

    def __init__(self, encoded: Sequence[EncodedSample], batch_size: int) -> None:
        self.encoded = list(encoded)
        self._batches = sorted_batches([len(e.input_ids) for e in self.encoded], batch_size)

    def __len__(self) -> int:
        return len(self._batches)

    def __getitem__(self, index: int) -> dict[str, Any]:
        members = self._batches[index]
        return {"pack": False, "input_ids": [self.encoded[i].input_ids for i in members],
                "values": [self.encoded[i].value for i in members]}


class Collator:
    """``Trainer``'s data collator: a list of one item (a whole batch) → the model's inputs and ``labels``."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if len(items) != 1:
            raise ValueError(f"value training: expected one batch per item, got {len(items)} items "
                             "(per_device_train_batch_size must be 1)")
        item = items[0]
        labels = torch.tensor(item["values"], dtype=torch.float32)
        if item["pack"]:
            return {"packed": pack_sequences(item["input_ids"]), "labels": labels}
        input_ids, attention_mask = pad_batch(item["input_ids"], self.pad_id)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def collate(pad_id: int) -> Collator:
    return Collator(pad_id)
