"""Training throughput of ``jupiter sft`` (cpu profile): logits only where the loss counts vs full logits.

Both modes run the very step ``jupiter sft`` runs — the cpu profile's model (float32 unless ``--dtype``, LoRA
rank 16 on all linear layers), ``jupiter.sft.train.causal_lm_loss``, backward, AdamW — on the same micro-batches of
synthetic multi-step samples of realistic length (a printed table, a computation, an answer: about 600-1000
tokens each, like synthesized NbQA data, rendered by ``jupiter.sft.data``). Each measurement is its own
process (so its peak memory is its own), and the modes alternate over ``--rounds`` so that a change in the
machine's load hits both; the best round of each mode is compared.

    python benchmarks/perf/sft_throughput.py --json [--micro-batches 3] [--rounds 2] [--base default]
                                             [--device cpu|cuda] [--dtype float32|bfloat16]

Prints one JSON object: per mode tokens/s (non-padding tokens over the wall time of forward + backward +
optimizer step, first micro-batch excluded as warm-up), tokens per CPU-second (the process's CPU time: less
sensitive to other work on a shared machine; run with ``--threads 1`` for the cleanest ratio), peak RSS (on a
GPU also the peak allocated GPU memory), and the speed-ups. On a GPU each timed micro-batch ends with a
synchronisation, so the wall time covers the GPU's work, not just its queueing.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script from a checkout without an install
    sys.path.insert(0, str(REPO))

from jupiter.prompts import Turn, build_messages  # noqa: E402
from jupiter.task import Task  # noqa: E402
from nbqa_pipeline.export import normalise_conversation  # noqa: E402


def realistic_row(index: int, rng: random.Random) -> dict:
    """A three-step sample whose first observation is a printed table of 30-70 rows (600-1000 tokens)."""
    columns = rng.sample(["price", "height", "score", "weight", "age", "income"], 3)
    rows = rng.randint(30, 70)
    table = "\n".join(f"{i:>4}  " + "  ".join(f"{rng.uniform(1, 999):8.2f}" for _ in columns) for i in range(rows))
    target = columns[0]
    mean = round(rng.uniform(1, 999), 2)
    task = Task(id=f"b{index}", question=f"What is the mean {target} of the rows where {columns[1]} is above "
                f"its median?", constraints="Use pandas. Round to two decimals.", format="@mean[value]",
                files=(Path("data.csv"),))
    turns = [
        Turn(thought="Load the table and look at it.",
             code="import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(df.to_string())",
             observation="      " + "  ".join(f"{c:>8}" for c in columns) + "\n" + table),
        Turn(thought=f"Filter on {columns[1]} above its median, then average {target}.",
             code=f"high = df[df['{columns[1]}'] > df['{columns[1]}'].median()]\n"
                  f"print(round(high['{target}'].mean(), 2))", observation=str(mean)),
        Turn(thought="The filtered mean is printed above.", answer=f"@mean[{mean}]"),
    ]
    system, conversations, _ = normalise_conversation(build_messages(task, turns))
    return {"conversations": conversations, "system": system, "id": f"b{index}"}


def child(data: Path, base: str, where_loss: bool, micro_batches: int, micro_batch_size: int,
          threads: int | None, device: str = "cpu", dtype: str | None = None) -> dict:
    """One measurement: warm-up micro-batch, then ``micro_batches`` timed training micro-batches."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    from transformers import AutoTokenizer

    from jupiter.sft.config import profile
    from jupiter.sft.data import encode_all, read_sharegpt
    from jupiter.sft.train import _collate, build_model, causal_lm_loss, resolve_base

    config = profile("cpu").with_overrides({"logits_where_loss": where_loss, "micro_batch_size": micro_batch_size,
                                            "batch_size": micro_batch_size * 4, "dtype": dtype})
    cuda = device.startswith("cuda")
    base_dir = resolve_base(base)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    samples, _ = encode_all(read_sharegpt(data), tokenizer, None, config.max_len)
    model = build_model(base_dir, config, device)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    collate = _collate(tokenizer.pad_token_id)
    size = config.micro_batch_size
    batches = [{k: v.to(device) for k, v in collate([{"input_ids": list(s.input_ids), "labels": list(s.labels)}
                                                     for s in samples[i * size:(i + 1) * size]]).items()}
               for i in range(micro_batches + 1)]
    tokens = loss_tokens = 0
    seconds = cpu_seconds = 0.0
    for index, batch in enumerate(batches):
        started, cpu_started = time.perf_counter(), time.process_time()
        loss = causal_lm_loss(model, batch, where_loss)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if index:  # the first micro-batch warms up allocators and kernels
            seconds += time.perf_counter() - started
            cpu_seconds += time.process_time() - cpu_started
            tokens += int(batch["attention_mask"].sum())
            loss_tokens += int((batch["labels"][:, 1:] != -100).sum())
    return {"tokens_per_second": round(tokens / seconds, 1), "seconds": round(seconds, 2),
            "tokens_per_cpu_second": round(tokens / cpu_seconds, 1), "cpu_seconds": round(cpu_seconds, 2),
            "tokens": tokens,
            "loss_tokens": loss_tokens, "threads": torch.get_num_threads(),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            **({"peak_gpu_allocated_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1),
                "gpu": torch.cuda.get_device_name()} if cuda else {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output)")
    parser.add_argument("--micro-batches", type=int, default=3, help="timed micro-batches")
    parser.add_argument("--micro-batch-size", type=int, default=2, help="samples per micro-batch (cpu profile: 2)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating measurements per mode")
    parser.add_argument("--base", default="default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                        help="training precision (default: the cpu profile's float32)")
    parser.add_argument("--child", choices=["where-loss", "full"], help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.data, args.base, args.child == "where-loss", args.micro_batches,
                               args.micro_batch_size, args.threads, args.device, args.dtype)))
        return 0
    rng = random.Random(args.seed)
    runs: dict[str, list[dict]] = {"where-loss": [], "full": []}
    with tempfile.TemporaryDirectory(prefix="sft-bench-") as tmp:
        data = Path(tmp) / "sft_sharegpt.jsonl"
        count = args.micro_batch_size * (args.micro_batches + 1)
        data.write_text("".join(json.dumps(realistic_row(i, rng)) + "\n" for i in range(count)), encoding="utf-8")
        for _ in range(args.rounds):
            for mode in runs:
                done = subprocess.run([sys.executable, __file__, "--child", mode, "--data", str(data), "--base",
                                       args.base, "--micro-batches", str(args.micro_batches),
                                       "--micro-batch-size", str(args.micro_batch_size), "--device", args.device,
                                       *(["--dtype", args.dtype] if args.dtype else []),
                                       *(["--threads", str(args.threads)] if args.threads else [])],
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"{mode} measurement failed:\n{done.stderr[-3000:]}")
                runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    best = {mode: max(r, key=lambda x: x["tokens_per_second"]) for mode, r in runs.items()}
    first = runs["where-loss"][0]
    result = {
        "benchmark": "sft_throughput",
        "profile": "cpu",
        "device": args.device,
        "dtype": args.dtype or "float32",
        "micro_batch_size": args.micro_batch_size,
        "threads": first["threads"],
        "micro_batches": args.micro_batches,
        "mean_tokens_per_sample": round(first["tokens"] / (args.micro_batch_size * args.micro_batches), 1),
        "loss_token_share": round(first["loss_tokens"] / first["tokens"], 3),
        "logits_where_loss": {**best["where-loss"],
                              "tokens_per_second_rounds": [r["tokens_per_second"] for r in runs["where-loss"]]},
        "full_logits": {**best["full"], "tokens_per_second_rounds": [r["tokens_per_second"] for r in runs["full"]]},
        "speedup": round(best["where-loss"]["tokens_per_second"] / best["full"]["tokens_per_second"], 2),
        "cpu_time_speedup": round(best["where-loss"]["tokens_per_cpu_second"]
                                  / best["full"]["tokens_per_cpu_second"], 2),
        "median_speedup": round(statistics.median(r["tokens_per_second"] for r in runs["where-loss"])
                                / statistics.median(r["tokens_per_second"] for r in runs["full"]), 2),
    }
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
