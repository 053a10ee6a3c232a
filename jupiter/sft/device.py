"""Which GPU ``jupiter sft --device cuda[:N]`` trains on: exactly one, the one asked for.

Why this exists: transformers' ``Trainer`` takes no device. Off the CPU it always trains on ``cuda:0`` and, when
the process sees several GPUs, wraps the model in ``nn.DataParallel`` over all of them. So ``--device cuda:1``
would train on GPU 0 (and every GPU), and on a machine with several GPUs even ``--device cuda`` would go through
``DataParallel``, whose wrapper hides the peft model that the loss (``causal_lm_loss``) reaches into. Restricting
the process to the one asked-for GPU (``CUDA_VISIBLE_DEVICES``, before CUDA starts) makes that GPU ``cuda:0``
and the only one: ``Trainer`` then does what was asked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from jupiter.torch_device import DeviceError
from jupiter.torch_device import parse_device as _parse_device

__all__ = ["DeviceError", "parse_device", "visible_devices_for", "pin_training_device"]

def parse_device(device: str) -> tuple[str, int | None]:
    """``jupiter.torch_device.parse_device`` with the flag named as ``jupiter sft`` spells it."""
    return _parse_device(device, "--device")


def visible_devices_for(device: str, environ: Mapping[str, str]) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` value that leaves this process only the asked-for GPU (None for ``cpu``).

    ``cuda`` means the first visible GPU, as in torch. An index counts among the GPUs already visible: with
    ``CUDA_VISIBLE_DEVICES=2,3``, ``cuda:1`` is physical GPU 3, as torch would number it.
    """
    kind, index = parse_device(device)
    if kind == "cpu":
        return None
    index = index or 0
    current = environ.get("CUDA_VISIBLE_DEVICES")
    if current is None or not current.strip():
        return str(index)
    listed = [entry.strip() for entry in current.split(",") if entry.strip()]
    if index >= len(listed):
        raise DeviceError(f"--device {device}: CUDA_VISIBLE_DEVICES={current} makes only {len(listed)} GPU(s) "
                          "visible")
    return listed[index]


_pinned: set[str] = set()


def pin_training_device(device: str) -> str:
    """Restrict this process to the asked-for GPU and return the device ``Trainer`` will then use (``cuda:0``),
    or ``cpu``. Works only before CUDA starts in this process (or once the same device was pinned here);
    afterwards a process that sees more than one GPU is a ``DeviceError`` rather than a silent wrong choice.
    An index that names no GPU leaves none visible: the caller's "no CUDA device" check reports it."""
    import torch

    kind, index = parse_device(device)
    if kind == "cpu":
        return "cpu"
    if device in _pinned:
        return "cuda:0"
    if not torch.cuda.is_initialized():
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices_for(device, os.environ)
    count = torch.cuda.device_count()  # cached by torch from its first call: a late pin shows up here
    if count > 1 or (count == 1 and torch.cuda.is_initialized() and (index or 0) != 0):
        raise DeviceError(f"--device {device}: CUDA already started in this process with {count} GPU(s) "
                          "visible, so one of them cannot be selected any more; set CUDA_VISIBLE_DEVICES to "
                          "that GPU before starting")
    _pinned.add(device)
    return "cuda:0"
