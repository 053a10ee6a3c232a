"""Which GPU ``jupiter sft --device`` trains on: exactly the one asked for (transformers' Trainer would otherwise
take cuda:0, and every visible GPU through DataParallel)."""

from __future__ import annotations

import pytest

from jupiter.sft import device as sft_device
from jupiter.sft.device import DeviceError, parse_device, pin_training_device, visible_devices_for


@pytest.mark.parametrize("text, parsed", [("cpu", ("cpu", None)), ("cuda", ("cuda", None)), ("cuda:0", ("cuda", 0)),
                                          ("cuda:3", ("cuda", 3)), (" cuda:1 ", ("cuda", 1))])
def test_device_names_parse(text, parsed):
    assert parse_device(text) == parsed


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "cpu:0", "mps", ""])
def test_other_device_names_are_refused_naming_the_flag(text):
    with pytest.raises(DeviceError, match="--device"):
        parse_device(text)


def test_the_asked_for_gpu_becomes_the_only_visible_one():
    assert visible_devices_for("cpu", {}) is None
    assert visible_devices_for("cuda", {}) == "0"
    assert visible_devices_for("cuda:2", {}) == "2"
    assert visible_devices_for("cuda:2", {"CUDA_VISIBLE_DEVICES": ""}) == "2"


def test_an_index_counts_among_the_gpus_already_visible():
    assert visible_devices_for("cuda", {"CUDA_VISIBLE_DEVICES": "2,3"}) == "2"
    assert visible_devices_for("cuda:1", {"CUDA_VISIBLE_DEVICES": "2, 3"}) == "3"
    assert visible_devices_for("cuda:1", {"CUDA_VISIBLE_DEVICES": "GPU-a1b2,GPU-c3d4"}) == "GPU-c3d4"
    with pytest.raises(DeviceError, match="only 2 GPU"):
        visible_devices_for("cuda:2", {"CUDA_VISIBLE_DEVICES": "2,3"})


def test_pinning_a_gpu_before_cuda_starts_restricts_the_process_to_it(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(sft_device, "_pinned", set())
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert pin_training_device("cpu") == "cpu"
    assert sft_device.os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert pin_training_device("cuda:1") == "cuda:0"
    assert sft_device.os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    assert pin_training_device("cuda:1") == "cuda:0"  # a second run in the same process: already pinned


def test_a_gpu_cannot_be_picked_once_cuda_started_with_several_visible(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(sft_device, "_pinned", set())
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(DeviceError, match="set CUDA_VISIBLE_DEVICES"):
        pin_training_device("cuda:1")
    assert "CUDA_VISIBLE_DEVICES" not in sft_device.os.environ
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert pin_training_device("cuda") == "cuda:0"  # one GPU, the first: nothing to choose


def test_sft_on_a_missing_gpu_fails_before_the_model_loads(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from sft_rows import short_rows

    from jupiter.sft.config import profile
    from jupiter.sft.train import SftError, SftRequest, train_sft

    monkeypatch.setattr(sft_device, "_pinned", set())
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # never read: the device check comes first
    request = SftRequest(data=short_rows(tmp_path / "sft.jsonl", 2), base=str(model), out=tmp_path / "out",
                         config=profile("cpu"), device="cuda:1")
    with pytest.raises(SftError, match="--device cuda:1: no CUDA device is available"):
        train_sft(request)
