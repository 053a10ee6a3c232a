"""Imported once in the sandbox's template runtime (``preload_modules``): format two typical tracebacks.

Why: IPython formats a cell's traceback with ``stack_data``, which parses the source file of every frame (for a
pandas ``KeyError``, ``pandas/core/frame.py`` and ``indexes/base.py``) and caches the result per process. Every
forked state starts from the template's caches, so without this warm-up each erroring cell of each tree node
parses pandas' sources again: 1–8 s per erroring cell on a busy 2-core machine, against 0.2–0.5 s warmed.
The warm-up changes no observation (the traceback text is the same), only its cost.
"""

from __future__ import annotations

import sys


def _warm() -> None:
    try:
        import pandas
        from IPython.core.ultratb import AutoFormattedTB
    except ImportError:  # nothing to warm
        return
    formatter = AutoFormattedTB(mode="Context")
    for make in (lambda: pandas.DataFrame({"a": [1]})["b"], lambda: pandas.Series([1.0]).meen(),
                 lambda: eval("undefined_name_")):
        try:
            make()
        except Exception:  # noqa: BLE001 - the point is to format whatever it raised
            formatter.structured_traceback(*sys.exc_info())


_warm()
