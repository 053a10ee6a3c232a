"""Value-model training: one epoch on the same samples, tree-packed and per path, tokens computed and seconds.

    python benchmarks/perf/value_training.py --json [--trees FILE ...] [--samples train.jsonl] [--base default]
                                             [--batch-size 4] [--max-tokens 8000] [--pack-tokens 8000]
                                             [--lora-layers all|15,16,17] [--gradient-checkpointing]
                                             [--device cpu|cuda] [--threads N]

Samples: ``--samples`` (a ``jupiter value extract`` file), or every node of the ``--trees`` (default: the README
demo's tree, ``tests/value_model/data/demo_tree_seed1.json``, 15 nodes of the fine-tuned default) labelled with
evenly spaced values, each with its tree in ``sources`` (the speed does not depend on the labels; the demo tree's
nodes are not visited enough for ``extract`` to label them). Each arm trains a fresh model (the same seed) for one
epoch through ``value_model.train.train_value_model``, the held-out split off; a one-step run on one sample first
takes the one-time costs (imports, first kernels) out of both arms.

Prints one JSON object: per arm the optimizer steps, batches, packs, tokens computed (a pack's trie; a per-path
batch with its padding), the per-path tokens of the same samples, seconds of the epoch's training and the
run's wall time; then the packed arm's share of the per-path arm's tokens and its speed-up, and the machine's
load average (a shared machine's seconds are noisy; the token counts are not).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DEMO_TREE = REPO / "tests" / "value_model" / "data" / "demo_tree_seed1.json"


def tree_samples(paths: list[Path]) -> list:
    """Every node of each tree (with messages) as a sample, labelled with evenly spaced values in [-0.9, 0.9]."""
    from value_model.extract import Sample, read_trees

    samples = []
    for path in paths:
        for index, nodes in enumerate(read_trees(path)):
            tree = path.name if index == 0 else f"{path.name}:{index}"
            for i, node in enumerate(nodes):
                value = -0.9 + 1.8 * i / max(1, len(nodes) - 1)
                samples.append(Sample(messages=tuple(node["messages"]), text="", value=value, visits=1,
                                      value_sum=value, sources=(f"{tree}#{node['tag']}",)))
    return samples


def run_arm(samples: list, model_config, settings: dict, packing: bool) -> dict:
    from value_model.config import TrainConfig
    from value_model.train import train_value_model

    config = TrainConfig(**settings, packing=packing)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = train_value_model(samples, model_config, config, out, resume=False)
    wall = time.perf_counter() - started
    [epoch] = result.epochs
    return {"steps": result.steps, "batches": epoch.batches, "packs": epoch.packs, "samples": epoch.samples,
            "tokens_computed": epoch.tokens_computed, "tokens_per_path": epoch.tokens_per_path,
            "epoch_seconds": epoch.seconds, "run_seconds": round(wall, 1),
            "train_loss": result.history[-1].train_loss}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output mode)")
    parser.add_argument("--trees", type=Path, nargs="+", default=[DEMO_TREE], help="tree files (ours or the paper's)")
    parser.add_argument("--samples", type=Path, help="a 'jupiter value extract' JSONL instead of --trees")
    parser.add_argument("--base", default="default", help="backbone (default: the fine-tuned embedded model)")
    parser.add_argument("--batch-size", type=int, default=4, help="paths per per-path batch (the paper's 4)")
    parser.add_argument("--max-tokens", type=int, default=8000)
    parser.add_argument("--pack-tokens", type=int, default=8000)
    parser.add_argument("--lora-layers", default="all", help="'all' (the paper) or layer indices, e.g. 15,16,17")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="on in the paper profile; off here "
                        "by default (the CPU's memory suffices at these sizes and it costs a forward pass)")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from value_model.config import ModelConfig
    from value_model.extract import read_samples
    from value_model.model import resolve_backbone

    if args.threads:
        torch.set_num_threads(args.threads)
    samples = read_samples(args.samples) if args.samples else tree_samples(args.trees)
    layers = None if args.lora_layers == "all" else tuple(int(i) for i in args.lora_layers.split(","))
    model_config = ModelConfig(backbone=resolve_backbone(args.base), max_tokens=args.max_tokens, lora_layers=layers)
    settings = dict(epochs=1, batch_size=args.batch_size, grad_accumulation=1, learning_rate=1e-4, warmup_steps=0,
                    eval_fraction=0.0, gradient_checkpointing=args.gradient_checkpointing, progress=False,
                    device=args.device, seed=args.seed, pack_tokens=args.pack_tokens)
    run_arm(samples[:1], model_config, {**settings, "max_steps": 1}, packing=False)  # one-time costs
    arms = {"per_path": run_arm(samples, model_config, settings, packing=False),
            "packed": run_arm(samples, model_config, settings, packing=True)}
    packed, per_path = arms["packed"], arms["per_path"]
    report = {
        "samples": len(samples), "source": str(args.samples or [str(p) for p in args.trees]),
        "backbone": args.base, "device": args.device or ("cuda" if torch.cuda.is_available() else "cpu"),
        "torch_threads": torch.get_num_threads(), "settings": {k: v for k, v in settings.items() if k != "device"},
        "lora_layers": args.lora_layers, "arms": arms,
        "packed_token_share_of_per_path_computed": round(packed["tokens_computed"] / per_path["tokens_computed"], 4),
        "packed_token_share_of_per_path_tokens": round(packed["tokens_computed"] / per_path["tokens_per_path"], 4),
        "epoch_speedup": round(per_path["epoch_seconds"] / packed["epoch_seconds"], 2) if packed["epoch_seconds"]
        else None,
        "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
    }
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
