"""The value-model arm: collect with labels on one half → extract → train → infer with the model on the other half.

The same steps a user takes (``jupiter solve --mode collect``, ``jupiter value extract``, ``jupiter value
train``, ``jupiter solve --value-model``), called as functions: collection trees are saved as tree files, the
samples come from ``value_model.extract_samples`` over those files, training uses ``train_value_model`` on the
embedded Gemma 3 270M backbone (CPU), and inference scores nodes with ``ValueScorer``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from jupiter.task import Task

__all__ = ["TrainSettings", "TrainSummary", "split_halves", "train_from_trees", "load_scorer", "collected",
           "finished_training"]


@dataclass(frozen=True)
class TrainSettings:
    """Value-model training for the benchmark: few steps on CPU (LoRA on the top 3 layers, as the learning test).

    ``steps``: optimizer steps (the budget; ~10 s each on 2 busy cores at 4 paths of ≤ 512 tokens).
    """

    steps: int = 40
    batch_size: int = 4
    learning_rate: float = 1e-3
    max_tokens: int = 512
    lora_layers: tuple[int, ...] = (15, 16, 17)
    eval_fraction: float = 0.1
    seed: int = 0
    device: str = "cpu"
    epochs: float | None = None
    """When set, the budget is this many passes over the training samples (the paper trains 3 epochs) and
    ``steps`` is ignored; ``steps_for_epochs`` turns it into steps once the samples are known."""

    def __post_init__(self) -> None:
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"TrainSettings.steps: must be an int >= 1, got {self.steps!r}")
        if self.epochs is not None and not self.epochs > 0:
            raise ValueError(f"TrainSettings.epochs: must be > 0, got {self.epochs!r}")


def steps_for_epochs(samples: int, epochs: float, batch_size: int, eval_fraction: float) -> int:
    """Optimizer steps for ``epochs`` passes over the samples the trainer keeps for training (at least 1)."""
    train = max(1, samples - int(round(samples * eval_fraction)))
    return max(1, math.ceil(epochs * train / batch_size))


@dataclass(frozen=True)
class TrainSummary:
    """What training did: samples, steps, held-out error before/after, time."""

    samples: int
    positive: int
    negative: int
    train_samples: int
    eval_samples: int
    steps: int
    eval_mse_before: float | None
    eval_mse_after: float | None
    eval_spearman_after: float | None
    seconds: float
    model_dir: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_halves(tasks: Sequence[Task]) -> tuple[list[Task], list[Task]]:
    """(collection half, held-out half): alternate within each level, so both halves mix easy/medium/hard."""
    levels: dict[str, list[Task]] = {}
    for task in tasks:
        levels.setdefault(task.level, []).append(task)
    first: list[Task] = []
    second: list[Task] = []
    flip = 0
    for level in sorted(levels):
        for task in sorted(levels[level], key=lambda t: int(t.id) if t.id.isdigit() else t.id):
            (first if flip % 2 == 0 else second).append(task)
            flip += 1
    return first, second


def train_from_trees(tree_files: Sequence[Path], out_dir: Path, settings: TrainSettings = TrainSettings()
                     ) -> TrainSummary:
    """Extract samples from ``tree_files`` (``jupiter value extract`` defaults) and train a value model into
    ``out_dir`` (loadable by ``ValueScorer``)."""
    from jupiter.default_model import ensure_default_model
    from value_model.config import ModelConfig, TrainConfig
    from value_model.extract import ExtractConfig, extract_samples, write_samples
    from value_model.train import train_value_model

    started = time.perf_counter()
    samples = extract_samples(list(tree_files), ExtractConfig(seed=settings.seed))
    if len(samples) < 4:
        raise ValueError(f"value arm: only {len(samples)} samples from {len(tree_files)} trees; too few to train")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_samples(samples, out_dir / "samples.jsonl")
    model_config = ModelConfig(backbone=str(ensure_default_model()), max_tokens=settings.max_tokens,
                               lora_layers=settings.lora_layers)
    if settings.epochs is not None:
        settings = dataclasses.replace(settings, steps=steps_for_epochs(len(samples), settings.epochs,
                                                                        settings.batch_size, settings.eval_fraction))
    # epochs only bound the loop: max_steps ends training after ``steps`` (one epoch may be a single batch on
    # few samples, once the trainer has held its evaluation samples back)
    values: dict[str, Any] = dict(
        epochs=settings.steps, batch_size=settings.batch_size, grad_accumulation=1,
        learning_rate=settings.learning_rate, head_learning_rate=settings.learning_rate,
        eval_fraction=settings.eval_fraction, gradient_checkpointing=False, seed=settings.seed, progress=False,
        device=settings.device, max_steps=settings.steps,
        # a short run warms up over its first 10 % (the field's name changed with the paper-profile defaults)
        warmup_ratio=0.1, warmup_steps=max(1, settings.steps // 10))
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    config = TrainConfig(**{k: v for k, v in values.items() if k in known})
    result = train_value_model(samples, model_config, config, out_dir / "model", resume=False)
    first, last = result.history[0], result.history[-1]
    summary = TrainSummary(
        samples=len(samples), positive=sum(s.value > 0 for s in samples), negative=sum(s.value < 0 for s in samples),
        train_samples=result.train_samples, eval_samples=result.eval_samples, steps=result.steps,
        eval_mse_before=first.eval_mse, eval_mse_after=last.eval_mse, eval_spearman_after=last.eval_spearman,
        seconds=round(time.perf_counter() - started, 1), model_dir=str(out_dir / "model"))
    (out_dir / "train_summary.json").write_text(json.dumps(summary.to_dict(), indent=1) + "\n", encoding="utf-8")
    return summary


def collected(tree_dir: Path, tasks: Sequence[Task]) -> bool:
    """Whether ``tree_dir`` already holds a saved collection tree for every task (a rerun with the same
    ``--workdir`` then reuses them instead of collecting again)."""
    return bool(tasks) and all((tree_dir / f"{task.id}.json").is_file() for task in tasks)


def finished_training(out_dir: Path, settings: TrainSettings) -> TrainSummary | None:
    """The summary of a training run with ``settings``' step budget that finished in ``out_dir`` (its
    ``train_summary.json`` is written last, after the model), or None: a stopped multi-hour run keeps its
    trained model, and a run with another budget trains again."""
    path = out_dir / "train_summary.json"
    if not path.is_file():
        return None
    summary = TrainSummary(**json.loads(path.read_text(encoding="utf-8")))
    wanted = settings.steps if settings.epochs is None else steps_for_epochs(
        summary.samples, settings.epochs, settings.batch_size, settings.eval_fraction)
    if summary.steps != wanted or not (Path(summary.model_dir) / "value_config.json").is_file():
        return None
    return summary


def load_scorer(model_dir: str | Path, device: str = "cpu") -> Any:
    """The trained model as the search's ``Value`` (batched, cached)."""
    from search.loaders import load_value

    return load_value(model_dir, device=device, batch_size=8)
