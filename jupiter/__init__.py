"""Jupiter: tree search over Jupyter-notebook states for multi-step data analysis.

    import jupiter
    result = jupiter.solve("What is the mean fare?", files=["titanic.csv"], format="@mean_fare[value]")
    result.answer, result.vote_table, result.notebook, result.tree   # shown inline in a notebook

``jupiter.solve`` (``jupiter.api``) is imported on first use: ``import jupiter`` stays light for the CLI.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["solve", "Result", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("solve", "Result"):
        from jupiter import api

        return getattr(api, name)
    raise AttributeError(f"module 'jupiter' has no attribute {name!r}")
