"""Value scoring of a real run's trees, asked for the way the batched search asks: kept beginnings off, on, and
every scored path kept.

    python benchmarks/perf/value_replay.py RUN --model VALUE_MODEL [--in-flight 20] [--trees N] [--device cpu]

RUN is a ``jupiter bench`` run folder made with ``--value-model``: its ``trees/*.json`` hold the nodes the value
model scored. The replay keeps ``--in-flight`` trees going, as the batched driver does; each round is one value
call with every in-flight tree's next expansion (the children of one node), and a finished tree makes room for
the next. The same calls run up to four times on one loaded model, with the value cache off: with no beginnings kept
across calls (``prefix_cache_mb=0``: each call shares its groups' common beginnings only); with the default
``PrefixCache`` holding the groups' beginnings (``keep_paths=False``: siblings run as one padded batch); and with
every scored path kept as well (``keep_paths=True``, the default: a node's children continue from its own path),
first with the LoRA adapters run apart from the backbone (``merge_lora=False``), then merged into it (the default).
``--passes`` picks some of the four (``none,groups,paths-apart,paths``). Prints one JSON object: per pass the
seconds, the tokens the paths hold and the tokens run, and the largest difference between any pass's values and
the first's (keeping changes no value; merging changes float rounding only). A progress bar per pass goes to
stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def expansions(run: Path, limit: int | None) -> list[list[list[dict]]]:
    """Per tree (file order), per expanded node (creation order): the histories of its scored children."""
    from search.tree_io import load_tree

    files = sorted((run / "trees").glob("*.json"))[:limit]
    if not files:
        raise SystemExit(f"{run}: no trees/*.json here (a jupiter bench run folder is expected)")
    trees = []
    for file in files:
        tree = load_tree(file)
        by_parent: dict[str, list] = {}
        for node in tree.nodes[1:]:
            if node.evaluation is not None and node.parent is not None:
                by_parent.setdefault(node.parent.tag, []).append(tree.messages(node))
        trees.append(list(by_parent.values()))
    if not any(trees):
        raise SystemExit(f"{run}: no node has a value estimate (was the run made with --value-model?)")
    return trees


def rounds(trees: list[list[list[dict]]], in_flight: int) -> list[list[list[dict]]]:
    """The value calls of a batched run: each round, the next expansion of every tree in flight."""
    waiting = [t for t in trees if t]
    flight: list[list[list[list[dict]]]] = []
    calls = []
    while waiting or flight:
        while waiting and len(flight) < in_flight:
            flight.append(list(waiting.pop(0)))
        calls.append([history for tree in flight for history in tree.pop(0)])
        flight = [tree for tree in flight if tree]
    return calls


#: name -> (beginnings kept across calls, every scored path kept, LoRA merged into the backbone)
PASSES = {"none": (False, False, True), "groups": (True, False, True), "paths-apart": (True, True, False),
          "paths": (True, True, True)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output mode)")
    parser.add_argument("run", type=Path)
    parser.add_argument("--model", type=Path, required=True, help="the value model folder the run used")
    parser.add_argument("--in-flight", type=int, default=20, help="trees advanced together (the run's concurrency)")
    parser.add_argument("--trees", type=int, default=None, help="replay only the first N trees")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                        help="the backbone's precision (as --value-dtype)")
    parser.add_argument("--passes", default=",".join(PASSES),
                        help=f"comma-separated, in this order: {','.join(PASSES)} (default: all)")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.passes.split(",") if name.strip()]
    if not chosen or any(name not in PASSES for name in chosen):
        parser.error(f"--passes: names from {','.join(PASSES)}, got {args.passes!r}")

    import torch
    from tqdm import tqdm

    from value_model.scorer import ValueScorer
    from value_model.truncate import prepare_path

    calls = rounds(expansions(args.run, args.trees), args.in_flight)
    scorer = ValueScorer.load(args.model, device=args.device, cache_size=0, dtype=args.dtype)
    tokens = sum(len(prepare_path(h, scorer.tokenizer, scorer.config.max_tokens, scorer.template).input_ids)
                 for call in calls for h in call)
    passes, values = [], []
    kept_budget = scorer.prefix_cache.budget_bytes
    for name in [n for n in PASSES if n in chosen]:
        kept, keep_paths, merged = PASSES[name]
        budget = kept_budget if kept else 0
        scorer.clear_cache()
        scorer.prefix_cache.budget_bytes, scorer.keep_paths = budget, keep_paths
        if merged:
            scorer.model.peft_model.merge_adapter()  # a no-op when merged already
        else:
            scorer.model.peft_model.unmerge_adapter()
        before = scorer.cache_stats()
        start = time.perf_counter()
        label = f"replay, {name}: {round(budget / 2**20)} MiB kept{', every path' if keep_paths else ''}" + \
            ("" if merged else ", LoRA apart")
        progress = tqdm(calls, desc=label, unit="call", file=sys.stderr)
        values.append([v for call in progress for v in scorer.evaluate(call)])
        seconds = time.perf_counter() - start
        after = scorer.cache_stats()
        passes.append({"pass": name, "prefix_cache_mb": round(budget / 2**20), "keep_paths": keep_paths,
                       "merge_lora": merged, "seconds": round(seconds, 1),
                       "tokens_run": after.tokens_run - before.tokens_run,
                       "prefix_tokens_reused": after.prefix_tokens_reused - before.prefix_tokens_reused,
                       "prefixes_kept": after.prefixes})
    for later in passes[1:]:
        later["speedup"] = round(passes[0]["seconds"] / later["seconds"], 2)
    report = {"benchmark": "value_replay", "run": str(args.run), "device": str(scorer.device),
              "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
              "load_average_1m": round(os.getloadavg()[0], 2), "calls": len(calls),
              "states": sum(len(c) for c in calls), "path_tokens": tokens, "passes": passes,
              "max_abs_diff": max((abs(a - b) for other in values[1:] for a, b in zip(values[0], other)), default=0.0)}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
