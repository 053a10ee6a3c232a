"""The reference solutions of the search-quality benchmark are right where they claim to be.

Every cell runs in the real sandbox on the real DABench tables: the correct solution prints the label's answer
(reward 1 and the official rule), each wrong one prints its own wrong answer, erroring cells raise. A few
questions (one per level) are re-verified in every run; all of them in the slow test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.quality.solutions import SOLUTIONS_PATH, SolutionsError, load_solutions
from benchmarks.quality.verify import verify_all
from jupiter.answers import canonical_answer, extract_answers, reward

KNOWN_BAD_LABELS = {116, 352, 473, 273, 743, 8, 619, 359, 297, 300, 549, 671}  # shared README


@pytest.fixture(scope="module")
def solutions():
    return load_solutions()


def test_file_covers_at_least_30_questions_of_every_level_and_was_verified(solutions, dabench_dir: Path) -> None:
    levels = {q.level for q in solutions.questions}
    assert len(solutions.questions) >= 30
    assert levels == {"easy", "medium", "hard"}
    assert not {q.id for q in solutions.questions} & KNOWN_BAD_LABELS
    assert solutions.verified is not None and solutions.verified["all_passed"]
    assert solutions.verified["questions"] == len(solutions.questions)
    labels = {}
    for line in (dabench_dir / "da-dev-labels.jsonl").read_text().splitlines():
        record = json.loads(line)
        labels[record["id"]] = dict((n, v) for n, v in record["common_answers"])
    for question in solutions.questions:
        assert extract_answers(question.label) == labels[question.id], question.id  # the official label
        assert (dabench_dir / "tables" / question.file).is_file()


def test_stored_answers_are_right_and_wrong_as_claimed(solutions) -> None:
    for question in solutions.questions:
        assert 3 <= len(question.correct.cells) <= 5  # load, compute, print (+ one more step)
        assert reward(question.correct.answer, question.label) == 1.0, question.id
        assert all(reward(w.answer, question.label) == -1.0 for w in question.wrong), question.id
        keys = {canonical_answer(s.answer) for s in question.solutions}
        assert len(keys) == len(question.solutions), question.id
        assert len(question.errors) >= 2


def test_a_malformed_file_names_the_question(tmp_path: Path) -> None:
    doc = json.loads(SOLUTIONS_PATH.read_text())
    del doc["questions"][1]["correct"]["answer"]
    bad = tmp_path / "solutions.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(SolutionsError, match=r"questions\[1\].*correct: missing 'answer'"):
        load_solutions(bad)


def test_one_question_per_level_reverifies_in_the_real_sandbox(solutions, dabench_dir: Path) -> None:
    picked = {}
    for question in solutions.questions:
        picked.setdefault(question.level, question)
    checks = verify_all(list(picked.values()), dabench_dir)
    assert [c.problems for c in checks] == [[], [], []]
    for check, question in zip(checks, picked.values()):
        assert extract_answers(check.printed[question.correct.name]) == extract_answers(question.correct.answer)


def test_the_verifier_catches_a_wrong_claim(solutions, dabench_dir: Path) -> None:
    from dataclasses import replace

    question = solutions.questions[0]
    lying = replace(question, wrong=(replace(question.wrong[0], answer=question.correct.answer),) + question.wrong[1:])
    broken = replace(lying, errors=(replace(question.errors[0], code="print('no error here')"),))
    (check,) = verify_all([broken], dabench_dir)
    text = " ".join(check.problems)
    assert "stored answer is" in text and "is not wrong" in text and "not an error" in text


@pytest.mark.slow
def test_every_question_reverifies_in_the_real_sandbox(solutions, dabench_dir: Path) -> None:
    checks = verify_all(list(solutions.questions), dabench_dir)
    assert {c.id: c.problems for c in checks if c.problems} == {}
