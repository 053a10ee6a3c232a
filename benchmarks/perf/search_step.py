"""Profile of real search steps: where a node's time goes with the default model, the paper profile and many
trees in flight.

Usage: ``python benchmarks/perf/search_step.py --json [--trees 20] [--iterations 3] [--llm SPEC]
[--value-model DIR] [--data DIR]``

Runs ``search.solve_many`` on the first ``--trees`` DABench dev questions (all in flight at once), in infer mode
with the paper profile (K 3, T 0.7, top-p 0.95), on the in-process vLLM engine with its per-request timings on
(``#log_stats=1``). Prints one JSON object:

- ``per_node_ms``: wall milliseconds per new node, split into
  - ``prefill``: policy-call time until every request of the call had its first token (vLLM's
    ``RequestOutput.metrics.first_token_ts``; decoding of requests prefilled earlier overlaps it);
  - ``decode``: the rest of each policy call, less ``sampling``;
  - ``sampling``: our top-p filter's own time inside the engine (``jupiter.llm.vllm_nucleus``);
  - ``sandbox``: the union over threads of the intervals in which cells branched, ran and were released;
  - ``sandbox_start``: the same for starting the trees' sandboxes and their root states (once per tree);
  - ``value``: the value model's calls (0 without ``--value-model``);
  - ``engine``: the rest of each driver step (selection, parsing, back-up, bookkeeping, releases);
- ``prefix_cache_hit_rate``: prompt tokens served from vLLM's prefix cache over prompt tokens, counted once per
  history (reuse across turns and nodes; ``PolicyStats``), and ``sibling_cache_hit_rate``;
- ``engine_settings``: ``max_num_seqs`` and the KV-cache ``block_size`` the engine ran with, and
  ``sequences_per_call`` (the largest call: histories × K).

``--llm`` takes any ``vllm:`` spec (``#log_stats=1`` is added): e.g. ``vllm:default#max_num_seqs=64`` or
``#block_size=64`` to measure a setting against the default.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

from benchmarks.dabench import load_dabench
from benchmarks.paths import default_data_dir
from jupiter.llm import load_policy
from search import SearchConfig, solve_many
from search.loaders import load_value, sandbox_config, sandbox_factory


class _Intervals:
    """Wall-clock intervals from several threads; ``union(since)`` is their covered length after ``since``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[tuple[float, float]] = []

    def add(self, start: float, end: float) -> None:
        with self._lock:
            self._spans.append((start, end))

    def union(self, since: float, until: float) -> float:
        with self._lock:
            spans = sorted((max(a, since), min(b, until)) for a, b in self._spans if b > since and a < until)
        total, reach = 0.0, since
        for a, b in spans:
            if b > reach:
                total += b - max(a, reach)
                reach = b
        return total


class _TimedState:
    """A sandbox state whose ``branch`` and ``run`` are timed; everything else goes to the state itself."""

    def __init__(self, inner: Any, spans: _Intervals) -> None:
        self._inner, self._spans = inner, spans

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def branch(self) -> _TimedState:
        start = time.perf_counter()
        try:
            return _TimedState(self._inner.branch(), self._spans)
        finally:
            self._spans.add(start, time.perf_counter())

    def run(self, code: str, timeout: float | None = None) -> Any:
        start = time.perf_counter()
        try:
            return self._inner.run(code, timeout=timeout)
        finally:
            self._spans.add(start, time.perf_counter())

    def restore(self, cells: Any) -> _TimedState:
        return _TimedState(self._inner.restore(cells), self._spans)

    def close(self) -> None:  # the driver releases a state once its children branched
        start = time.perf_counter()
        try:
            self._inner.close()
        finally:
            self._spans.add(start, time.perf_counter())


class _TimedSandbox:
    """A sandbox whose start (``open_root``, with the sandbox's own start before it) counts apart."""

    def __init__(self, factory: Any, spans: _Intervals, starts: _Intervals) -> None:
        start = time.perf_counter()
        self._inner = factory()
        starts.add(start, time.perf_counter())
        self._spans, self._starts = spans, starts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def open_root(self, input_files: Any = ()) -> _TimedState:
        start = time.perf_counter()
        try:
            return _TimedState(self._inner.open_root(input_files=input_files), self._spans)
        finally:
            self._starts.add(start, time.perf_counter())


class _TimedPolicy:
    """The policy, with each ``generate`` split into prefill and decode by the engine's request timings."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[dict[str, float]] = []
        self._outputs: list[Any] = []
        generate = inner.llm.generate

        def keep(*args: Any, **kwargs: Any) -> Any:  # the engine's RequestOutputs of the call, for their metrics
            outputs = generate(*args, **kwargs)
            self._outputs = list(outputs)
            return outputs

        inner.llm.generate = keep

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def generate(self, histories: Any, params: Any) -> Any:
        filtered = _filter_seconds(self._inner)
        start_wall, start_mono = time.perf_counter(), time.monotonic()
        out = self._inner.generate(histories, params)
        seconds = time.perf_counter() - start_wall
        firsts = [o.metrics.first_token_ts for o in self._outputs if getattr(o, "metrics", None) is not None]
        prefill = min(seconds, max(0.0, max(firsts) - start_mono)) if firsts else 0.0
        sampling = max(0.0, (_filter_seconds(self._inner) or 0.0) - (filtered or 0.0))
        self.calls.append({"seconds": seconds, "prefill": prefill, "sampling": sampling,
                           "sequences": len(self._outputs), "end": time.perf_counter()})
        return out


class _TimedValue:
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def evaluate(self, histories: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._inner.evaluate(histories)
        finally:
            self.seconds += time.perf_counter() - start


def _filter_seconds(policy: Any) -> float | None:
    if getattr(policy, "nucleus", None) != "window":
        return None
    from jupiter.llm.vllm_nucleus import filter_seconds

    return filter_seconds(policy.llm)


def _engine_settings(policy: Any) -> dict[str, Any]:
    config = policy.llm.llm_engine.vllm_config
    return {"max_num_seqs": config.scheduler_config.max_num_seqs, "block_size": config.cache_config.block_size,
            "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens}


def profile(trees: int, iterations: int, llm: str, value_model: str | None, data: Path | None, seed: int) -> dict:
    tasks = list(load_dabench(data or default_data_dir("dabench"), limit=trees).tasks)
    spec = llm + ("&" if "#" in llm else "#") + "log_stats=1"
    config = SearchConfig(iterations=iterations, max_trees_in_flight=trees)  # the paper profile, infer mode
    spans, starts = _Intervals(), _Intervals()
    started = time.perf_counter()
    policy = _TimedPolicy(load_policy(spec))
    load_s = time.perf_counter() - started
    value = _TimedValue(load_value(value_model)) if value_model else None
    factory = sandbox_factory(sandbox_config(config))
    steps: list[float] = []
    before = policy.stats()
    started = time.perf_counter()
    try:
        results = list(solve_many(tasks, policy, lambda: _TimedSandbox(factory, spans, starts), config, value,
                                  seed=seed, on_step=lambda _step: steps.append(time.perf_counter())))
    finally:
        wall = time.perf_counter() - started
        after = policy.stats()
        settings = _engine_settings(policy)
        policy.close()
    nodes = sum(r.stats.nodes for r in results)
    calls = policy.calls
    generate = sum(c["seconds"] for c in calls)
    prefill = sum(c["prefill"] for c in calls)
    sampling = sum(c["sampling"] for c in calls)
    sandbox = spans.union(started, started + wall)
    sandbox_start = starts.union(started, started + wall)
    value_s = value.seconds if value is not None else 0.0
    parts = {"prefill": prefill, "decode": generate - prefill - sampling, "sampling": sampling,
             "sandbox": sandbox, "sandbox_start": sandbox_start, "value": value_s,
             "engine": max(0.0, wall - generate - sandbox - sandbox_start - value_s)}
    prompt = after.prompt_tokens - before.prompt_tokens
    cached = (after.cached_prompt_tokens or 0) - (before.cached_prompt_tokens or 0)
    sent = after.sent_prompt_tokens - before.sent_prompt_tokens
    sibling = (after.sibling_cached_prompt_tokens or 0) - (before.sibling_cached_prompt_tokens or 0)
    return {
        "benchmark": "search_step",
        "llm": spec,
        "trees": trees,
        "iterations": iterations,
        "profile": "paper (infer, K 3, T 0.7, top-p 0.95)",
        "load_s": round(load_s, 1),
        "wall_s": round(wall, 1),
        "steps": len(steps),
        "policy_calls": len(calls),
        "nodes": nodes,
        "ms_per_node": round(1000 * wall / nodes, 1) if nodes else None,
        "per_node_ms": {k: round(1000 * v / nodes, 1) if nodes else None for k, v in parts.items()},
        "shares": {k: round(v / wall, 3) if wall else None for k, v in parts.items()},
        "completion_tokens": after.completion_tokens - before.completion_tokens,
        "tokens_per_s": round((after.completion_tokens - before.completion_tokens) / generate, 1) if generate else None,
        "prompt_tokens": prompt,
        "prefix_cache_hit_rate": round(cached / prompt, 3) if prompt else None,
        "sibling_cache_hit_rate": round(sibling / (sent - prompt), 3) if sent > prompt else None,
        "engine_settings": {**settings, "sequences_per_call": max((c["sequences"] for c in calls), default=0)},
        "answered": sum(1 for r in results if r.answer is not None),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output mode)")
    parser.add_argument("--trees", type=int, default=20, help="trees in flight (the bench's 20)")
    parser.add_argument("--iterations", type=int, default=3, help="iterations per tree")
    parser.add_argument("--llm", default="vllm:default", help="a vllm: policy spec")
    parser.add_argument("--value-model", default=None, help="a value-model folder, to time its calls too")
    parser.add_argument("--data", type=Path, default=None, help="the DABench folder (default: the shared data)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.llm.startswith("vllm:"):
        parser.error(f"--llm {args.llm!r}: the profile reads vLLM's request timings; give a vllm: spec")
    if args.trees < 1 or args.iterations < 1:
        parser.error("--trees and --iterations must be >= 1")
    with contextlib.redirect_stdout(sys.stderr):
        result = profile(args.trees, args.iterations, args.llm, args.value_model, args.data, args.seed)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
