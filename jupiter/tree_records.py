"""The turn chain of lean tree files: each node stores only its own ``turn``, its full messages are those of the
node its ``extends`` names plus that turn (``search.tree_io`` writes and reads such files).

Why here, below both: ``search.tree_io`` loads them and ``value_model.extract`` reads them for training without
importing the search package (``.importlinter``), and the two must rebuild the same messages and fail the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jupiter.prompts import Message

__all__ = ["chain_messages"]


def chain_messages(records: Sequence[dict[str, Any]], where: str,
                   error: type[Exception]) -> dict[str, list[Message]]:
    """``{tag: messages}`` of every node of a lean record list: ``messages(extends) + turn``; the root (no
    ``extends``) has its ``turn`` as messages.

    Raises ``error`` (the caller's own error type) naming the node when its ``turn`` is not a list, its
    ``extends`` is not in the file or makes a cycle. A loop rather than recursion: a chain is as deep as the tree.
    """
    by_tag = {str(r.get("tag")): r for r in records}
    done: dict[str, list[Message]] = {}
    for tag in by_tag:
        chain: list[str] = []
        current: str | None = tag
        while current is not None and current not in done:  # walk up to a node already rebuilt (or the root)
            if current in chain:
                raise error(f"{where}: node {chain[-1]!r}: 'extends' makes a cycle")
            record = by_tag.get(current)
            if record is None:
                raise error(f"{where}: node {chain[-1]!r} extends {current!r}, which is not in the file")
            if not isinstance(record.get("turn"), list):
                raise error(f"{where}: node {current!r} has no 'turn' list")
            chain.append(current)
            base = record.get("extends")
            current = str(base) if base is not None else None
        prefix = done[current] if current is not None else []
        for link in reversed(chain):
            prefix = done[link] = prefix + [dict(m) for m in by_tag[link]["turn"]]
    return done
