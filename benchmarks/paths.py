"""Where benchmark data lives by default: ``$JUPITER_SHARED/benchmarks`` or ``<repo>/../shared/benchmarks``.

Every runner also takes an explicit path (users download the official copies anywhere); these defaults only
save typing on machines laid out like the project's own.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["shared_dir", "default_data_dir"]

_REPO = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """The shared folder: ``$JUPITER_SHARED`` when set, else ``../shared`` beside the checkout."""
    env = os.environ.get("JUPITER_SHARED")
    return Path(env).expanduser() if env else (_REPO.parent / "shared")


def default_data_dir(benchmark: str) -> Path:
    """``<shared>/benchmarks/<benchmark>`` (``dabench``, ``aime2025`` or ``dsbench``)."""
    return shared_dir() / "benchmarks" / benchmark
