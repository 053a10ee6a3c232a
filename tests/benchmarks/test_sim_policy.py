"""The simulated policy that ``benchmarks/perf/scale.py`` and the tree viewer's browser test grow trees with.

Logic tests, no sandbox: the same seed gives the same samples, noise-free it follows the correct solution to
its answer, and its switches, errors and fixes happen where its options say.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.perf.sim_policy import SimOptions, SimulatedPolicy, load_solutions, read_path, tasks_for
from jupiter.answers import reward
from jupiter.llm import PolicyError, SamplingParams
from jupiter.prompts import Turn, build_messages, parse_reply
from jupiter.task import Task


@pytest.fixture(scope="module")
def questions():
    return list(load_solutions())


@pytest.fixture(scope="module")
def tasks(questions):
    return tasks_for(questions, Path("dabench-not-read"))  # the tasks' texts are what the policy reads


def _texts(outs):
    return [[c.text for c in row] for row in outs]


def test_the_file_holds_every_level_and_a_right_and_wrong_answers_per_question(questions) -> None:
    assert len(questions) >= 30 and {q.level for q in questions} == {"easy", "medium", "hard"}
    for question in questions:
        assert reward(question.correct.answer, question.label) == 1.0
        assert all(reward(w.answer, question.label) == -1.0 for w in question.wrong)


def test_same_seed_same_samples_other_seed_other_samples(questions, tasks) -> None:
    policy = SimulatedPolicy(questions)
    histories = [build_messages(t) for t in tasks[:5]]
    first = policy.generate(histories, SamplingParams(n=6, seed=3))
    assert first == SimulatedPolicy(questions).generate(histories, SamplingParams(n=6, seed=3))
    others = [_texts(policy.generate(histories, SamplingParams(n=6, seed=s))) for s in range(4, 9)]
    assert any(o != _texts(first) for o in others)


def test_follows_the_correct_solution_to_its_answer_without_noise(questions, tasks) -> None:
    policy = SimulatedPolicy(questions, SimOptions(p_switch=0.0, p_error=0.0))
    for question, task in list(zip(questions, tasks))[:6]:
        turns: list[Turn] = []
        for cell in question.correct.cells:
            (completion,), = policy.generate([build_messages(task, turns)], SamplingParams(n=1, seed=1))
            parsed = parse_reply(completion.text)
            assert parsed.code == cell.code and parsed.thought == cell.thought
            turns.append(parsed.to_turn(observation="ok"))
        (completion,), = policy.generate([build_messages(task, turns)], SamplingParams(n=1, seed=1))
        assert parse_reply(completion.text).answer == question.correct.answer


def test_switches_to_wrong_solutions_and_errs_and_fixes(questions, tasks) -> None:
    question, task = questions[0], tasks[0]
    load = question.correct.cells[0]
    after_load = [Turn(load.thought, load.code, "ok")]
    switcher = SimulatedPolicy(questions, SimOptions(p_switch=1.0, p_error=0.0))
    codes = {parse_reply(c.text).code for c in
             switcher.generate([build_messages(task, after_load)], SamplingParams(n=20, seed=0))[0]}
    assert codes == {w.cells[1].code for w in question.wrong}  # starts a wrong solution after the shared load
    erring = SimulatedPolicy(questions, SimOptions(p_switch=0.0, p_error=1.0, p_fix=1.0))
    (reply,), = erring.generate([build_messages(task, after_load)], SamplingParams(n=1, seed=0))
    error = parse_reply(reply.text).code
    assert error in {c.code for c in question.errors}
    erred = after_load + [Turn("x", error, "KeyError")]
    state = read_path(build_messages(task, erred), questions)
    assert state.last_was_error and state.current == 0
    (fixed,), = erring.generate([build_messages(task, erred)], SamplingParams(n=1, seed=0))
    assert parse_reply(fixed.text).code == question.correct.cells[1].code  # p_fix = 1: back on its solution


def test_a_task_it_has_no_solutions_for_is_a_policy_error(questions) -> None:
    with pytest.raises(PolicyError, match="no reference solutions"):
        SimulatedPolicy(questions).generate([build_messages(Task(id="x", question="What is 2+2?"))],
                                            SamplingParams(n=1, seed=0))


def test_bad_options_name_the_field() -> None:
    with pytest.raises(ValueError, match="SimOptions.p_fix"):
        SimOptions(p_fix=1.5)
