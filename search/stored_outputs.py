"""The cell outputs a tree file keeps: text capped per cell, images whole and stored once per file.

Why: the sandbox keeps up to ``max_output_chars`` (1,000,000) characters of a cell's output and the model reads
only ``observation_chars`` (4,000) of them, yet every node of a tree file used to store them all — a 25-node
tree of the default model was 1.43 MB, 92 % of it three printouts of IPython's help. Stored outputs exist for
people (``solution.ipynb`` rebuilt from a tree file), so a few times what the model saw is plenty.

Rules, per cell, in output order, with a budget of ``max_chars`` characters of text:

- stream text, ``text/plain``, an error's ``evalue`` and traceback lines: cut in the middle (head and tail
  kept, as the observation does) with a marker saying how many characters were not stored;
- other text representations (``text/html``, ``text/markdown``, JSON, ...): kept whole while they fit, else
  dropped from their bundle (its ``text/plain`` stays) — a half HTML table is worse than none;
- images (``image/*`` base64 payloads, and SVG) are never cut and do not use the budget. An image that occurs
  more than once in the file is stored once, in the file's ``images`` table, and its occurrences hold
  ``IMAGE_REF_PREFIX + key`` (a string, so the output stays valid nbformat); ``resolve_images`` puts them back.

Every character not stored is counted (``CappedOutputs.dropped_chars``; the node records it).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_MAX_CHARS", "IMAGE_REF_PREFIX", "CappedOutputs", "cap_outputs", "image_key",
           "duplicate_images", "share_images", "resolve_images"]

#: Default text budget per cell: twice the sandbox's default observation (what the model read), so a stored
#: notebook shows at least what the model saw.
DEFAULT_MAX_CHARS = 8_000

#: Marks an image payload stored in the file's ``images`` table (followed by its key).
IMAGE_REF_PREFIX = "jupiter-image:"

#: MIME types whose text is cut in the middle when over budget (others are kept whole or dropped).
_CUTTABLE = frozenset({"text/plain"})


def _is_image(mime: str) -> bool:
    return mime.startswith("image/")


def _text(value: Any) -> str:
    """nbformat allows multi-line strings as lists of lines."""
    return "".join(value) if isinstance(value, list) else str(value)


def _marker(dropped: int) -> str:
    return f"\n[... {dropped:,} characters not stored ...]\n"


_MARKER = re.compile(r"\n\[\.\.\. [\d,]+ characters not stored \.\.\.\]\n")


def _stored_length(text: str) -> int:
    """Length without our markers: text capped once fits the same budget again (not cut and counted twice)."""
    return len(text) - sum(len(m) for m in _MARKER.findall(text)) if "characters not stored" in text else len(text)


@dataclass(frozen=True)
class CappedOutputs:
    """Outputs as stored, and how many characters of text were left out."""

    outputs: tuple[dict[str, Any], ...]
    dropped_chars: int


class _Budget:
    def __init__(self, max_chars: int) -> None:
        self.left = max_chars
        self.dropped = 0

    def cut(self, text: str) -> str:
        """``text`` whole if it fits, else head and tail with a marker (the marker is free)."""
        length = _stored_length(text)
        if length <= self.left:
            self.left -= length
            return text
        keep = max(0, self.left)
        head = keep - keep // 2
        tail = keep // 2
        dropped = len(text) - keep
        self.left = 0
        self.dropped += dropped
        return text[:head] + _marker(dropped) + (text[len(text) - tail:] if tail else "")

    def fits(self, size: int) -> bool:
        if size <= self.left:
            self.left -= size
            return True
        self.dropped += size
        return False


def _cap_bundle(data: Mapping[str, Any], budget: _Budget) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for mime, value in data.items():
        if _is_image(mime):
            kept[mime] = value
        elif mime in _CUTTABLE:
            kept[mime] = budget.cut(_text(value))
        else:
            size = len(value) if isinstance(value, str) else len(_text(value)) if isinstance(value, list) \
                else len(json.dumps(value, ensure_ascii=False))
            if budget.fits(size):
                kept[mime] = value
    if not kept:
        kept["text/plain"] = _marker(budget.dropped).strip()
    return kept


def cap_outputs(outputs: Sequence[Mapping[str, Any]], max_chars: int = DEFAULT_MAX_CHARS) -> CappedOutputs:
    """Copies of one cell's nbformat outputs with at most ``max_chars`` characters of text (module docstring)."""
    if not isinstance(max_chars, int) or max_chars < 0:
        raise ValueError(f"max_chars: must be an int >= 0, got {max_chars!r}")
    budget = _Budget(max_chars)
    stored: list[dict[str, Any]] = []
    for output in outputs:
        out = dict(output)
        kind = out.get("output_type")
        if kind == "stream" and "text" in out:
            out["text"] = budget.cut(_text(out["text"]))
        elif kind in ("execute_result", "display_data") and isinstance(out.get("data"), Mapping):
            out["data"] = _cap_bundle(out["data"], budget)
        elif kind == "error":
            out["evalue"] = budget.cut(_text(out.get("evalue", "")))
            lines = []
            for line in out.get("traceback") or ():
                if budget.left > 0:
                    lines.append(budget.cut(_text(line)))
                else:
                    budget.dropped += len(_text(line))
            out["traceback"] = lines
        stored.append(out)
    return CappedOutputs(tuple(stored), budget.dropped)


def image_key(payload: str) -> str:
    """A short content key for an image payload (sha256, 16 hex digits: collisions are not a concern here)."""
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _image_payloads(outputs: Iterable[Mapping[str, Any]]) -> Iterable[str]:
    for output in outputs:
        data = output.get("data")
        if isinstance(data, Mapping):
            for mime, value in data.items():
                if _is_image(mime) and isinstance(value, (str, list)):
                    yield _text(value)


def duplicate_images(cells: Iterable[Sequence[Mapping[str, Any]]]) -> dict[str, str]:
    """``{key: payload}`` of every image that occurs more than once across ``cells`` (lists of outputs)."""
    counts: Counter[str] = Counter()
    for outputs in cells:
        counts.update(_image_payloads(outputs))
    return {image_key(p): p for p, n in counts.items() if n > 1}


def share_images(outputs: Sequence[Mapping[str, Any]], table: Mapping[str, str]) -> list[dict[str, Any]]:
    """``outputs`` with each image in ``table`` replaced by its reference (others untouched)."""
    if not table:
        return [dict(o) for o in outputs]
    stored = []
    for output in outputs:
        out = dict(output)
        data = out.get("data")
        if isinstance(data, Mapping):
            out["data"] = {mime: (IMAGE_REF_PREFIX + key if _is_image(mime) and (key := image_key(_text(v))) in table
                                  else v)
                           for mime, v in data.items()}
        stored.append(out)
    return stored


def resolve_images(outputs: Sequence[Mapping[str, Any]], table: Mapping[str, str], where: str) -> list[dict[str, Any]]:
    """``outputs`` with image references replaced by their payloads; a missing key raises ValueError naming it."""
    resolved = []
    for output in outputs:
        out = dict(output)
        data = out.get("data")
        if isinstance(data, Mapping) and any(isinstance(v, str) and v.startswith(IMAGE_REF_PREFIX)
                                             for v in data.values()):
            fixed = {}
            for mime, value in data.items():
                if isinstance(value, str) and value.startswith(IMAGE_REF_PREFIX):
                    key = value[len(IMAGE_REF_PREFIX):]
                    if key not in table:
                        raise ValueError(f"{where}: image {key!r} is not in the file's 'images' table")
                    value = table[key]
                fixed[mime] = value
            out["data"] = fixed
        resolved.append(out)
    return resolved
