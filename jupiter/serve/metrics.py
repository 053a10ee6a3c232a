"""``GET /metrics``: the server's gauges and counters in the Prometheus text format (version 0.0.4).

Rates (nodes and tokens per second) are averaged over the last minute of driver steps, so a scrape every 15 s
sees a smooth number and an idle server reads 0.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["RateMeter", "MetricsSnapshot", "render_metrics", "cache_hit_rate"]


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


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if isinstance(value, float) else str(int(value))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _metric(name: str, kind: str, help_: str, samples: Iterable[tuple[str, float | None]]) -> list[str]:
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {_number(value)}" for labels, value in samples]
    return lines


def render_metrics(snapshot: MetricsSnapshot) -> str:
    """The exposition text (ends with a newline)."""
    s = snapshot
    lines: list[str] = []
    lines += _metric("jupiter_queue_length", "gauge", "Jobs waiting to start.", [("", s.queue_length)])
    lines += _metric("jupiter_running_trees", "gauge", "Search trees in progress.", [("", s.running_trees)])
    lines += _metric("jupiter_jobs_total", "gauge", "Jobs in the database by status.",
                     [(f'{{status="{_label(k)}"}}', v) for k, v in sorted(s.jobs_by_status.items())])
    lines += _metric("jupiter_nodes_per_second", "gauge", "Tree nodes added per second (last minute).",
                     [("", float(s.nodes_per_second))])
    lines += _metric("jupiter_tokens_per_second", "gauge", "Model tokens per second (last minute).",
                     [("", float(s.tokens_per_second))])
    lines += _metric("jupiter_prefix_cache_hit_rate", "gauge",
                     "Share of prompt tokens served from the model's prefix cache (NaN when unknown).",
                     [("", float("nan") if s.prefix_cache_hit_rate is None else float(s.prefix_cache_hit_rate))])
    lines += _metric("jupiter_sandbox_states", "gauge", "Live notebook states over all sandboxes.",
                     [("", s.sandbox_states)])
    lines += _metric("jupiter_failures_total", "counter", "Failures since start, by type.",
                     [(f'{{type="{_label(k)}"}}', v) for k, v in sorted(s.failures_by_type.items())])
    return "\n".join(lines) + "\n"


def cache_hit_rate(policy: Any) -> float | None:
    """The policy's prefix-cache hit rate (``PolicyStats.prefix_cache_hit_rate``); None when it has none or
    cannot answer (a remote policy that is gone)."""
    try:
        rate = policy.stats().prefix_cache_hit_rate
    except Exception:
        return None
    return None if rate is None or not math.isfinite(float(rate)) else float(rate)
