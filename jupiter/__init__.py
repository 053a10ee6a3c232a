"""Jupiter: tree search over Jupyter-notebook states for multi-step data analysis."""

__version__ = "0.1.0"
