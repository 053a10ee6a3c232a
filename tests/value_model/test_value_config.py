"""Settings are validated at construction, with errors that name the field."""

from __future__ import annotations

import pytest

from value_model.config import ConfigError, ModelConfig, TemplateName, TrainConfig


@pytest.mark.parametrize("field, value", [("epochs", 0), ("batch_size", -1), ("grad_accumulation", 0),
                                          ("learning_rate", 0.0), ("warmup_ratio", 1.0), ("eval_fraction", 1.5),
                                          ("weight_decay", -0.1), ("max_steps", -1), ("head_learning_rate", 0.0)])
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


def test_defaults_follow_the_issue() -> None:
    config = ModelConfig(backbone="/m")
    assert (config.lora_r, config.lora_alpha, config.lora_dropout, config.max_tokens) == (8, 32, 0.1, 8000)
    assert {"q_proj", "v_proj", "up_proj", "down_proj"} <= set(config.lora_targets)
