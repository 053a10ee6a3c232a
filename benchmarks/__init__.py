"""Benchmark runners and scorers: InfiAgent-DABench, AIME 2025, DSBench data modeling (see docs/benchmarks.md).

Modules (imported on demand, so that ``import benchmarks`` stays light):

- ``benchmarks.metrics`` — the DSBench metric registry, each metric with its direction;
- ``benchmarks.dsbench`` — task specs from ``tasks.json``, submission scoring, RPG, task simplification;
- ``benchmarks.dabench`` / ``benchmarks.aime`` — loaders, per-answer correctness, summaries;
- ``benchmarks.records`` — the resumable ``results.jsonl``; ``benchmarks.curves`` — accuracy vs iterations;
- ``benchmarks.runner`` / ``benchmarks.runs`` — the run loop and the three runs; ``benchmarks.report`` — reports;
- ``benchmarks.perf`` — speed and memory benchmark scripts printing JSON.
"""

__all__ = ["metrics", "dsbench", "dabench", "aime", "records", "curves", "runner", "runs", "report", "paths"]
