"""A device name (``cpu``, ``cuda``, ``cuda:N``) read and checked against this machine, for every part that
puts a model on a device: the transformers policy (``hf:...#device=``), the value model and ``jupiter sft``.

Why one module: a GPU asked for where there is none should fail the same way everywhere, naming the option,
when the option is read, and not as a torch assertion once the weights have loaded. torch is imported only
when a name is checked against the machine, so parsing stays cheap for the CLI.
"""

from __future__ import annotations

import re

__all__ = ["DeviceError", "check_device", "parse_device"]

_DEVICE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


class DeviceError(ValueError):
    """A device name that is malformed, or a GPU that this machine (or process) cannot give."""


def parse_device(device: str, option: str = "device") -> tuple[str, int | None]:
    """``cpu`` → ("cpu", None), ``cuda`` → ("cuda", None), ``cuda:N`` → ("cuda", N); else a DeviceError
    whose message starts with ``option`` (the flag the user typed)."""
    match = _DEVICE.match(device.strip())
    if match is None or (match.group(1) == "cpu" and match.group(2) is not None):
        raise DeviceError(f"{option} {device!r}: expected cpu, cuda or cuda:N")
    return match.group(1), None if match.group(2) is None else int(match.group(2))


def check_device(device: str, option: str = "device") -> str:
    """``device`` in torch's spelling, once this machine is known to have it: a CUDA index past the GPUs torch
    sees (or any GPU where there is none) is a DeviceError naming it and how many there are."""
    kind, index = parse_device(device, option)
    if kind == "cpu":
        return "cpu"
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if (index or 0) >= count:
        raise DeviceError(f"{option} {device.strip()}: no such CUDA device ({count} available)")
    return "cuda" if index is None else f"cuda:{index}"
