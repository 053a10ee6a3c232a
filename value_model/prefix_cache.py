"""Encoded path beginnings kept from one scoring call to the next.

The search asks for values one expansion at a time: the K children of a node share their parent's whole path,
and the next expansion below one of them shares that path again, plus one turn. ``ValueModel.encode_prefix``
turns a group's common beginning into keys, values and a hidden-state sum; kept here, the next call continues
from the longest beginning it finds instead of running the path from its first token (on the value calls of the
seed-1 value-model run of docs/benchmarks.md, 39 % fewer tokens than sharing within a call alone; docs/value_model.md).

Entries are dropped least recently used first once their keys and values pass ``budget_bytes`` (0 turns the
cache off). A token's keys and values take 2 · layers · kv_heads · head_dim numbers: 36 KB in fp32 on Gemma 3
270M up to its 512-token sliding window and 6 KB past it (a 1,500-token path: 24 MB), about 57 KB in bf16 on a
7B Qwen. The default 1 GiB holds the latest paths of 20 trees in flight on the embedded model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from value_model.model import PrefixState

__all__ = ["PrefixCache", "DEFAULT_PREFIX_CACHE_MB"]

#: Memory for kept beginnings, in MiB.
DEFAULT_PREFIX_CACHE_MB = 1024


class PrefixCache:
    """Least-recently-used map from token beginnings to their ``PrefixState``, bounded in bytes. Not
    thread-safe: its owner (``ValueScorer``) serialises calls."""

    def __init__(self, budget_bytes: int = DEFAULT_PREFIX_CACHE_MB * 2**20) -> None:
        if budget_bytes < 0:
            raise ValueError(f"PrefixCache.budget_bytes: must be >= 0, got {budget_bytes!r}")
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple[int, ...], PrefixState] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def longest(self, sequence: Sequence[int], limit: int) -> PrefixState | None:
        """The kept state of the longest beginning of ``sequence`` with at most ``limit`` tokens, or None."""
        best: tuple[int, ...] | None = None
        for key in self._entries:
            if len(key) <= limit and (best is None or len(key) > len(best)) and tuple(sequence[:len(key)]) == key:
                best = key
        if best is None:
            return None
        self._entries.move_to_end(best)
        return self._entries[best]

    def add(self, tokens: Sequence[int], state: PrefixState) -> None:
        """Keep ``state`` for ``tokens`` (its beginning), dropping the least recently used past the budget."""
        key = tuple(tokens)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        if not key or state.nbytes > self.budget_bytes:
            return
        self._entries[key] = state
        self._bytes += state.nbytes
        while self._bytes > self.budget_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.nbytes

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
