"""The search's collaborators built from settings: the value model and the sandbox (the policy's one loader is
``jupiter.llm.load_policy(spec)``).

Why one module: ``jupiter solve``, ``jupiter bench``, both drivers of ``jupiter serve``, the Ray workers and the
quality benchmarks all need the same objects; built here, they are built the same way everywhere (the same
error for a missing value-model folder, the same sandbox for the same cell timeout).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from jupiter.task import TaskError
from sandbox import Sandbox, SandboxConfig
from search.config import SearchConfig
from search.protocols import Value

__all__ = ["DEFAULT_VALUE_MODEL", "LoadError", "load_value", "sandbox_config", "sandbox_factory",
           "value_model_path"]

#: The value model that ships with the package (``--value-model default``): LoRA and head trained on the
#: embedded default policy's trees, whose backbone it names as ``"default"`` (data/value_model/README.md).
DEFAULT_VALUE_MODEL = Path(str(resources.files("jupiter") / "value_models" / "default"))


class LoadError(TaskError):
    """A collaborator cannot be built from the given settings; the message names the option and the cause."""


def value_model_path(spec: str | Path | None) -> Path | None:
    """``--value-model``'s value as a folder: ``default`` is the shipped model, ``none`` (or None) no value
    model, anything else a folder written by ``jupiter value train``. Usable as an argparse ``type``."""
    if spec is None or str(spec).lower() == "none":
        return None
    if str(spec) == "default":
        if not (DEFAULT_VALUE_MODEL / "value_config.json").is_file():
            raise LoadError(f"--value-model default: no value model ships in {DEFAULT_VALUE_MODEL}")
        return DEFAULT_VALUE_MODEL
    return Path(spec)


def load_value(path: str | Path | None, **options: Any) -> Value | None:
    """The trained value model in folder ``path`` (``value_model.ValueScorer``); None when ``path`` is None.

    ``options`` go to ``ValueScorer.load`` (``device``, ``batch_size``, ...). Imports torch: only called when a
    value model is asked for. Raises ``LoadError`` when the folder is missing or the ``train`` extra is not
    installed.
    """
    path = value_model_path(path)
    if path is None:
        return None
    if not path.is_dir():
        raise LoadError(f"--value-model {path}: folder not found")
    try:
        from value_model import ValueScorer  # torch: imported only when a value model is asked for
    except ImportError as exc:
        raise LoadError(f"--value-model {path}: value_model.ValueScorer is not available here ({exc}); install "
                        "the 'train' extra or run without --value-model") from None
    scorer: Value = ValueScorer.load(path, **options)
    return scorer


def sandbox_config(config: SearchConfig, **options: Any) -> SandboxConfig:
    """The sandbox settings a search with ``config`` runs in: its cell timeout, plus ``options``
    (``SandboxConfig`` fields such as ``nice`` or ``max_live_states``)."""
    return SandboxConfig(**{"timeout_s": config.cell_timeout, **options})


def sandbox_factory(settings: SandboxConfig, wrap: Callable[[Sandbox], Any] | None = None) -> Callable[[], Any]:
    """A function that opens one fresh sandbox per call (one per tree; the driver closes it when the tree ends).

    ``wrap``, when given, wraps each new sandbox (e.g. ``search.file_capture.CapturingSandbox``).
    """
    if wrap is None:
        return lambda: Sandbox(settings)
    return lambda: wrap(Sandbox(settings))
