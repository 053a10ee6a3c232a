"""Value-scoring throughput and memory vs batch size, with and without length-sorting and prefix sharing.

    python benchmarks/perf/value_scoring.py --json [--model DIR] [--states 12] [--batch-sizes 1,4,8] [--siblings 3]
                                            [--base default] [--device cpu|cuda]

Without ``--model`` a fresh (untrained) value model on ``--base`` (default: the embedded Gemma 3 270M) is saved
to a temporary folder: speed and memory do not depend on the trained weights. States are notebook paths built with
``jupiter.prompts.build_messages`` with 0–7 steps and observations of varied length (seeded), so batches
mix short and long paths as a search does; they come as ``--siblings`` children of one parent (the search's
K), which differ in their last step only. Each configuration scores every state once with the cache off, with
``share_prefix`` off (every path run whole) and, length-sorted, on (a group's common prefix runs once).

Prints one JSON object: per configuration the states per second, wall seconds, real and padded tokens, and
the peak memory above the loaded-model baseline (process RSS sampled every 5 ms; on CUDA also the peak
allocated GPU memory).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def make_states(count: int, seed: int, siblings: int = 1) -> list[list[dict]]:
    from jupiter.prompts import Turn, build_messages
    from jupiter.task import Task

    rng = random.Random(seed)
    task = Task(id="bench", question="Which column of data.csv has the largest variance, and what is it?",
                format="@column[name] @variance[value]", files=(Path("/data/data.csv"),))
    def turn(step: int) -> Turn:
        rows = "\n".join(f"{r}  " + "  ".join(f"{rng.random():.4f}" for _ in range(4))
                         for r in range(rng.choice([1, 3, 8, 20])))
        return Turn(thought=f"Step {step}: look at the data again.",
                    code=f"print(df.describe().iloc[:, {step % 4}])", observation=rows)

    states: list[list[dict]] = []
    while len(states) < count:
        parent = [turn(step) for step in range(rng.randint(0, 6))]
        for _ in range(min(max(1, siblings), count - len(states))):
            states.append(build_messages(task, parent + [turn(len(parent))]))
    return states


class PeakRss:
    """Samples this process's RSS in a thread; ``peak`` is the highest value seen (bytes)."""

    def __init__(self, interval: float = 0.005) -> None:
        import psutil

        self._process = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            time.sleep(self._interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output mode)")
    parser.add_argument("--model", type=Path, help="a trained value model folder (default: fresh, untrained)")
    parser.add_argument("--states", type=int, default=12)
    parser.add_argument("--batch-sizes", default="1,4,8")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    parser.add_argument("--base", default="default", help="backbone of the fresh model (without --model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--siblings", type=int, default=3, help="children per parent among the states (K)")
    args = parser.parse_args()

    import torch

    from value_model.config import ModelConfig
    from value_model.data import shared_prefix_groups, sorted_batches
    from value_model.model import ValueModel, resolve_backbone
    from value_model.scorer import ValueScorer
    from value_model.truncate import prepare_path

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            model_dir = Path(tmp) / "fresh"
            config = ModelConfig(backbone=resolve_backbone(args.base), max_tokens=args.max_tokens)
            ValueModel.create(config, device="cpu").save(model_dir)
        states = make_states(args.states, args.seed, args.siblings)
        results = []
        scorer = ValueScorer.load(model_dir, device=args.device, cache_size=0)
        ids = [prepare_path(s, scorer.tokenizer, scorer.config.max_tokens, scorer.template).input_ids
               for s in states]
        lengths = [len(i) for i in ids]
        scorer.score_token_ids(ids[:1])  # warm-up
        plain_values: dict[int, list[float]] = {}
        for sort, share in ((True, False), (False, False), (True, True)):
            for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
                scorer.batch_size, scorer.sort_by_length, scorer.share_prefix = batch_size, sort, share
                scorer.clear_cache()  # no beginnings kept from the previous configuration: one call, measured cold
                computed = sum(lengths)
                if share:
                    groups, rest = shared_prefix_groups(ids, batch_size, scorer.min_shared_tokens)
                    computed = (sum(p + sum(lengths[i] - p for i in m) for p, m in groups)
                                + sum(lengths[i] for i in rest))
                if sort:
                    batches = sorted_batches(lengths, batch_size)
                else:
                    batches = [list(range(i, min(i + batch_size, len(ids)))) for i in range(0, len(ids), batch_size)]
                padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
                if scorer.device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(scorer.device)
                baseline = PeakRss().peak
                with PeakRss() as rss:
                    start = time.perf_counter()
                    values = scorer.evaluate(states)
                    seconds = time.perf_counter() - start
                row = {"batch_size": batch_size, "length_sorted": sort, "shared_prefix": share, "states": len(states),
                       "seconds": round(seconds, 3), "states_per_second": round(len(states) / seconds, 3),
                       "real_tokens": sum(lengths), "padded_tokens": padded,
                       "padding_fraction": round(1 - sum(lengths) / padded, 4), "computed_tokens": computed,
                       "peak_rss_above_baseline_mb": round((rss.peak - baseline) / 2**20, 1)}
                if scorer.device.type == "cuda":
                    row["peak_gpu_allocated_mb"] = round(torch.cuda.max_memory_allocated(scorer.device) / 2**20, 1)
                if not share:
                    plain_values[batch_size] = values
                else:  # the same values as whole paths; padding is per group suffix here, not per path
                    del row["padded_tokens"], row["padding_fraction"]
                    row["max_abs_diff_vs_whole"] = max(abs(a - b) for a, b in zip(values, plain_values[batch_size]))
                    whole = next(r for r in results if r["batch_size"] == batch_size and r["length_sorted"]
                                 and not r["shared_prefix"])
                    row["speedup_vs_whole"] = round(whole["seconds"] / seconds, 2)
                results.append(row)
    import os

    report = {"benchmark": "value_scoring", "device": str(scorer.device), "backbone": scorer.config.backbone,
              "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
              "load_average_1m": round(os.getloadavg()[0], 2),
              "state_tokens": {"min": min(lengths), "max": max(lengths), "mean": round(sum(lengths) / len(lengths), 1)},
              "results": results}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
