"""A server's trees run where its settings say: on Ray (the workers load the model), in a driver process, or in
this process with the policy (and value model) loaded here — chosen in one place for ``jupiter serve`` and
the app alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupiter.llm import Policy
from jupiter.serve.backend import start_backend
from jupiter.serve.config import ServeConfig
from search.loaders import LoadError
from tests.serve.serve_helpers import TITANIC_REPLAY


def test_on_ray_nothing_is_loaded_here(tmp_path: Path) -> None:
    backend = start_backend(ServeConfig(llm="vllm:/nowhere", db=tmp_path / "jobs.sqlite", ray_address="auto"))
    assert backend.policy is None and backend.value is None and backend.driver is None


def test_in_this_process_the_policy_is_loaded_here(tmp_path: Path) -> None:
    backend = start_backend(ServeConfig(llm=f"replay:{TITANIC_REPLAY}", db=tmp_path / "jobs.sqlite"))
    try:
        assert isinstance(backend.policy, Policy) and backend.value is None and backend.driver is None
    finally:
        backend.policy.close()


def test_a_missing_value_model_fails_naming_the_option(tmp_path: Path) -> None:
    config = ServeConfig(llm=f"replay:{TITANIC_REPLAY}", db=tmp_path / "jobs.sqlite", value_model=tmp_path / "vm")
    with pytest.raises(LoadError, match="--value-model"):
        start_backend(config)
