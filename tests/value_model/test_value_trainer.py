"""Value training on ``Trainer``: a run stopped (at ``max_steps``, or by SIGTERM) and resumed ends with the weights
of a run never stopped, and a checkpoint holds the trainable weights only.

A tiny random Gemma 3 decoder (``_tiny_value_model``) with the real tokenizer: the checkpoint and resume logic is
under test, not the backbone. Two of the samples come from one tree, so every epoch trains a pack and two
per-path batches, and the head's dropout draws from the RNG that the resume must put back.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from tests.value_model.test_value_model import HISTORIES, VALUES, _tiny_value_model  # noqa: E402
from value_model.config import ModelConfig, TrainConfig  # noqa: E402
from value_model.extract import Sample  # noqa: E402

SOURCES = [("t.json#0.1",), (), ("t.json#0",), ()]  # HISTORIES[2] is the task alone: HISTORIES[0]'s parent


def _samples() -> list[Sample]:
    return [Sample(messages=tuple(h), text="", value=v, visits=1, value_sum=v, sources=s)
            for h, v, s in zip(HISTORIES, VALUES, SOURCES)]


def _config(**changes) -> TrainConfig:
    # warm-up longer than the run: the learning rate of a step does not depend on the run's total (max_steps)
    values = dict(epochs=2, batch_size=1, learning_rate=1e-2, warmup_steps=10, eval_fraction=0.0,
                  gradient_checkpointing=False, progress=False, device="cpu", seed=0)
    values.update(changes)
    return TrainConfig(**values)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {**load_file(str(folder / "adapter" / "adapter_model.safetensors")),
            **load_file(str(folder / "value_head.safetensors"))}


def _assert_same_weights(a: Path, b: Path) -> None:
    left, right = _weights(a), _weights(b)
    assert left.keys() == right.keys() and any("center" in k for k in left)
    for key in left:
        assert torch.allclose(left[key], right[key], atol=1e-6), (key, (left[key] - right[key]).abs().max())


@pytest.fixture(scope="module")
def model_config(backbone: str) -> ModelConfig:
    return ModelConfig(backbone=backbone, max_tokens=128, lora_targets=("q_proj", "v_proj"))


@pytest.fixture(scope="module")
def straight(model_config: ModelConfig, tmp_path_factory) -> tuple[Path, object]:
    from value_model.train import train_value_model

    out = tmp_path_factory.mktemp("straight")
    result = train_value_model(_samples(), model_config, _config(), out, model=_tiny_value_model(model_config))
    return out, result


def test_the_run_trains_a_pack_and_per_path_batches_every_epoch(straight) -> None:
    _, result = straight
    assert result.steps == 6 and [h.epoch for h in result.history] == [0, 1, 2]
    for epoch in result.epochs:
        assert (epoch.batches, epoch.packs, epoch.samples) == (3, 1, 4)
        assert epoch.tokens_computed < epoch.tokens_per_path  # the pack runs the task's tokens once


def test_stopped_at_max_steps_then_resumed_equals_never_stopped(straight, model_config, tmp_path, monkeypatch) -> None:
    from value_model.batches import TrainingBatches
    from value_model.train import latest_checkpoint, train_value_model

    epochs_set: list[int] = []
    real_set_epoch = TrainingBatches.set_epoch
    monkeypatch.setattr(TrainingBatches, "set_epoch", lambda self, e: (epochs_set.append(e), real_set_epoch(self, e)))
    first = train_value_model(_samples(), model_config, _config(max_steps=4), tmp_path,
                              model=_tiny_value_model(model_config))
    assert first.steps == 4 and sorted(set(epochs_set)) == [0, 1]  # stopped in the second epoch
    checkpoint = latest_checkpoint(tmp_path)
    assert checkpoint.name == "checkpoint-4"

    # a checkpoint holds the trainable weights and Trainer's state, not the backbone (its embeddings alone are
    # 16 MB in this tiny model, 671 MB in Gemma 3 270M)
    files = {p.relative_to(checkpoint).as_posix(): p.stat().st_size for p in checkpoint.rglob("*") if p.is_file()}
    for name in ("adapter/adapter_model.safetensors", "value_head.safetensors", "value_config.json",
                 "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "value_history.json"):
        assert name in files, sorted(files)
    assert not any(name.endswith("model.safetensors") and "adapter" not in name for name in files)
    assert sum(files.values()) < 1_000_000, files

    epochs_set.clear()
    second = train_value_model(_samples(), model_config, _config(), tmp_path, model=_tiny_value_model(model_config))
    assert second.resumed_from == 4 and second.steps == 6 and set(epochs_set) == {1}
    assert len(second.learning_rates) == 2  # this call's steps only
    assert [h.epoch for h in second.history] == [0, 1, 2]
    _assert_same_weights(tmp_path, straight[0])


def test_sigterm_stops_after_the_step_with_a_checkpoint_and_the_rerun_resumes(straight, model_config, tmp_path,
                                                                              monkeypatch) -> None:
    from value_model.train import TrainingInterrupted, latest_checkpoint, train_value_model
    from value_model.trainer import RunLog

    real_add = RunLog.add_batch
    batches = []

    def add_then_signal(self, *args, **kwargs):
        real_add(self, *args, **kwargs)
        batches.append(1)
        if len(batches) == 2:  # during the second optimizer step
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(RunLog, "add_batch", add_then_signal)
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingInterrupted, match="stopped at step 2 by SIGTERM"):
        train_value_model(_samples(), model_config, _config(), tmp_path, model=_tiny_value_model(model_config))
    assert signal.getsignal(signal.SIGTERM) is previous  # the handler is put back
    assert latest_checkpoint(tmp_path).name == "checkpoint-2" and not (tmp_path / "metrics.json").exists()
    monkeypatch.undo()
    resumed = train_value_model(_samples(), model_config, _config(), tmp_path, model=_tiny_value_model(model_config))
    assert resumed.resumed_from == 2 and resumed.steps == 6
    _assert_same_weights(tmp_path, straight[0])


def test_a_rerun_of_a_finished_run_trains_no_further(straight, model_config, tmp_path) -> None:
    import shutil

    from value_model.train import train_value_model

    shutil.copytree(straight[0], tmp_path, dirs_exist_ok=True)
    again = train_value_model(_samples(), model_config, _config(), tmp_path, model=_tiny_value_model(model_config))
    assert again.steps == 6 and again.resumed_from == 6 and again.learning_rates == ()
    _assert_same_weights(tmp_path, straight[0])
