"""``GET /metrics``: the server's gauges and counters in the Prometheus text format, written by ``prometheus_client``.

Rates (nodes and tokens per second) are averaged over the last minute of driver steps, so a scrape every 15 s
sees a smooth number and an idle server reads 0.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RateMeter", "MetricsSnapshot", "render_metrics", "content_type", "cache_hit_rate"]


class RateMeter:
    """Counts of nodes and tokens over a sliding window (seconds); ``rates()`` → per-second averages."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._started = time.monotonic()
        self._samples: collections.deque[tuple[float, int, int]] = collections.deque()
        self._lock = threading.Lock()

    def add(self, nodes: int, tokens: int) -> None:
        with self._lock:
            self._samples.append((time.monotonic(), int(nodes), max(0, int(tokens))))

    def rates(self) -> tuple[float, float]:
        now = time.monotonic()
        with self._lock:
            while self._samples and now - self._samples[0][0] > self.window_s:
                self._samples.popleft()
            nodes = sum(s[1] for s in self._samples)
            tokens = sum(s[2] for s in self._samples)
        span = max(1e-6, min(self.window_s, now - self._started))
        return nodes / span, tokens / span


@dataclass(frozen=True)
class MetricsSnapshot:
    """What one scrape reports (gathered by the app from the store, the scheduler and the policy)."""

    queue_length: int
    running_trees: int
    jobs_by_status: Mapping[str, int]
    nodes_per_second: float
    tokens_per_second: float
    prefix_cache_hit_rate: float | None
    sandbox_states: int
    failures_by_type: Mapping[str, int]


def _families(snapshot: MetricsSnapshot) -> list[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    s = snapshot

    def gauge(name: str, help_: str, value: float) -> Any:
        return GaugeMetricFamily(name, help_, value=value)

    jobs = GaugeMetricFamily("jupiter_jobs_total", "Jobs in the database by status.", labels=["status"])
    for status, count in sorted(s.jobs_by_status.items()):
        jobs.add_metric([status], count)
    failures = CounterMetricFamily("jupiter_failures", "Failures since start, by type.", labels=["type"])
    for kind, count in sorted(s.failures_by_type.items()):
        failures.add_metric([kind], count)  # exposed as jupiter_failures_total{type=...}
    hit_rate = float("nan") if s.prefix_cache_hit_rate is None else float(s.prefix_cache_hit_rate)
    return [
        gauge("jupiter_queue_length", "Jobs waiting to start.", s.queue_length),
        gauge("jupiter_running_trees", "Search trees in progress.", s.running_trees),
        jobs,
        gauge("jupiter_nodes_per_second", "Tree nodes added per second (last minute).", float(s.nodes_per_second)),
        gauge("jupiter_tokens_per_second", "Model tokens per second (last minute).", float(s.tokens_per_second)),
        gauge("jupiter_prefix_cache_hit_rate",
              "Share of prompt tokens served from the model's prefix cache (NaN when unknown).", hit_rate),
        gauge("jupiter_sandbox_states", "Live notebook states over all sandboxes.", s.sandbox_states),
        failures,
    ]


class _SnapshotCollector:
    """A ``prometheus_client`` custom collector over one snapshot (the documented way to expose values that live
    elsewhere: the store, the scheduler, the policy)."""

    def __init__(self, snapshot: MetricsSnapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterable[Any]:
        return _families(self.snapshot)


def render_metrics(snapshot: MetricsSnapshot) -> str:
    """The exposition text (Prometheus text format 0.0.4, by ``prometheus_client``; ends with a newline)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snapshot))
    return generate_latest(registry).decode("utf-8")


def content_type() -> str:
    """The response's content type: the text format ``generate_latest`` writes (0.0.4)."""
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

    return CONTENT_TYPE_PLAIN_0_0_4


def cache_hit_rate(policy: Any) -> float | None:
    """The policy's prefix-cache hit rate (``PolicyStats.prefix_cache_hit_rate``); None when it has none or
    cannot answer (a remote policy that is gone)."""
    try:
        rate = policy.stats().prefix_cache_hit_rate
    except Exception:
        return None
    return None if rate is None or not math.isfinite(float(rate)) else float(rate)
