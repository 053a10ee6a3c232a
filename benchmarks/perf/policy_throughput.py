"""Policy throughput on the embedded tiny model: generated tokens per second, per local backend.

Usage: ``python benchmarks/perf/policy_throughput.py --json [--backends hf,vllm] [--dtypes float32,bfloat16]
[--prompts 4 --n 3 --max-tokens 64 --top-p 1.0]``

Prints one JSON object: for each backend the load time, the time of one timed ``generate`` call (after a
small warm-up call), the completion tokens it produced, tokens/s and milliseconds per decoding step (the call's
time over its longest completion), plus the prefix-cache hit rate where the backend reports it. ``--prompts
1,2,3`` times one call per count on the same loaded model (``calls`` in the JSON): what a step costs as the
batch grows, the figure behind ``--leaves-per-step`` (docs/search.md). A backend whose package is not
installed is reported as skipped, not as a failure.
``--dtypes`` measures each backend in each dtype (``backend#dtype`` keys); without it, the backends' default,
which is what this CPU computes natively (``cpu_dtype`` in the JSON; ``jupiter.llm.machine_dtype``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import platform
import sys
import time

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # keep the engine's log short (it goes to stderr)

from jupiter.llm import SamplingParams, load_policy  # noqa: E402
from jupiter.llm.machine_dtype import cpu_dtype  # noqa: E402
from jupiter.prompts import SYSTEM_PROMPT  # noqa: E402

QUESTIONS = (
    "Task: compute the mean of the column 'fare' in titanic.csv, rounded to 2 decimals.",
    "Task: how many rows of sales.csv have a negative 'amount'?",
    "Task: which 'region' in sales.csv has the highest total 'amount'?",
    "Task: report the Pearson correlation between 'age' and 'fare' in titanic.csv.",
    "Task: count the distinct values of 'city' in customers.csv.",
    "Task: fit a linear regression of 'price' on 'size' in houses.csv and report the slope.",
)

BACKENDS = {"hf": ("transformers", "hf:default"), "vllm": ("vllm", "vllm:default")}


def histories(count: int) -> list[list[dict]]:
    return [
        [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
        for i in range(count)
    ]


def measure(backend: str, prompts: list[int], n: int, max_tokens: int, dtype: str | None = None,
            top_p: float = 1.0) -> dict:
    package, spec = BACKENDS[backend]
    if importlib.util.find_spec(package) is None:
        return {"skipped": f"{package} is not installed"}
    if dtype:
        spec = f"{spec}#dtype={dtype}"
    start = time.perf_counter()
    policy = load_policy(spec)
    load_s = time.perf_counter() - start
    try:
        # warm-up with the timed calls' sampling (its first top-p/log-prob step costs seconds) and prompts
        policy.generate(histories(max(prompts)), SamplingParams(n=n, max_tokens=4, seed=1, top_p=top_p,
                                                                logprobs=True))
        calls = [_timed_call(policy, count, n, max_tokens, top_p) for count in prompts]
    finally:
        policy.close()
    result = {"spec": spec, "load_s": round(load_s, 2), **calls[0]}
    if len(calls) > 1:
        result["calls"] = calls
    return result


def _timed_call(policy, prompts: int, n: int, max_tokens: int, top_p: float) -> dict:
    """One timed ``generate`` of ``prompts`` histories × ``n`` completions."""
    before = policy.stats()
    params = SamplingParams(n=n, max_tokens=max_tokens, seed=0, stop=(), logprobs=True, top_p=top_p)
    start = time.perf_counter()
    outs = policy.generate(histories(prompts), params)
    seconds = time.perf_counter() - start
    after = policy.stats()
    tokens = sum(c.num_tokens for o in outs for c in o)
    longest = max(c.num_tokens for o in outs for c in o)
    prompt_tokens = after.prompt_tokens - before.prompt_tokens
    cached = None
    if after.cached_prompt_tokens is not None:
        cached = after.cached_prompt_tokens - (before.cached_prompt_tokens or 0)
    return {
        "sequences": prompts * n,
        "generate_s": round(seconds, 2),
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 2) if seconds > 0 else None,
        "ms_per_step": round(1000 * seconds / longest, 1) if longest else None,
        "prompt_tokens": prompt_tokens,
        "prefix_cache_hit_rate": round(cached / prompt_tokens, 3) if cached is not None and prompt_tokens else None,
        "finish_reasons": sorted({c.finish_reason for o in outs for c in o}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output mode)")
    parser.add_argument("--backends", default="hf,vllm", help="comma-separated: hf, vllm")
    parser.add_argument("--dtypes", default="", help="comma-separated: float32, bfloat16 (default: the machine's)")
    parser.add_argument("--prompts", default="4", help="histories per timed call; a comma list times one call "
                                                          "per count (e.g. 1,2,3)")
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (the search's paper profile: "
                                                                  "0.95)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        prompts = [int(p) for p in args.prompts.split(",") if p.strip()]
    except ValueError:
        parser.error(f"--prompts: {args.prompts!r} is not a comma list of counts")
    if not prompts or min(prompts) < 1:
        parser.error("--prompts: give one or more counts >= 1")
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; known: {sorted(BACKENDS)}")
    result = {
        "benchmark": "policy_throughput",
        "model": "gemma3-270m (embedded default)",
        "prompts": prompts,
        "n": args.n,
        "max_tokens": args.max_tokens,
        "top_p": args.top_p,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "cpu_dtype": cpu_dtype(),
        "backends": {},
    }
    with contextlib.redirect_stdout(sys.stderr):  # libraries that print must not break the one JSON line
        dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] or [None]
        for name in names:
            for dtype in dtypes:
                key = f"{name}#{dtype}" if dtype else name
                result["backends"][key] = measure(name, prompts, args.n, args.max_tokens, dtype,
                                                      args.top_p)
    result["load_average_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
