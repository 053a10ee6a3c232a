"""Live events of running jobs: the driver thread publishes, Server-Sent-Event streams subscribe.

Why a hub of its own: the tree is mutated on the driver thread, so a stream must never walk it. Instead the
driver turns each new node into a small JSON dict once (``node_event``) and the hub keeps, per running job, the
list of node events so far. A late subscriber atomically gets that list plus a queue of what follows, so it
sees every node exactly once, root first. Delivery crosses threads with ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EventType", "Event", "EventHub", "Subscription", "node_event", "node_events_from_tree_dict"]


class EventType(str, enum.Enum):
    """The SSE ``event:`` names of the API."""

    NODE = "node"
    ITERATION = "iteration"
    STATUS = "status"
    DONE = "done"


@dataclass(frozen=True)
class Event:
    type: EventType
    data: Mapping[str, Any]


def node_event(node: Any) -> dict[str, Any]:
    """The ``node`` event of a search node (values as of the step that made it)."""
    return {
        "tag": node.tag,
        "parent": node.parent.tag if node.parent is not None else None,
        "depth": node.depth,
        "status": node.status.value,
        "terminal": node.terminal.value if node.terminal is not None else None,
        "value": node.value,
        "visits": node.visit_count,
        "answer": node.final_answer,
        "thought": node.thought,
        "code": node.code,
        "observation": node.observation,
    }


# The keys of a node event, in order; a stored node record (``search.tree_io.tree_to_dict`` layout) holds the
# same values, three of them under other names.
_NODE_EVENT_KEYS = (
    "tag", "parent", "depth", "status", "terminal", "value", "visits", "answer", "thought", "code", "observation",
)
_RECORD_NAMES = {"terminal": "terminal_reason", "visits": "visit_count", "answer": "final_answer"}


def node_events_from_tree_dict(tree: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Node events rebuilt from a stored tree (``search.tree_io.tree_to_dict`` layout), creation order."""
    return [
        {key: record.get(_RECORD_NAMES.get(key, key)) for key in _NODE_EVENT_KEYS}
        for record in (tree or {}).get("nodes", [])
    ]


@dataclass
class Subscription:
    """What a new stream gets: the node events so far, then ``queue`` (None when the job already ended, in which
    case ``done`` holds the final event)."""

    nodes: list[dict[str, Any]]
    queue: asyncio.Queue | None
    done: Event | None = None


@dataclass
class _Channel:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    subscribers: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = field(default_factory=list)
    done: Event | None = None


class EventHub:
    """Per-job event channels. ``keep_finished`` ended channels stay in memory for late streams; older ones
    are dropped (their streams are rebuilt from the database)."""

    def __init__(self, keep_finished: int = 64) -> None:
        self._lock = threading.Lock()
        self._channels: dict[str, _Channel] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._keep = keep_finished

    def open(self, job_id: str) -> None:
        """Start (or restart, after a re-queue) a job's channel with no nodes."""
        with self._lock:
            channel = self._channels.get(job_id)
            if channel is None:
                self._channels[job_id] = _Channel()
            else:
                channel.nodes, channel.done = [], None
            self._finished.pop(job_id, None)

    def publish(self, job_id: str, type_: EventType, data: Mapping[str, Any]) -> None:
        self.publish_many(job_id, [Event(type_, data)])

    def publish_many(self, job_id: str, events: Iterable[Event]) -> None:
        """Deliver events in order (node events are also kept for late subscribers); ``done`` ends the channel."""
        with self._lock:
            channel = self._channels.setdefault(job_id, _Channel())
            for event in events:
                if event.type is EventType.NODE:
                    channel.nodes.append(dict(event.data))
                for loop, queue in channel.subscribers:
                    with contextlib.suppress(RuntimeError):  # the stream's loop is closed: the client is gone
                        loop.call_soon_threadsafe(queue.put_nowait, event)
                if event.type is EventType.DONE:
                    channel.done = event
                    channel.subscribers = []
                    self._finished[job_id] = None
            while len(self._finished) > self._keep:
                old, _ = self._finished.popitem(last=False)
                self._channels.pop(old, None)

    def subscribe(self, job_id: str, loop: asyncio.AbstractEventLoop) -> Subscription | None:
        """The nodes so far and a queue of what follows; None when the hub has no channel for the job."""
        with self._lock:
            channel = self._channels.get(job_id)
            if channel is None:
                return None
            if channel.done is not None:
                return Subscription(list(channel.nodes), None, channel.done)
            queue: asyncio.Queue = asyncio.Queue()
            channel.subscribers.append((loop, queue))
            return Subscription(list(channel.nodes), queue)

    def unsubscribe(self, job_id: str, queue: asyncio.Queue) -> None:
        with self._lock:
            channel = self._channels.get(job_id)
            if channel is not None:
                channel.subscribers = [(s, q) for s, q in channel.subscribers if q is not queue]

    def drop(self, job_id: str) -> None:
        with self._lock:
            self._channels.pop(job_id, None)
            self._finished.pop(job_id, None)
