"""Benchmark-style answer formats: placeholders, category words and rounding written the many ways DABench writes
them (synthesis recipe 4).

Why: the fine-tuned default lost more easy DABench dev questions to the answer's *form* than to its analysis
(measured on its saved trees, docs/benchmarks.md "Real policy"): it copied the format's placeholder as the value
(``@correlation_coefficient[r_value]``, ``@normality_test_result[A string that ...]``), answered ``yes`` where the
format asked for ``Normal``/``Not Normal`` or ``False``, and left a mean unrounded (``51032080.71296296``) or
rounded it to three places when the format said nothing. Every synthesized format of recipes 1-3 used the same
few placeholders (``value``, ``count``, ``r``, ``answer``), said ``yes or no``, and stated the rounding both in the
constraints and in the format: the model never had to read the format to get these right.

``restyle`` rewrites a draft's format (and, for category words, the code that prints them) so that reading the
format matters: placeholders named as DABench names them; ``True``/``False``, ``Normal``/``Not Normal`` and other
category words; the rounding said only in the format, only in the constraints, or nowhere — in which case the
solution rounds to two decimal places, the convention of DABench's labels (e.g. a mean asked for with no
rounding is labelled ``3.98``); answers separated by commas or new lines. The computing step's thought says which
rounding it applies. Labels still come from the code's real output (``nbqa_pipeline.synth.execute``).
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from nbqa_pipeline.synth.programs import Draft, Step, _dec_words

__all__ = ["restyle"]

_SLOT = re.compile(r"@(\w+)\[([^\]]+)\]")
_ROUND_CALL = re.compile(r"round\([^()]*(?:\([^()]*(?:\([^()]*\)[^()]*)*\)[^()]*)*,\s*(\d+)\)")
#: rounding phrases of the formats in ``programs``, and what is left without them
_FORMAT_ROUNDING = (
    (re.compile(r" where both are rounded to \w+ decimal places\."), ""),
    (re.compile(r" where \"\w+\" is (?:a number )?rounded to \w+ decimal places\."), ""),
    (re.compile(r" and the bounds are rounded to \w+ decimal places"), ""),
    (re.compile(r" where \"\w+\" and \"\w+\" are rounded to \w+ decimal places and"), " where"),
    (re.compile(r" \"\w+\" is rounded to \w+ decimal places and"), ""),
    (re.compile(r" and \"\w+\" is rounded to \w+ decimal places"), ""),
    (re.compile(r",? rounded to \w+ decimal places"), ""),
)
#: placeholders of numbers, which may also be called "number"
_NUMERIC = {"value", "count", "r", "p", "pct", "mean", "std", "t", "low", "high", "skew", "kurt"}
#: (yes-word, no-word) pairs a format may ask for instead of yes/no; normality answers also take these words
_YES_NO = (("True", "False"), ("Yes", "No"), ("true", "false"))
_NORMAL = (("Normal", "Not Normal"), ("normal", "not normal"), ("Normal", "Non-normal"))


def _placeholder_options(name: str, old: str, shared: bool) -> list[str]:
    """DABench-style names for the placeholder ``old`` of the answer ``name`` (generic ones when several answers
    share it)."""
    words = name.split("_")
    options = [old, "number"] if shared else [
        f"{name}_value", words[-1] if len(words) > 1 else name, name.replace("_", " "), old,
        f"{words[0]}_value" if len(words) > 1 else f"{name}_result"]
    if old not in _NUMERIC:
        options = [o for o in options if o != "number"]
    return [o for o in options if o and re.fullmatch(r"[A-Za-z][\w ]*", o)]


def _rename_placeholders(fmt: str, rng: random.Random) -> str:
    """Each distinct placeholder renamed as DABench names them (``mean``, ``r_value``, ``mean volume``,
    ``number``); its mentions in the format's ``where`` clause follow. Unchanged on any collision."""
    slots = _SLOT.findall(fmt)
    firsts: dict[str, str] = {}
    for name, old in slots:
        firsts.setdefault(old, name)
    uses = [old for _, old in slots]
    new = {old: rng.choice(_placeholder_options(name, old, uses.count(old) > 1)) for old, name in firsts.items()}
    if len(set(new.values())) != len(new):
        return fmt
    out = _SLOT.sub(lambda m: f"@{m.group(1)}[{new[m.group(2)]}]", fmt)
    for old, repl in new.items():
        out = out.replace(f"\"{old}\"", f"\"{repl}\"")
    return out


def _category_words(draft: Draft, fmt: str, rng: random.Random) -> tuple[str, tuple[Step, ...]]:
    """yes/no answers asked for (and printed) as other words: ``True``/``False``, ``Normal``/``Not Normal``."""
    if "is yes or no" not in fmt:
        return fmt, draft.steps
    last = draft.steps[-1]
    if last.code.count("'yes' if") != 1 or last.code.count("else 'no'") != 1:
        return fmt, draft.steps
    pairs = _YES_NO + (_NORMAL if "is_normal" in fmt else ())
    yes, no = rng.choice(pairs)
    said = rng.choice((f"is {yes} or {no}", f"is a string that is either \"{yes}\" or \"{no}\"",
                       f"is \"{yes}\" or \"{no}\""))
    code = last.code.replace("'yes' if", f"{yes!r} if").replace("else 'no'", f"else {no!r}")
    return fmt.replace("is yes or no", said), draft.steps[:-1] + (Step(last.thought, code),)


def _drop_rounding_sentences(constraints: str) -> str:
    kept = [s for s in re.split(r"(?<=\.)\s+", constraints) if not (s.startswith("Round") and "decimal" in s)]
    return " ".join(kept)


def _drop_format_rounding(fmt: str) -> str:
    for pattern, repl in _FORMAT_ROUNDING:
        fmt = pattern.sub(repl, fmt)
    return fmt


def _digits(steps: tuple[Step, ...]) -> set[int]:
    return {int(d) for step in steps for d in _ROUND_CALL.findall(step.code)}


def _say_rounding(steps: tuple[Step, ...], sentence: str) -> tuple[Step, ...]:
    """``sentence`` after the thought of the last step that rounds."""
    for index in range(len(steps) - 1, -1, -1):
        if "round(" in steps[index].code:
            step = steps[index]
            return steps[:index] + (Step(f"{step.thought} {sentence}", step.code),) + steps[index + 1:]
    return steps


def _rounding(constraints: str, fmt: str, steps: tuple[Step, ...], rng: random.Random
              ) -> tuple[str, str, tuple[Step, ...]]:
    """The rounding said in both places (as drawn), only in the format, only in the constraints, or nowhere
    (two decimals, DABench's convention; only where every rounding of the solution is to two places)."""
    digits = _digits(steps)
    if not digits or "decimal" not in constraints + fmt:
        return constraints, fmt, steps
    only_format = _drop_rounding_sentences(constraints)
    only_constraints = _drop_format_rounding(fmt)
    choices = ["both"]
    if "decimal" not in only_format and "decimal" in fmt:
        choices += ["format", "format"]
    if "decimal" not in only_constraints and "decimal" in constraints:
        choices.append("constraints")
    if digits == {2} and "decimal" not in only_format + only_constraints:
        choices += ["nowhere", "nowhere"]
    where = rng.choice(choices)
    places = " and ".join(_dec_words(d) for d in sorted(digits))
    if where == "format":
        return only_format, fmt, _say_rounding(steps, f"The answer format asks for {places} decimal places.")
    if where == "constraints":
        return constraints, only_constraints, steps
    if where == "nowhere":
        return (only_format, only_constraints,
                _say_rounding(steps, "The task does not say how to round, so I round to two decimal places."))
    return constraints, fmt, steps


def _separate(fmt: str, rng: random.Random) -> str:
    """Answers separated by spaces (as drawn), commas or new lines, as DABench's formats are."""
    head, sep, tail = fmt.partition(" where ")
    slots = _SLOT.findall(head)
    if len(slots) < 2 or _SLOT.sub("", head).strip():
        return fmt
    joiner = rng.choice((" ", ", ", "\n"))
    if joiner == "\n":
        return "\n".join(["{", *(f"@{name}[{ph}]" for name, ph in slots), *([f"where {tail}"] if sep else []), "}"])
    return joiner.join(f"@{name}[{ph}]" for name, ph in slots) + sep + tail


def restyle(draft: Draft, rng: random.Random) -> Draft:
    """The draft with its answer format written as DABench writes formats (see the module's docstring).

    The answer names, and so the label's names, do not change; category words change what the code prints."""
    fmt, steps = _category_words(draft, draft.format, rng)
    constraints, fmt, steps = _rounding(draft.constraints, fmt, steps, rng)
    if rng.random() < 0.7:
        fmt = _rename_placeholders(fmt, rng)
    fmt = _separate(fmt, rng)
    return replace(draft, constraints=constraints, format=fmt, steps=steps)
