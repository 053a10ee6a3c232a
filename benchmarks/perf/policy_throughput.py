"""Policy throughput on the embedded tiny model: generated tokens per second per local backend and sampling setting.

Usage: ``python benchmarks/perf/policy_throughput.py --json [--backends hf,vllm] [--dtypes float32,bfloat16]
[--prompts 20 --n 3 --max-tokens 64] [--settings 0.95,1.0,greedy] [--temperature 0.7] [--nucleus window,engine]``

Prints one JSON object. For each backend (and each ``--nucleus`` mode, ``backend@mode`` keys; each its own
load) it gives the load time and, for each sampling setting side by side (``settings``: a top-p value, or
``greedy``; the paper's inference sampling is T 0.7 and top-p 0.95), one timed ``generate`` call after a small
warm-up call: its completion tokens, tokens/s, milliseconds per decoding step (the call's time over its
longest completion), the prefix-cache hit rate where the backend reports it, and

- ``sampling_share``: the share of the time that this setting's sampling costs beyond greedy decoding,
  ``1 - tokens/s / greedy tokens/s`` (the model's forward pass is the same in both; tokens/s rather than
  ms/step, because the longest completion, which ms/step divides by, differs between settings);
- ``filter_ms_per_step`` and ``filter_share``: on vLLM with our top-p filter (``jupiter.llm.vllm_nucleus``),
  the time the filter itself took, per step and as a share of the call, read from the engine.

``ratio_top_p_to_top_p_1`` is tokens/s at the first top-p < 1 over tokens/s at top-p 1.0, both in this one run.
``--prompts 1,2,3`` times one call per count for the first setting (``calls`` in that setting): what a step costs
as the batch grows, the figure behind ``--leaves-per-step`` (docs/search.md). A backend whose package is not
installed is reported as skipped, not as a failure. ``--dtypes`` measures each backend in each dtype
(``backend#dtype`` keys); without it, what this CPU computes natively (``cpu_dtype``;
``jupiter.llm.machine_dtype``).
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

from jupiter.llm import SamplingParams, load_policy
from jupiter.llm.machine_dtype import cpu_dtype
from jupiter.prompts import SYSTEM_PROMPT

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


def measure(backend: str, prompts: list[int], n: int, max_tokens: int, settings: list[str], temperature: float,
            dtype: str | None = None, nucleus: str | None = None) -> dict:
    package, spec = BACKENDS[backend]
    if importlib.util.find_spec(package) is None:
        return {"skipped": f"{package} is not installed"}
    options = [f"dtype={dtype}"] * bool(dtype) + [f"nucleus={nucleus}"] * bool(nucleus)
    if options:
        spec = f"{spec}#{'&'.join(options)}"
    start = time.perf_counter()
    policy = load_policy(spec)
    load_s = time.perf_counter() - start
    try:
        rows = []
        for i, setting in enumerate(settings):
            params = _params(setting, n, max_tokens, temperature)
            # warm-up with the timed call's sampling (its first top-p/log-prob step costs seconds) and prompts
            policy.generate(histories(max(prompts)), params.replace(max_tokens=4, seed=1))
            counts = prompts if i == 0 else prompts[:1]
            calls = [_timed_call(policy, count, params) for count in counts]
            row = {"setting": setting, **calls[0]}
            if len(calls) > 1:
                row["calls"] = calls
            rows.append(row)
    finally:
        policy.close()
    greedy = next((r for r in rows if r["setting"] == "greedy"), None)
    for row in rows:
        if greedy and row["setting"] != "greedy" and row["tokens_per_s"] and greedy["tokens_per_s"]:
            row["sampling_share"] = round(1 - row["tokens_per_s"] / greedy["tokens_per_s"], 3)
    result = {"spec": spec, "load_s": round(load_s, 2), "nucleus": getattr(policy, "nucleus", None),
              "settings": rows}
    nucleus_rows = [r for r in rows if r["setting"] not in ("greedy", "1.0")]
    full = next((r for r in rows if r["setting"] == "1.0"), None)
    if nucleus_rows and full and full["tokens_per_s"]:
        result["ratio_top_p_to_top_p_1"] = round(nucleus_rows[0]["tokens_per_s"] / full["tokens_per_s"], 3)
    return result


def _params(setting: str, n: int, max_tokens: int, temperature: float) -> SamplingParams:
    if setting == "greedy":
        return SamplingParams(n=n, max_tokens=max_tokens, seed=0, stop=(), logprobs=True, temperature=0.0)
    return SamplingParams(n=n, max_tokens=max_tokens, seed=0, stop=(), logprobs=True, temperature=temperature,
                          top_p=float(setting))


def _filter_seconds(policy) -> float | None:
    llm = getattr(policy, "llm", None)
    if llm is None or getattr(policy, "nucleus", None) != "window":
        return None
    from jupiter.llm.vllm_nucleus import filter_seconds

    return filter_seconds(llm)


def _timed_call(policy, prompts: int, params: SamplingParams) -> dict:
    """One timed ``generate`` of ``prompts`` histories × ``params.n`` completions."""
    before = policy.stats()
    filtered_before = _filter_seconds(policy)
    start = time.perf_counter()
    outs = policy.generate(histories(prompts), params)
    seconds = time.perf_counter() - start
    filtered_after = _filter_seconds(policy)
    after = policy.stats()
    tokens = sum(c.num_tokens for o in outs for c in o)
    longest = max(c.num_tokens for o in outs for c in o)
    prompt_tokens = after.prompt_tokens - before.prompt_tokens
    cached = None
    if after.cached_prompt_tokens is not None:
        cached = after.cached_prompt_tokens - (before.cached_prompt_tokens or 0)
    row = {
        "sequences": prompts * params.n,
        "generate_s": round(seconds, 2),
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 2) if seconds > 0 else None,
        "ms_per_step": round(1000 * seconds / longest, 1) if longest else None,
        "prompt_tokens": prompt_tokens,
        "prefix_cache_hit_rate": round(cached / prompt_tokens, 3) if cached is not None and prompt_tokens else None,
        "finish_reasons": sorted({c.finish_reason for o in outs for c in o}),
    }
    if filtered_before is not None and filtered_after is not None and longest:
        row["filter_ms_per_step"] = round(1000 * (filtered_after - filtered_before) / longest, 1)
        row["filter_share"] = round((filtered_after - filtered_before) / seconds, 3)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output mode)")
    parser.add_argument("--backends", default="hf,vllm", help="comma-separated: hf, vllm")
    parser.add_argument("--dtypes", default="", help="comma-separated: float32, bfloat16 (default: the machine's)")
    parser.add_argument("--prompts", default="20", help="histories per timed call (20: the bench's trees in "
                                                           "flight); a comma list times one call per count")
    parser.add_argument("--n", type=int, default=3, help="samples per history (3: the paper's K)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--settings", default="0.95,1.0,greedy",
                        help="sampling settings side by side: top-p values and/or 'greedy'")
    parser.add_argument("--temperature", type=float, default=0.7, help="of the top-p settings (paper inference: 0.7)")
    parser.add_argument("--nucleus", default="", help="comma-separated: window, engine (who applies top-p; each "
                                                      "its own load; default: the backend's default)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        prompts = [int(p) for p in args.prompts.split(",") if p.strip()]
    except ValueError:
        parser.error(f"--prompts: {args.prompts!r} is not a comma list of counts")
    if not prompts or min(prompts) < 1:
        parser.error("--prompts: give one or more counts >= 1")
    settings = [x.strip() for x in args.settings.split(",") if x.strip()]
    for setting in settings:
        if setting != "greedy":
            try:
                ok = 0 < float(setting) <= 1
            except ValueError:
                ok = False
            if not ok:
                parser.error(f"--settings: {setting!r} is neither a top-p in (0, 1] nor 'greedy'")
    if not settings:
        parser.error("--settings: give one or more of: top-p values, greedy")
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; known: {sorted(BACKENDS)}")
    modes = [m.strip() for m in args.nucleus.split(",") if m.strip()] or [None]
    if any(m not in ("window", "engine") for m in modes if m):
        parser.error(f"--nucleus: {args.nucleus!r}; give window and/or engine")
    result = {
        "benchmark": "policy_throughput",
        "model": "gemma3-270m (embedded default)",
        "prompts": prompts,
        "n": args.n,
        "max_tokens": args.max_tokens,
        "settings": settings,
        "temperature": args.temperature,
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
                for mode in modes:
                    key = name + (f"#{dtype}" if dtype else "") + (f"@{mode}" if mode else "")
                    result["backends"][key] = measure(name, prompts, args.n, args.max_tokens, settings,
                                                      args.temperature, dtype, mode)
    result["load_average_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
