"""Observation text: what the model reads after a cell (plain text, ANSI-free, bounded)."""
from __future__ import annotations

import re
from typing import Any, Iterable

__all__ = ["strip_ansi", "cut_middle", "short_traceback", "render_observation"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_TRACEBACK_LINES = 12


def strip_ansi(text: str) -> str:
    """Remove terminal colour / cursor escape codes (IPython tracebacks are coloured)."""
    return _ANSI.sub("", text)


def cut_middle(text: str, max_chars: int) -> str:
    """Keep the head and tail of ``text`` within about ``max_chars``; say how many characters were cut."""
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n... [{omitted} characters omitted] ...\n{text[-tail:]}"


def short_traceback(traceback: Iterable[str], max_lines: int = _TRACEBACK_LINES) -> str:
    """The last ``max_lines`` lines of a (coloured) traceback, plain text; the final ``ename: evalue`` line of
    IPython tracebacks is dropped because the caller prints it."""
    lines = strip_ansi("\n".join(traceback)).splitlines()
    lines = [line for line in lines if line.strip() and not set(line.strip()) <= {"-"}]
    if lines:
        lines = lines[:-1]
    return "\n".join(lines[-max_lines:])


def _plain(data: dict[str, Any]) -> str:
    text = data.get("text/plain", "")
    text = "".join(text) if isinstance(text, list) else str(text)
    if not text:
        kinds = ", ".join(sorted(data))
        text = f"<{kinds}>"
    return text


def render_observation(outputs: Iterable[dict[str, Any]], max_chars: int, dropped_chars: int = 0) -> str:
    """Join a cell's outputs into one observation string, cut in the middle to ``max_chars``."""
    parts: list[str] = []
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            text = out.get("text", "")
            parts.append("".join(text) if isinstance(text, list) else text)
        elif kind in ("execute_result", "display_data"):
            parts.append(_plain(out.get("data", {})) + "\n")
        elif kind == "error":
            tb = short_traceback(out.get("traceback", ()))
            parts.append((tb + "\n" if tb else "") + f"{out.get('ename', 'Error')}: {out.get('evalue', '')}\n")
    if dropped_chars:
        parts.append(f"[output truncated: {dropped_chars} characters dropped]\n")
    text = strip_ansi("".join(parts)).rstrip("\n")
    return cut_middle(text, max_chars)
