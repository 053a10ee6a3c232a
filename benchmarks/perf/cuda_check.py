"""The model code on a GPU: ``jupiter sft`` and the value model train, checkpoint, resume and score there.

    python benchmarks/perf/cuda_check.py --device cuda --source MODEL_DIR --work DIR [--tiny] [--skip-perf]
                                         [--report FILE]

Nothing in the default test suite runs on a GPU (CI has none), so this script is the check to run on a machine
that has one; ``--device cpu --tiny`` runs the very same steps on a CPU in a few minutes, which is how the script
itself is tested before GPU time is spent on it.

``MODEL_DIR`` is a Gemma 3 folder of which only ``config.json`` and the tokenizer files are read
(``tokenizer.json`` may be gzipped as ``tokenizer.json.gz``, so that the folder travels small; e.g. a copy of
the cached embedded model's folder without its weights). The check builds a random-initialised model of that
architecture in ``DIR/model`` (``--tiny``: 2 layers, hidden size 64): devices, dtypes, checkpoints, resuming,
scoring and speed do not depend on trained weights, and no weights have to travel.

Steps (each one entry of the report, with ``ok`` and what it measured):

* ``sft``: ``jupiter sft --device D`` (bfloat16 on a GPU), stopped by SIGTERM after its first checkpoint; the
  same command then resumes from that checkpoint and finishes, writing the adapter and ``training.json``.
* ``sft_adapter``: that adapter loads onto its base with peft on D and changes the model's output.
* ``value_train``: ``jupiter value train --device D`` killed (SIGKILL) after its step-2 checkpoint; the same
  command resumes from step 2 and must end with the weights of the same run never stopped (dropout included:
  on a GPU its masks come from the GPU's RNG, which the checkpoint keeps). On a GPU two more runs give the
  noise floor (the straight run again: GPU kernels are not bit-reproducible) and a control (the resume with
  the GPU's RNG state left out).
* ``value_score``: ``jupiter value score --device D`` gives one finite value in [-1, 1] per state; the search's
  loader (``search.loaders.load_value``) on D gives the same values with and without shared-prefix scoring;
  the difference to the CPU's float32 values is reported.
* ``sft_throughput`` / ``value_scoring``: the two benchmarks' JSON on D (skipped with ``--skip-perf``).

Prints one JSON object (also written to ``--report``); exit status 0 when every step is ok.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script from a checkout without an install
    sys.path.insert(0, str(REPO))

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                   "generation_config.json", "chat_template.jinja")
TINY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 32, "query_pre_attn_scalar": 32}


def log(message: str) -> None:
    print(f"[cuda_check {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def env() -> dict[str, str]:
    """The subprocesses' environment: this checkout importable, no attempt to reach the Hugging Face Hub."""
    paths = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1"}


def jupiter(*argv: str) -> list[str]:
    return [sys.executable, "-m", "jupiter.cli", *argv]


def run(command: list[str], what: str, timeout: float = 900) -> subprocess.CompletedProcess:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env(), timeout=timeout)
    log(f"{what}: exit {done.returncode} in {time.perf_counter() - started:.1f} s")
    if done.returncode not in (0, 130):
        log(f"{what} stderr:\n{done.stderr[-4000:]}")
    return done


def last_json(text: str) -> Any:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def build_model(source: Path, target: Path, tiny: bool, device: str) -> dict[str, Any]:
    """A random-initialised model of ``source``'s architecture with its tokenizer, saved in ``target``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
        elif (source / f"{name}.gz").is_file():
            with gzip.open(source / f"{name}.gz", "rb") as packed, open(target / name, "wb") as plain:
                shutil.copyfileobj(packed, plain)
    if not (target / "tokenizer.json").is_file() and not (target / "tokenizer.model").is_file():
        raise SystemExit(f"--source {source}: no tokenizer.json(.gz) or tokenizer.model")
    config = AutoConfig.from_pretrained(str(source))
    if tiny:
        for key, value in TINY.items():
            setattr(config, key, value)
        config.layer_types = ["sliding_attention", "full_attention"]  # one layer of each kind
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(str(target))
    parameters = sum(p.numel() for p in model.parameters())
    del model
    return {"folder": str(target), "parameters": parameters, "layers": config.num_hidden_layers,
            "hidden_size": config.hidden_size, "vocab_size": config.vocab_size}


# ---------------------------------------------------------------- SFT


def sft_rows(path: Path, count: int) -> Path:
    from benchmarks.perf.sft_throughput import realistic_row

    rng = random.Random(0)
    path.write_text("".join(json.dumps(realistic_row(i, rng)) + "\n" for i in range(count)), encoding="utf-8")
    return path


def check_sft(work: Path, model: Path, device: str) -> dict[str, Any]:
    from jupiter.sft.train import latest_checkpoint

    data = sft_rows(work / "sft_sharegpt.jsonl", 24)
    out = work / "sft"
    command = jupiter("sft", str(data), "--base", str(model), "--out", str(out), "--device", device,
                      "--max-steps", "12", "--save-steps", "2", "--batch-size", "2", "--micro-batch-size", "1",
                      "--lora-r", "4", "--lora-alpha", "8", "--max-len", "768", "--seed", "1",
                      *(["--dtype", "bfloat16"] if device != "cpu" else []))
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    while latest_checkpoint(out) is None and process.poll() is None and time.perf_counter() - started < 600:
        time.sleep(0.05)
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)  # what `kill PID` sends: finish the step, save, exit 130
    _stdout, stderr = process.communicate(timeout=600)
    stopped = latest_checkpoint(out)
    first = {"exit": process.returncode, "checkpoint": stopped.name if stopped else None,
             "seconds": round(time.perf_counter() - started, 1)}
    log(f"sft first run: {first}")
    if process.returncode != 130:
        log(f"sft first run stderr:\n{stderr[-4000:]}")
    second = run(command, "sft resume")
    record_file = out / "training.json"
    record = json.loads(record_file.read_text()) if record_file.is_file() else {}
    stopped_at = int(stopped.name.split("-")[1]) if stopped else None
    ok = (process.returncode == 130 and stopped_at is not None and second.returncode == 0
          and record.get("resumed_from_step") == stopped_at and record.get("steps") == 12
          and (out / "adapter_model.safetensors").is_file()
          and all(isinstance(x, float) and x == x for x in record.get("losses", [None])))
    return {"ok": ok, "first_run": first, "resumed_from_step": record.get("resumed_from_step"),
            "steps": record.get("steps"), "final_loss": record.get("final_loss"), "losses": record.get("losses"),
            "session": record.get("session"), "gpu": record.get("gpu"),
            "peak_gpu_allocated_mb": record.get("peak_gpu_allocated_mb"), "device": record.get("device"),
            "config_dtype": (record.get("config") or {}).get("dtype"), "versions": record.get("versions"),
            "resume_stderr_tail": None if ok else second.stderr[-1500:]}


def check_sft_adapter(work: Path, model: Path, device: str) -> dict[str, Any]:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter = work / "sft"
    ids = torch.tensor([[2, 1000, 2000, 3000, 4000]], device=device)
    base = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32).to(device).eval()
    with torch.inference_mode():
        before = base(input_ids=ids).logits.float()
    tuned = PeftModel.from_pretrained(base, str(adapter)).to(device).eval()
    with torch.inference_mode():
        after = tuned(input_ids=ids).logits.float()
    change = float((after - before).abs().max())
    on = {str(p.device) for p in tuned.parameters()}
    return {"ok": change > 0 and bool(torch.isfinite(after).all()) and on == {str(ids.device)},
            "max_logit_change": change, "parameter_devices": sorted(on)}


# ---------------------------------------------------------------- value model


def value_samples(path: Path, count: int) -> tuple[Path, list[list[dict]]]:
    from benchmarks.perf.value_scoring import make_states

    states = make_states(count, seed=0, siblings=3)
    rng = random.Random(1)
    with open(path, "w", encoding="utf-8") as handle:
        for index, messages in enumerate(states):
            handle.write(json.dumps({"messages": messages, "value": round(rng.uniform(-1, 1), 3),
                                     "id": f"s{index}"}) + "\n")
    return path, states


def max_weight_diff(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    worst = 0.0
    for name in ("adapter/adapter_model.safetensors", "value_head.safetensors"):
        left, right = load_file(str(a / name)), load_file(str(b / name))
        assert left.keys() == right.keys(), name
        for key in left:
            worst = max(worst, float((left[key].float() - right[key].float()).abs().max()))
    return worst


def run_until_checkpoint(command: list[str], ready: Callable[[], bool], sig: int, what: str) -> dict[str, Any]:
    """Starts ``command``, sends it ``sig`` as soon as ``ready()`` (a checkpoint is on disk), waits for it."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    while not ready() and process.poll() is None and time.perf_counter() - started < 600:
        time.sleep(0.02)
    stopped = process.poll() is None
    if stopped:
        process.send_signal(sig)
    _, stderr = process.communicate(timeout=600)
    log(f"{what}: {'stopped' if stopped else 'ran out'}, exit {process.returncode} in "
        f"{time.perf_counter() - started:.1f} s")
    return {"stopped": stopped, "exit": process.returncode, "stderr": stderr}


def check_value_train(work: Path, model: Path, samples: Path, device: str) -> dict[str, Any]:
    """A run killed after its step-2 checkpoint and resumed must end with the weights of a run never stopped."""
    from value_model.train import latest_checkpoint

    def command(out: Path) -> list[str]:
        return jupiter("value", "train", str(samples), "--out", str(out), "--base", str(model), "--device", device,
                       "--batch-size", "2", "--grad-accum", "1", "--max-tokens", "1024", "--eval-fraction", "0.2",
                       "--checkpoint-every", "2", "--max-steps", "4", "--lora-r", "4", "--lr", "1e-3",
                       "--warmup-steps", "0", "--epochs", "1", "--seed", "0")

    def at_step_2(out: Path) -> Callable[[], bool]:
        return lambda: (latest_checkpoint(out) or Path("checkpoint-0")).name == "checkpoint-2"

    straight, resumed, control = work / "value-straight", work / "value", work / "value-control"
    whole = run(command(straight), "value train (4 steps straight)")
    killed = run_until_checkpoint(command(resumed), at_step_2(resumed), signal.SIGKILL, "value train (killed)")
    again = run(command(resumed), "value train (resumed)")
    reports = [last_json(p.stdout) if p.returncode == 0 else None for p in (whole, again)]
    result: dict[str, Any] = {"killed_run": {k: v for k, v in killed.items() if k != "stderr"}, "runs": reports}
    result["resumed_vs_straight_max_weight_diff"] = max_weight_diff(resumed, straight) if all(reports) else None
    if device != "cpu" and all(reports):
        # control: the same stop and resume with the GPU's RNG state left out of the restore (what a resume
        # did before checkpoints kept it): how far dropout's other masks move the weights
        # (Trainer restores every RNG from the checkpoint's rng_state.pth: the control skips that restore)
        patched = ("import sys, transformers; transformers.Trainer._load_rng_state = lambda *a: None; "
                   "from jupiter.cli import main; sys.exit(main(sys.argv[1:]))")
        run_until_checkpoint(command(control), at_step_2(control), signal.SIGKILL, "control (killed)")
        redo = run([sys.executable, "-c", patched, *command(control)[3:]], "control (resumed without GPU RNG)")
        if redo.returncode == 0:
            result["control_without_gpu_rng_max_weight_diff"] = max_weight_diff(control, straight)
    noise = 0.0
    if device != "cpu" and all(reports):
        # a GPU's kernels are not bit-reproducible (bf16 reductions): the same run twice sets the noise floor
        twice = run(command(work / "value-straight-2"), "value train (4 steps straight, again)")
        if twice.returncode == 0:
            noise = result["straight_vs_straight_max_weight_diff"] = max_weight_diff(work / "value-straight-2",
                                                                                     straight)
    diff = result["resumed_vs_straight_max_weight_diff"]
    result["ok"] = bool(killed["stopped"] and all(reports) and reports[1]["resumed_from"] == 2
                        and reports[0]["steps"] == reports[1]["steps"] == 4 and diff is not None
                        and diff <= max(1e-3, 2 * noise))
    if not result["ok"]:
        result["stderr_tail"] = "\n".join(p.stderr[-1500:] for p in (whole, again)) + killed["stderr"][-1500:]
    return result


def check_value_score(work: Path, samples: Path, states: list[list[dict]], device: str) -> dict[str, Any]:
    import math

    from search.loaders import load_value

    model = work / "value"
    scores = work / "scores.jsonl"
    done = run(jupiter("value", "score", str(model), str(samples), "-o", str(scores), "--device", device),
               "value score")
    cli = [json.loads(line)["value"] for line in scores.read_text().splitlines()] if done.returncode == 0 else []
    shared = load_value(model, device=device, cache_size=0)
    whole = load_value(model, device=device, cache_size=0, share_prefix=False)
    cpu = load_value(model, device="cpu", cache_size=0)
    values_shared, values_whole, values_cpu = (s.evaluate(states) for s in (shared, whole, cpu))

    def gap(a: list[float], b: list[float]) -> float | None:
        return max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else None

    finite = all(math.isfinite(v) and -1 <= v <= 1 for v in cli + values_shared + values_whole)
    result = {"states": len(states), "scorer_device": str(shared.device),
              "model_dtype": str(next(shared.model.peft_model.parameters()).dtype),
              "cli_vs_loader_max_diff": gap(cli, values_whole), "shared_prefix_vs_whole_max_diff":
              gap(values_shared, values_whole), "device_vs_cpu_float32_max_diff": gap(values_whole, values_cpu),
              "values_first": [round(v, 4) for v in values_whole[:6]], "cache": shared.cache_stats().__dict__}
    tolerance = 0.02 if device != "cpu" else 1e-4  # bf16 on a GPU: ~3 significant digits
    result["ok"] = (done.returncode == 0 and finite and len(cli) == len(states)
                    and result["cli_vs_loader_max_diff"] <= tolerance
                    and result["shared_prefix_vs_whole_max_diff"] <= tolerance
                    and str(shared.device).split(":")[0] == device.split(":")[0])
    return result


# ---------------------------------------------------------------- benchmarks


def check_perf(model: Path, device: str, tiny: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    here = Path(__file__).resolve().parent
    sizes = ("--micro-batches", "2", "--micro-batch-size", "2") if tiny else ("--micro-batches", "5",
                                                                           "--micro-batch-size", "4")
    done = run([sys.executable, str(here / "sft_throughput.py"), "--json", "--base", str(model), "--device", device,
                "--rounds", "1", *sizes, *(["--dtype", "bfloat16"] if device != "cpu" else [])], "sft_throughput")
    out["sft_throughput"] = last_json(done.stdout) if done.returncode == 0 else {"error": done.stderr[-1500:]}
    done = run([sys.executable, str(here / "value_scoring.py"), "--json", "--base", str(model), "--device", device,
                "--states", "12" if tiny else "48", "--batch-sizes", "1,8"], "value_scoring")
    out["value_scoring"] = last_json(done.stdout) if done.returncode == 0 else {"error": done.stderr[-1500:]}
    out["ok"] = all("error" not in v for v in out.values() if isinstance(v, dict))
    return out


def step(report: dict[str, Any], name: str, action: Callable[[], dict[str, Any]], save: Path | None) -> None:
    """Runs one check into ``report[name]`` and rewrites ``save``: a run cut short still leaves its results."""
    started = time.perf_counter()
    try:
        report[name] = action()
    except Exception as exc:  # one broken step must not hide the others' results
        import traceback

        report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()[-2000:]}
    report[name]["seconds"] = round(time.perf_counter() - started, 1)
    log(f"{name}: {'ok' if report[name]['ok'] else 'FAILED'} ({report[name]['seconds']} s)")
    if save is not None:
        save.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (a rehearsal)")
    parser.add_argument("--source", type=Path, required=True, help="a Gemma 3 folder: config.json + tokenizer")
    parser.add_argument("--work", type=Path, required=True, help="scratch folder (model, runs); emptied first")
    parser.add_argument("--tiny", action="store_true", help="2 layers, hidden size 64 (a quick CPU rehearsal)")
    parser.add_argument("--skip-perf", action="store_true", help="no throughput benchmarks")
    parser.add_argument("--report", type=Path, help="also write the JSON report here")
    parser.add_argument("--only", default=None, help="comma-separated steps to run (model is always built): "
                        "sft,value,perf")
    args = parser.parse_args()
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})

    import torch

    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    report: dict[str, Any] = {"benchmark": "cuda_check", "device": args.device, "torch": torch.__version__,
                              "cuda_available": torch.cuda.is_available(),
                              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    model = args.work / "model"
    step(report, "model", lambda: {"ok": True, **build_model(args.source, model, args.tiny, args.device)},
         args.report)
    only = set(args.only.split(",")) if args.only else {"sft", "value", "perf"}
    if report["model"]["ok"] and "sft" in only:
        step(report, "sft", lambda: check_sft(args.work, model, args.device), args.report)
        if (args.work / "sft" / "adapter_model.safetensors").is_file():
            step(report, "sft_adapter", lambda: check_sft_adapter(args.work, model, args.device), args.report)
    if report["model"]["ok"] and "value" in only:
        samples, states = value_samples(args.work / "value_samples.jsonl", 12)
        step(report, "value_train", lambda: check_value_train(args.work, model, samples, args.device), args.report)
        if (args.work / "value" / "value_config.json").is_file():
            step(report, "value_score", lambda: check_value_score(args.work, samples, states, args.device),
                 args.report)
    if report["model"]["ok"] and "perf" in only and not args.skip_perf:
        step(report, "perf", lambda: check_perf(model, args.device, args.tiny), args.report)
    steps = [k for k, v in report.items() if isinstance(v, dict) and "ok" in v]
    wanted = ({"sft"} if "sft" in only else set()) | ({"value_train", "value_score"} if "value" in only else set())
    report["ok"] = all(report[k]["ok"] for k in steps) and wanted <= set(steps)
    text = json.dumps(report, indent=1)
    if args.report:
        args.report.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
