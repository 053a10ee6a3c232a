"""The value model's device handling that a CPU machine can check: a GPU asked for where there is none fails
with the device named, in scoring and in training.

(The GPU's RNG state in checkpoints is ``Trainer``'s now: ``_save_rng_state`` / ``_load_rng_state`` keep and put
back the CUDA generator next to the CPU's, so the tests of the hand-written loop's own copy of it are gone.)
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from value_model.model import ModelLoadError, pick_device  # noqa: E402


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


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_training_on_a_gpu_where_there_is_none_fails_naming_it_and_cpu_or_none_train_on_the_cpu():
    from value_model.train import training_device

    with pytest.raises(ModelLoadError, match="device cuda:0: no such CUDA device"):
        training_device("cuda:0")
    with pytest.raises(ModelLoadError, match="device 'gpu0'"):
        training_device("gpu0")
    assert training_device("cpu").type == "cpu" and training_device(None).type == "cpu"
