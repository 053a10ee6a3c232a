"""The value model's device handling that a CPU machine can check: a GPU asked for where there is none fails
with the device named, and a checkpoint of a model on a GPU carries that GPU's RNG state back on resume."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from value_model.model import ModelLoadError, pick_device  # noqa: E402
from value_model import train as value_train  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_a_gpu_asked_for_where_there_is_none_is_a_load_error_naming_it():
    with pytest.raises(ModelLoadError, match="device cuda: no such CUDA device"):
        pick_device("cuda")
    with pytest.raises(ModelLoadError, match="device cuda:1"):
        pick_device("cuda:1")
    assert pick_device(None).type == "cpu" and pick_device("cpu").type == "cpu"


def test_a_malformed_device_is_a_load_error():
    with pytest.raises(ModelLoadError, match="device 'gpu0'"):
        pick_device("gpu0")


def _model_on(device: str) -> SimpleNamespace:
    return SimpleNamespace(head=SimpleNamespace(linear=SimpleNamespace(weight=SimpleNamespace(
        device=torch.device(device)))))


def test_a_gpu_models_checkpoint_keeps_the_gpus_rng_state_and_resume_restores_it(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: torch.tensor([7, 8], dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: calls.append((state.tolist(), device)))
    state = value_train._device_rng_state(_model_on("cuda:0"))
    assert state["cuda_rng"].tolist() == [7, 8]
    value_train._restore_device_rng_state(_model_on("cuda:0"), {"torch_rng": None, **state})
    assert calls == [([7, 8], torch.device("cuda:0"))]


def test_a_cpu_model_keeps_no_gpu_rng_state_and_ignores_one_in_a_checkpoint(monkeypatch):
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *a: pytest.fail("no GPU RNG on a CPU model"))
    assert value_train._device_rng_state(_model_on("cpu")) == {}
    value_train._restore_device_rng_state(_model_on("cpu"), {"cuda_rng": torch.tensor([1], dtype=torch.uint8)})
    value_train._restore_device_rng_state(_model_on("cuda:0"), {"torch_rng": None})  # written on a CPU
