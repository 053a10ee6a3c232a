"""Answer extraction, the reward rule, voting keys and the official DABench comparison."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupiter.answers import (
    answers_match,
    canonical_answer,
    extract_answers,
    format_answers,
    official_match,
    reward,
    values_match,
)

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
# Official semantics: a value stops at the first "]" and cannot span lines ("." does not match a newline).
values = st.text(alphabet=st.characters(blacklist_characters="]\n\r", blacklist_categories=("Cs",)), max_size=20)


@given(st.dictionaries(names, values, min_size=1, max_size=5))
def test_format_then_extract_round_trips(answers):
    assert extract_answers(format_answers(answers)) == answers


@given(names, values, values)
def test_repeated_name_last_wins(name, first, second):
    assert extract_answers(f"@{name}[{first}] text @{name}[{second}]") == {name: second}


@given(st.text(max_size=200))
def test_extraction_equals_official_findall(text):
    expected = dict(re.findall(r"@(\w+)\[(.*?)\]", text))
    assert extract_answers(text) == expected


@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_official_match_number_equals_itself_in_other_spelling(x):
    assert official_match(repr(x), f"{x:.17g}")


@pytest.mark.parametrize(
    "response,label,verdict",
    [
        ("34.65", "34.65", True),
        ("34.650", "34.65", True),  # floats equal
        (" 34.65", "34.65", True),  # float() strips spaces
        ("34.6500001", "34.65", True),  # within 1e-6
        ("34.651", "34.65", False),
        ("Male", "male", False),  # case matters officially
        ("1e3", "1000", True),  # scientific notation parses as a float
        ("nan", "nan", True),  # equal strings
        ("NaN", "nan", False),  # float('nan') is never close to anything
        ("", "", True),  # empty label, empty answer
        (None, "", False),  # missing name
        (None, "3", False),
        ("[1, 2]", "[1,2]", False),  # lists are strings officially
        ("a, b", "a, b", True),
        ("inf", "inf", True),
        ("True", "true", False),
    ],
)
def test_official_match_cases(response, label, verdict):
    assert official_match(response, label) is verdict


@pytest.mark.parametrize(
    "pred,ref,verdict",
    [
        ("0.5", "0.50", True),
        ("0.5004", "0.5", True),  # abs tol 1e-3
        ("1000.9", "1000", True),  # rel tol 1e-3
        ("1002", "1000", False),
        ("[1, 2, 3]", "[1,2,3]", True),
        ("[1, 2]", "[1, 2, 3]", False),
        ("{'a': 1.0, 'b': [2, 3]}", "{'b': [2.0, 3], 'a': 1}", True),
        ("{'a': 1}", "{'a': 2}", False),
        ("Male", "male", True),  # reward rule forgives case
        ("yes", "no", False),
        ("nan", "nan", True),
        ("10.35, 186.63", "10.35,186.63", True),  # tuples element-wise
        ("3.2e-05", "0.000032", True),
    ],
)
def test_reward_rule_cases(pred, ref, verdict):
    assert values_match(pred, ref) is verdict


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), st.integers(min_value=0, max_value=6))
def test_reward_rule_accepts_rounding_within_tolerance(x, digits):
    rounded = round(x, 3 + digits)
    assert values_match(str(rounded), repr(x))


def test_answers_match_and_reward():
    label = "@a[1.0] @b[x]"
    assert answers_match({"a": "1", "b": "X"}, {"a": "1.0", "b": "x"}) == {"a": True, "b": True}
    assert reward("Formatted answer: @a[1] @b[x]", label) == 1.0
    assert reward("@a[1] @b[y]", label) == -1.0
    assert reward("@a[1] @b[y]", label, partial=True) == 0.0
    assert reward("no answer here", label, partial=True) == -1.0
    with pytest.raises(ValueError, match="no @name"):
        reward("@a[1]", "plain label")


def test_canonical_answer_merges_spellings():
    keys = {canonical_answer(t) for t in ["@mean[34.650]", "@mean[ 34.65 ]", "@mean[34.65]", "x @mean[3.465e1]"]}
    assert keys == {"@mean[34.65]"}
    assert canonical_answer("@b[2] @a[1]") == canonical_answer("@a[1.0] @b[2.00]")
    assert canonical_answer("@a[1]") != canonical_answer("@a[2]")
    # a value ends at the first "]", exactly as the official regex reads it
    assert extract_answers("@a[[1, 2]]") == {"a": "[1, 2"}


@given(st.dictionaries(names, st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=4))
def test_canonical_answer_is_stable_under_reformatting(answers):
    plain = format_answers({k: repr(v) for k, v in answers.items()})
    padded = format_answers({k: f" {v:.12g} " for k, v in answers.items()})
    if all(math.isclose(float(f"{v:.12g}"), v, rel_tol=0, abs_tol=0) for v in answers.values()):
        assert canonical_answer(plain) == canonical_answer(padded)


def test_format_decimals_reads_the_precision_of_each_answer():
    from jupiter.answers import format_decimals

    assert format_decimals('@mean[m] where "m" is rounded to two decimal places.') == {"mean": 2}
    assert format_decimals('@slope[s], @p_value[p] where "s" is rounded to 2 decimal places and "p" to four '
                           'decimal places.') == {"slope": 2, "p_value": 4}
    assert format_decimals("@count[n] where n is an integer.") == {}


def test_equivalence_key_rounds_to_the_format_and_drops_placeholders():
    from jupiter.answers import equivalence_key

    fmt = '@r[r_value] @kind[kind] where "r_value" is rounded to two decimal places and "kind" is a word.'
    assert equivalence_key("@r[0.8731] @kind[Linear]", fmt) == equivalence_key("@kind[linear] @r[0.87]", fmt)
    assert equivalence_key("@r[0.8731] @kind[linear]", fmt) != equivalence_key("@r[0.88] @kind[linear]", fmt)
    assert equivalence_key("@r[r_value] @kind[kind]", fmt) is None
    assert equivalence_key("@r[-0.001] @kind[x]", fmt) == equivalence_key("@r[0.0] @kind[x]", fmt)
    assert equivalence_key("no answer here", fmt) == "no answer here"
