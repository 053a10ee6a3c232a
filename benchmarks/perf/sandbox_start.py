"""Benchmark: what starting a sandbox costs the host that starts it, and how long it stalls the host's other threads.

A service (``jupiter serve``) starts one sandbox per tree from a process that also answers HTTP requests. The host
here is grown first (``--heap-mb`` of Python objects; the server with the replay policy is about 80 MB resident,
one with a local model in-process several GB, and a fork's cost grows with it), then starts ``--sandboxes`` sandboxes
one after the other, while a ticker thread asks for the GIL every millisecond, as an event loop between requests does.
Reported:

- ``spawn_ms``: wall time of the call that starts the runtime process (``subprocess.Popen``), median and max;
- ``host_cpu_ms_per_start``: the host's CPU per sandbox start (its threads but the ticker; not the sandbox's);
- ``ticker_stall_ms``: how late the ticker's 1 ms sleeps woke, p99 and max, during the starts;
- ``start_s``: a sandbox's whole start (runtime up, self-check passed), median.

Usage: ``python benchmarks/perf/sandbox_start.py --json`` prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sandbox import Sandbox, SandboxConfig  # noqa: E402


def grow_heap(megabytes: int) -> list[object]:
    """About ``megabytes`` of small Python objects (dicts and strings, as a server's modules and caches are)."""
    return [{"key": str(i) * 8, "value": [i, i + 1]} for i in range(megabytes * 3000)]


class Ticker(threading.Thread):
    """Sleeps 1 ms in a loop and records how late each wake-up was: a stand-in for an event loop's turns."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.late_ms: list[float] = []
        self.cpu_s = 0.0  # its own CPU, which the host's CPU per start leaves out
        self._done = threading.Event()

    def run(self) -> None:
        cpu = time.thread_time()
        while not self._done.is_set():
            started = time.perf_counter()
            time.sleep(0.001)
            self.late_ms.append((time.perf_counter() - started) * 1000 - 1.0)
        self.cpu_s = time.thread_time() - cpu

    def stop(self) -> list[float]:
        self._done.set()
        self.join()
        return self.late_ms


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _percentile(values: list[float], q: float) -> float:
    """The nearest observed value at quantile ``q`` (numpy's ``nearest`` method: no interpolation)."""
    import numpy as np

    return round(float(np.percentile(values, q * 100, method="nearest")), 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only mode)")
    parser.add_argument("--sandboxes", type=int, default=12, help="sandboxes to start, one after another")
    parser.add_argument("--heap-mb", type=int, default=80, help="grow the host by about this much first")
    args = parser.parse_args(argv)

    heap = grow_heap(args.heap_mb)
    spawn_ms: list[float] = []
    original = subprocess.Popen

    class TimedPopen(original):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **k):  # the call being timed
            started = time.perf_counter()
            super().__init__(*a, **k)
            spawn_ms.append((time.perf_counter() - started) * 1000)

    config = SandboxConfig(preload_modules=(), nice=10)
    starts: list[float] = []
    subprocess.Popen = TimedPopen  # type: ignore[misc]
    ticker = Ticker()
    ticker.start()
    cpu_before = time.process_time()
    try:
        for _ in range(args.sandboxes):
            started = time.perf_counter()
            with Sandbox(config) as box:
                box.open_root()
                starts.append(time.perf_counter() - started)
    finally:
        subprocess.Popen = original  # type: ignore[misc]
        late = ticker.stop()
    cpu = time.process_time() - cpu_before - ticker.cpu_s
    result = {
        "sandboxes": args.sandboxes, "heap_mb": args.heap_mb, "host_objects": len(heap),
        "host_rss_mb": round(_rss_bytes() / 2**20, 1),
        "spawn_ms": {"median": round(statistics.median(spawn_ms), 2), "max": round(max(spawn_ms), 2)},
        "host_cpu_ms_per_start": round(cpu * 1000 / args.sandboxes, 2),
        "ticker_stall_ms": {"p99": _percentile(late, 0.99), "max": round(max(late), 2), "n": len(late)},
        "start_s": round(statistics.median(starts), 3),
    }
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
