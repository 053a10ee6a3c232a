"""Observation text: what the model reads after a cell (plain text, ANSI-free, bounded)."""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

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


_CELL_FRAME = re.compile(r"^(Cell In\[\d+\], line \d+|Input In \[\d+\])")
_FILE_FRAME = re.compile(r"^File (?P<path>[^\s:][^:]*):(?P<line>\d+)(?P<rest>, in .*)?$")
_HOST_PREFIX = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python\d+\.\d+)/")
_LIBRARY_FRAMES_KEPT = 3


def _frames(lines: list[str]) -> list[list[str]]:
    """Group traceback lines into frames (each starts at a ``Cell In[..]`` or ``File ...`` header)."""
    frames: list[list[str]] = []
    for line in lines:
        if _CELL_FRAME.match(line) or _FILE_FRAME.match(line) or not frames:
            frames.append([line])
        else:
            frames[-1].append(line)
    return frames


def _library_header(line: str) -> str:
    """``File /host/.../site-packages/pandas/x.py:12, in f(a)`` → ``File pandas/x.py:12, in f(a)``."""
    match = _FILE_FRAME.match(line)
    if match is None:
        return line
    return f"File {_HOST_PREFIX.sub('', match['path'])}:{match['line']}{match['rest'] or ''}"


def short_traceback(traceback: Iterable[str], max_lines: int = _TRACEBACK_LINES) -> str:
    """A short plain-text traceback for the model: where in *its own code* the error happened.

    Frames of the user's cells keep their source context; frames inside libraries are cut to their header
    line, with host paths made package-relative (``pandas/core/frame.py:3761, in DataFrame.__getitem__``)
    and only the innermost few kept. The banner line and IPython's final ``ename: evalue`` line are dropped
    (the caller prints the error line itself). At most about ``max_lines`` lines, the last cell frame first
    to be kept.
    """
    lines = strip_ansi("\n".join(traceback)).splitlines()
    lines = [line for line in lines if line.strip() and not set(line.strip()) <= {"-"}]
    if lines:
        lines = lines[:-1]
    if lines and "Traceback (most recent call last)" in lines[0]:
        lines = lines[1:]
    frames = _frames(lines)
    if not any(_CELL_FRAME.match(f[0]) for f in frames):
        return "\n".join(lines[-max_lines:])  # not an IPython cell traceback: keep the tail as it is
    last_cell = max(i for i, f in enumerate(frames) if _CELL_FRAME.match(f[0]))
    cell_part = [line for f in frames[: last_cell + 1] if _CELL_FRAME.match(f[0]) for line in f]
    library = [_library_header(f[0]) for f in frames[last_cell + 1:]]
    if len(library) > _LIBRARY_FRAMES_KEPT:
        hidden = len(library) - _LIBRARY_FRAMES_KEPT
        library = [f"... {hidden} more frame(s) inside libraries ..."] + library[-_LIBRARY_FRAMES_KEPT:]
    budget = max(max_lines - len(library), 4)
    return "\n".join(cell_part[-budget:] + library)


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
