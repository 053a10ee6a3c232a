"""Settings are validated at construction, with errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from value_model.config import (
    DEFAULT_TRAIN_PROFILE,
    TRAIN_PROFILES,
    ConfigError,
    ModelConfig,
    TemplateName,
    TrainConfig,
    train_profile,
)


@pytest.mark.parametrize("field, value", [("epochs", 0), ("batch_size", -1), ("grad_accumulation", 0),
                                          ("learning_rate", 0.0), ("warmup_steps", -1), ("max_grad_norm", 0.0),
                                          ("eval_fraction", 1.5), ("weight_decay", -0.1), ("max_steps", -1),
                                          ("head_learning_rate", 0.0)])
def test_train_config_names_the_bad_field(field: str, value) -> None:
    with pytest.raises(ConfigError, match=f"TrainConfig.{field}"):
        TrainConfig(**{field: value})


@pytest.mark.parametrize("field, value", [("lora_r", 0), ("lora_dropout", 1.0), ("max_tokens", 8),
                                          ("template", "llama"), ("lora_layers", (-1,)), ("backbone", "")])
def test_model_config_names_the_bad_field(field: str, value) -> None:
    values = {"backbone": "x", field: value}
    with pytest.raises(ConfigError, match=f"ModelConfig.{field}"):
        ModelConfig(**values)


def test_model_config_round_trips_through_a_dict() -> None:
    config = ModelConfig(backbone="/m", lora_layers=(1, 2), template="chatml", max_tokens=1024)
    assert config.template is TemplateName.CHATML
    assert ModelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="unknown field"):
        ModelConfig.from_dict({**config.to_dict(), "bogus": 1})


def test_model_defaults_are_lora_r8_alpha32_on_attention_and_mlp_with_8000_tokens() -> None:
    config = ModelConfig(backbone="/m")
    assert (config.lora_r, config.lora_alpha, config.lora_dropout, config.max_tokens) == (8, 32, 0.1, 8000)
    assert {"q_proj", "v_proj", "up_proj", "down_proj"} <= set(config.lora_targets)


def test_training_defaults_are_the_papers() -> None:
    """The paper's training settings: 3 epochs, batch size 4, lr 1e-4, 100 warm-up steps, weight decay 0.01,
    clipping 1.0."""
    config = TrainConfig()
    assert (config.epochs, config.batch_size * config.grad_accumulation, config.learning_rate) == (3, 4, 1e-4)
    assert (config.warmup_steps, config.weight_decay, config.max_grad_norm) == (100, 0.01, 1.0)
    assert DEFAULT_TRAIN_PROFILE == "paper" and TRAIN_PROFILES["paper"] == config
    source = (Path(__file__).parents[2] / "value_model" / "config.py").read_text()
    for field in ("epochs", "batch_size", "learning_rate", "weight_decay", "warmup_steps", "max_grad_norm"):
        line = next(text for text in source.splitlines() if text.strip().startswith(f"{field}: "))
        assert "# paper" in line, line  # each paper default says where it comes from


def test_paper_defaults_give_the_papers_number_of_optimizer_steps() -> None:
    from value_model.train import lr_factor, training_schedule

    schedule = training_schedule(1000, TrainConfig())
    assert (schedule.steps_per_epoch, schedule.total_steps, schedule.warmup_steps) == (250, 750, 100)
    factors = [lr_factor(s, 100, 750) for s in range(750)]
    # Trainer's linear schedule (the reference code's): the warm-up starts at 0 and reaches the peak at step 100
    assert factors[0] == 0.0 and factors[1] == 0.01 and factors[99] == 0.99 and factors[100] == 1.0
    assert all(a < b for a, b in zip(factors[:100], factors[1:101]))  # linear warm-up
    assert all(a > b for a, b in zip(factors[100:], factors[101:])) and factors[-1] == 1 / 650  # linear decay


def test_profiles_and_overrides() -> None:
    assert train_profile("paper", learning_rate=None) == TrainConfig()
    assert train_profile("cpu-small", epochs=2).epochs == 2
    with pytest.raises(ConfigError, match="unknown 'nope'"):
        train_profile("nope")
    with pytest.raises(ConfigError, match="TrainConfig.warmup_steps"):
        train_profile("paper", warmup_steps=-5)
    assert TrainConfig.from_dict(TrainConfig().to_dict()) == TrainConfig()


def test_cli_prints_the_resolved_training_config(capsys) -> None:
    from jupiter.cli import main

    assert main(["value", "train", "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["profile"] == "paper" and TrainConfig.from_dict(printed["train"]) == TrainConfig()
    assert "paper" in printed["sources"]["warmup_steps"]
    assert main(["value", "train", "--profile", "cpu-small", "--lr", "5e-4", "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["train"]["learning_rate"] == 5e-4 and printed["train"]["epochs"] == 10
    assert main(["value", "train", "--print-config", "--warmup-steps", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--warmup-steps" in err and "TrainConfig" not in err  # the flag the user typed, not the field
    assert main(["value", "train", "--print-config", "--profile", "paper", "--grad-accum", "4",
                 "--batch-size", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["train"]["grad_accumulation"] == 4
    assert main(["value", "train", "--print-config", "--no-packing", "--pack-tokens", "4000"]) == 0
    train = json.loads(capsys.readouterr().out)["train"]
    assert (train["packing"], train["pack_tokens"]) == (False, 4000)
    assert main(["value", "train", "--print-config", "--pack-tokens", "8"]) == 2
    assert "--pack-tokens" in capsys.readouterr().err


def test_lr_factor_is_trainers_linear_schedule() -> None:
    """``lr_factor`` documents the schedule ``Trainer`` runs (``lr_scheduler_type="linear"``): the same numbers."""
    torch = pytest.importorskip("torch")
    from transformers import get_linear_schedule_with_warmup

    from value_model.train import lr_factor

    for warmup, total in ((100, 750), (2, 6), (0, 5), (10, 4)):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total)
        rates = []
        for _ in range(total):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        assert rates == pytest.approx([lr_factor(s, warmup, total) for s in range(total)])
