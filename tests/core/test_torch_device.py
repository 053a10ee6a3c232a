"""Device names shared by the policy, the value model and SFT: parsed once, checked against this machine, and
refused with the option's name and the GPU count."""

from __future__ import annotations

import pytest

from jupiter.torch_device import DeviceError, check_device, parse_device

torch = pytest.importorskip("torch")


def test_names_come_back_in_torchs_spelling():
    assert check_device(" cpu ") == "cpu"
    assert parse_device("cuda:2") == ("cuda", 2) and parse_device("cuda") == ("cuda", None)


@pytest.mark.parametrize("name", ["gpu", "cpu:0", "cuda:x", "mps", ""])
def test_a_malformed_name_is_refused_naming_the_option(name):
    with pytest.raises(DeviceError, match=f"^#device {name!r}: expected cpu, cuda or cuda:N"):
        check_device(name, option="#device")


def test_a_gpu_past_the_last_one_is_refused_with_the_count():
    missing = torch.cuda.device_count()
    with pytest.raises(DeviceError, match=rf"device cuda:{missing}: no such CUDA device \({missing} available\)"):
        check_device(f"cuda:{missing}")
