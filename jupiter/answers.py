"""Answers: extraction, comparison, voting keys and DABench metrics — in one place.

Three different notions of "the same answer" are needed and they must not be confused:

- ``official_match`` — InfiAgent-DABench's own rule (equal strings, else both floats within 1e-6). Benchmark
  numbers are computed with it and only with it, so that they equal the official scorer's.
- ``answers_match`` — the reward rule used when collecting trajectories (as the NbQA evaluator describes):
  exact string, then numbers with a tolerance, then lists element-wise and dicts key-wise, recursively.
  It is kinder to formatting (``0.5`` vs ``0.50``, ``[1, 2]`` vs ``[1,2]``) so that rewards are not noisy.
- ``canonical_answer`` — the key under which candidate answers are counted when voting, so that
  ``@mean[34.650]``, ``@mean[ 34.65 ]`` and ``@mean[34.65]`` are one vote.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "ANSWER_PATTERN",
    "extract_answers",
    "format_answers",
    "official_match",
    "answers_match",
    "values_match",
    "reward",
    "canonical_answer",
    "equivalence_key",
    "format_decimals",
    "format_placeholders",
    "DabenchScore",
    "score_dabench",
]

#: The official DABench extraction pattern: ``@name[value]``, value shortest match up to the first ``]``.
ANSWER_PATTERN = re.compile(r"@(\w+)\[(.*?)\]")


def extract_answers(text: str | None) -> dict[str, str]:
    """All ``@name[value]`` answers in ``text``, official semantics: findall, a repeated name → last wins."""
    if not text:
        return {}
    return dict(ANSWER_PATTERN.findall(str(text)))


def format_answers(answers: Mapping[str, str]) -> str:
    """``{"a": "1", "b": "x"}`` → ``"@a[1] @b[x]"`` (the inverse of ``extract_answers``)."""
    return " ".join(f"@{name}[{value}]" for name, value in answers.items())


# ------------------------------------------------------------------------------------------ official


def official_match(response: str | None, label: str) -> bool:
    """InfiAgent-DABench's comparison of one sub-answer: equal, or both floats with |a-b| < 1e-6."""
    if response == label:
        return True
    try:
        return abs(float(response) - float(label)) < 1e-6  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return False


# ------------------------------------------------------------------------------------------ reward rule


def _parse_value(text: str) -> Any:
    """A value as Python data where it parses (numbers, lists, dicts, tuples), else the stripped string."""
    stripped = text.strip()
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return stripped


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().rstrip("%").replace(",", "")) if value.strip() else None
        except ValueError:
            return None
    return None


def values_match(pred: Any, ref: Any, rel_tol: float = 1e-3, abs_tol: float = 1e-3) -> bool:
    """Recursive comparison: string → number with tolerance → list element-wise → dict key-wise."""
    if isinstance(pred, str) and isinstance(ref, str):
        if pred.strip() == ref.strip() or pred.strip().lower() == ref.strip().lower():
            return True
        pred, ref = _parse_value(pred), _parse_value(ref)
        if isinstance(pred, str) and isinstance(ref, str):
            a, b = _as_number(pred), _as_number(ref)
            return a is not None and b is not None and _close(a, b, rel_tol, abs_tol)
    if isinstance(pred, str) and not isinstance(ref, str):
        pred = _parse_value(pred)
    if isinstance(ref, str) and not isinstance(pred, str):
        ref = _parse_value(ref)
    if isinstance(pred, Mapping) and isinstance(ref, Mapping):
        return set(map(str, pred)) == set(map(str, ref)) and all(
            values_match(pred[k], _get_str_key(ref, k), rel_tol, abs_tol) for k in pred
        )
    if isinstance(pred, (list, tuple)) and isinstance(ref, (list, tuple)):
        return len(pred) == len(ref) and all(values_match(a, b, rel_tol, abs_tol) for a, b in zip(pred, ref))
    a, b = _as_number(pred), _as_number(ref)
    if a is not None and b is not None:
        return _close(a, b, rel_tol, abs_tol)
    return str(pred).strip().lower() == str(ref).strip().lower()


def _get_str_key(mapping: Mapping[Any, Any], key: Any) -> Any:
    if key in mapping:
        return mapping[key]
    return next(v for k, v in mapping.items() if str(k) == str(key))


def _close(a: float, b: float, rel_tol: float, abs_tol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)


def answers_match(
    pred: Mapping[str, str], label: Mapping[str, str], rel_tol: float = 1e-3, abs_tol: float = 1e-3
) -> dict[str, bool]:
    """Per label name: does the predicted sub-answer match under the reward rule? (missing → False)."""
    return {
        name: name in pred and values_match(pred[name], ref, rel_tol, abs_tol) for name, ref in label.items()
    }


def reward(
    response: str | None,
    label: str,
    partial: bool = False,
    rel_tol: float = 1e-3,
    abs_tol: float = 1e-3,
) -> float:
    """Reward of a final reply against a label, in [-1, 1].

    All sub-answers correct → +1, otherwise −1. With ``partial=True`` the reward is ``2·share − 1`` where
    share is the fraction of correct sub-answers (so all correct is still +1 and none is −1).
    """
    truth = extract_answers(label)
    if not truth:
        raise ValueError(f"label {label!r} has no @name[value] answer")
    verdicts = answers_match(extract_answers(response), truth, rel_tol, abs_tol)
    share = sum(verdicts.values()) / len(verdicts)
    if partial:
        return 2.0 * share - 1.0
    return 1.0 if share == 1.0 else -1.0


# ------------------------------------------------------------------------------------------ voting


def _canonical_value(value: Any) -> str:
    if isinstance(value, str):
        number = _as_number(value) if not value.strip().endswith("%") else None
        if number is not None:
            return _canonical_value(number)
        return " ".join(value.strip().lower().split())
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, (int, float)):
        number = float(value)
        if math.isnan(number):
            return "nan"
        if number.is_integer() and abs(number) < 1e16:
            return str(int(number))
        return repr(number)
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda kv: str(kv[0]))
        return "{" + ",".join(f"{_canonical_value(str(k))}:{_canonical_value(v)}" for k, v in items) + "}"
    if isinstance(value, (list, tuple, set)):
        items = sorted(value, key=str) if isinstance(value, set) else value
        return "[" + ",".join(_canonical_value(v) for v in items) + "]"
    return str(value).strip().lower()


def canonical_answer(text: str) -> str:
    """The voting key of a reply: its answers with values normalised, names sorted.

    ``@mean[34.650]``, ``@mean[ 34.65 ]`` and ``@mean[34.65]`` give the same key. Text with no
    ``@name[value]`` is keyed by its whitespace-folded lower-case form.
    """
    answers = extract_answers(text)
    if not answers:
        return " ".join(str(text).strip().lower().split())
    return " ".join(
        f"@{name}[{_canonical_value(_parse_value(value))}]" for name, value in sorted(answers.items())
    )


_NUMBER_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10}
_DECIMALS = re.compile(r"\b(\d+|zero|one|two|three|four|five|six|seven|eight|nine|ten)[ -]+decimal(?: place)?s?\b",
                       re.IGNORECASE)
_PLACEHOLDER = re.compile(r"@(\w+)\[([^\]]*)\]")


def format_decimals(format_text: str) -> dict[str, int]:
    """Decimal places the answer format asks for, per answer name (``"... rounded to two decimal places"``).

    A name gets the precision said in the clause that names it (``"mean" is ... two decimal places``); when the
    format states one precision only, every name gets it. Names the format leaves unrounded are absent.
    """
    tokens = list(_PLACEHOLDER.finditer(format_text or ""))
    found = [(m.start(), int(m.group(1)) if m.group(1).isdigit() else _NUMBER_WORDS[m.group(1).lower()])
             for m in _DECIMALS.finditer(format_text or "")]
    if not tokens or not found:
        return {}
    if len({d for _, d in found}) == 1:
        return {m.group(1): found[0][1] for m in tokens}
    out = {}
    for token in tokens:  # the clause that names it: its last quoted mention ("s" for @slope[s]), else the token
        words = {token.group(1), token.group(2).strip()}
        quoted = [m.end() for word in words if word
                  for m in re.finditer(rf"[\"'“‘]{re.escape(word)}[\"'”’]", format_text)]
        mention = max(quoted, default=token.end())
        later = [d for at, d in found if at > mention]
        if later:
            out[token.group(1)] = later[0]
    return out


def format_placeholders(format_text: str) -> dict[str, str]:
    """The placeholder of each answer name in the format (``@mean_fare[mean_fare]`` gives ``mean_fare``)."""
    return {m.group(1): m.group(2).strip() for m in _PLACEHOLDER.finditer(format_text or "")}


def equivalence_key(text: str, format_text: str) -> str | None:
    """The voting key of a reply when answers that the format's precision makes equal count as one.

    Numbers are rounded to the decimal places the format asks for each name (``@mean[34.6459]`` and
    ``@mean[34.65]`` for "two decimal places" share a key), and a reply that copies the format's placeholder
    (``@is_normal[is_normal]``) has no key: it cannot be right and gets no vote. Elsewhere the key is
    ``canonical_answer``'s. A deviation from the paper, which votes on the raw strings (``VoteKey.FORMAT``).
    """
    answers = extract_answers(text)
    if not answers:
        return canonical_answer(text)
    placeholders = format_placeholders(format_text)
    if placeholders and all(placeholders.get(name) == value.strip() for name, value in answers.items()):
        return None
    decimals = format_decimals(format_text)
    parts = []
    for name, value in sorted(answers.items()):
        parsed = _parse_value(value)
        number = _as_number(parsed) if not isinstance(parsed, (list, tuple, dict, set)) else None
        if number is not None and name in decimals and math.isfinite(number):
            parsed = round(number, decimals[name]) + 0.0  # + 0.0: -0.0 and 0.0 are one answer
        parts.append(f"@{name}[{_canonical_value(parsed)}]")
    return " ".join(parts)


# ------------------------------------------------------------------------------------------ DABench


@dataclass(frozen=True)
class DabenchScore:
    """DABench metrics: the official ones (missing/empty responses drop out) and strict ones (over all labels).

    Official figures are rounded to 4 decimals exactly as the official script rounds them.
    """

    abq: float
    pasq: float
    uasq: float
    abq_strict: float
    pasq_strict: float
    uasq_strict: float
    n: int  # questions scored under the official rule (had a non-empty response)
    n_labels: int
    correct: Mapping[str, bool] = field(default_factory=dict)  # question id → every sub-answer correct
    by_level: Mapping[str, float] = field(default_factory=dict)  # strict ABQ per level
    by_concept: Mapping[str, float] = field(default_factory=dict)  # strict ABQ per concept

    def to_dict(self, details: bool = False) -> dict[str, Any]:
        details_fields = ("correct", "by_level", "by_concept")
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in details_fields}
        if details or self.by_level or self.by_concept:
            out["by_level"] = dict(self.by_level)
            out["by_concept"] = dict(self.by_concept)
        if details:
            out["correct"] = dict(self.correct)
        return out


def _first_response(responses: Iterable[Mapping[str, Any]]) -> dict[Any, str]:
    """The official rule: per id, the first record whose response is non-empty."""
    first: dict[Any, str] = {}
    for record in responses:
        if "id" not in record:
            continue
        text = record.get("response")
        if text and record["id"] not in first:
            first[record["id"]] = text if isinstance(text, str) else str(text)
    return first


def score_dabench(
    responses: Sequence[Mapping[str, Any]],
    labels: Sequence[Mapping[str, Any]],
    questions: Sequence[Mapping[str, Any]] | None = None,
) -> DabenchScore:
    """Score responses (``{"id", "response"}``) against label records (``{"id", "common_answers"}``).

    Reproduces the official InfiAgent-DABench scorer: ids are compared as they are in the JSON (an int id
    does not match a string id), and the first non-empty response for an id is the one scored.
    ``questions`` (with ``level`` and ``concepts``) adds strict ABQ per level and per concept.
    """
    by_id = _first_response(responses)
    scored: list[tuple[Any, dict[str, bool]]] = []
    strict: list[tuple[Any, dict[str, bool]]] = []
    for label in labels:
        truth = {str(name): str(value) for name, value in label["common_answers"]}
        text = by_id.get(label["id"])
        predicted = extract_answers(text) if text is not None else {}
        verdicts = {name: official_match(predicted.get(name), ref) for name, ref in truth.items()}
        strict.append((label["id"], verdicts))
        if text is not None:
            scored.append((label["id"], verdicts))

    def metrics(rows: list[tuple[Any, dict[str, bool]]], digits: int | None) -> tuple[float, float, float]:
        if not rows:
            return 0.0, 0.0, 0.0
        abq = sum(all(v.values()) for _, v in rows) / len(rows)
        pasq = sum((sum(v.values()) / len(v)) if v else 0.0 for _, v in rows) / len(rows)
        subs = sum(len(v) for _, v in rows)
        uasq = sum(sum(v.values()) for _, v in rows) / subs if subs else 0.0
        if digits is None:
            return abq, pasq, uasq
        return round(abq, digits), round(pasq, digits), round(uasq, digits)

    abq, pasq, uasq = metrics(scored, 4)
    abq_s, pasq_s, uasq_s = metrics(strict, None)
    correct = {str(qid): all(v.values()) for qid, v in strict}
    by_level: dict[str, list[bool]] = {}
    by_concept: dict[str, list[bool]] = {}
    for question in questions or ():
        key = str(question["id"])
        if key not in correct:
            continue
        by_level.setdefault(str(question.get("level", "")), []).append(correct[key])
        for concept in question.get("concepts") or ():
            by_concept.setdefault(str(concept), []).append(correct[key])
    return DabenchScore(
        abq=abq,
        pasq=pasq,
        uasq=uasq,
        abq_strict=abq_s,
        pasq_strict=pasq_s,
        uasq_strict=uasq_s,
        n=len(scored),
        n_labels=len(labels),
        correct=correct,
        by_level={k: sum(v) / len(v) for k, v in sorted(by_level.items())},
        by_concept={k: sum(v) / len(v) for k, v in sorted(by_concept.items())},
    )
