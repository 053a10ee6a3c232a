"""End to end on real DABench questions: the REAL sandbox (IPython processes) and the REAL replay policy."""

from __future__ import annotations

import nbformat
import pytest
from search_dabench import SOLUTIONS, replay_rules

from jupiter.answers import extract_answers
from jupiter.llm import ReplayPolicy
from search import Mode, SearchConfig, run_search, solve_many
from search.baselines import react_config, vote_config
from search.export import path_notebook
from search.tree import NodeStatus, TerminalReason


def policy_for(*qids: int) -> ReplayPolicy:
    return ReplayPolicy(rules=[r for q in qids for r in replay_rules(q)], default=["Thought: lost."])


@pytest.mark.parametrize("mode", [Mode.COLLECT, Mode.INFER])
def test_the_correct_path_wins_the_vote(dabench_tasks, sandbox, mode):
    task = dabench_tasks[0]
    # the script repeats itself, so fold identical replies: the whole scripted tree fits in 20 iterations
    config = SearchConfig(mode=mode, iterations=20, expansions=3, cell_timeout=60, drop_duplicates=True)
    result = run_search(task, policy_for(0), sandbox, config, seed=3)
    tree = result.tree
    assert result.error is None
    assert result.answer == SOLUTIONS[0]["answer"] and result.correct is True
    # each computed result is answered K=3 times by the script: one node, three votes (duplicates count)
    assert result.vote_table == {"@mean_fare[34.65]": 6, "@mean_fare[15.74]": 3, "@mean_fare[30]": 1}
    assert {n.final_answer: n.multiplicity for n in tree.answers()}["@mean_fare[15.74]"] == 3
    errors = [n for n in tree.nodes if n.status is NodeStatus.CODE_ERROR]
    assert errors and "NameError" in errors[0].observation
    assert any(n.terminal is TerminalReason.TOO_MANY_ERRORS for n in tree.nodes)
    assert tree.root.exhausted  # the whole scripted tree was explored
    if mode is Mode.COLLECT:
        assert {n.final_answer: n.evaluation for n in tree.answers()}["@mean_fare[34.65]"] == 1.0
        assert all(n.evaluation == -1.0 for n in tree.answers() if n.final_answer != "@mean_fare[34.65]")
        assert result.value_answer == "@mean_fare[34.65]"
    assert result.stats.kernel_seconds > 0 and result.stats.infrastructure_failures == 0


def test_batched_trees_on_three_questions(dabench_tasks):
    from sandbox import Sandbox, SandboxConfig

    policy = policy_for(0, 5, 9)
    steps = []
    config = SearchConfig(mode=Mode.COLLECT, iterations=20, expansions=3, max_concurrent_cells=4)
    results = list(solve_many([dabench_tasks[q] for q in (0, 5, 9)], policy,
                              lambda: Sandbox(SandboxConfig(timeout_s=60)), config, seed=0,
                              on_step=steps.append))
    assert len(results) == 3
    for result in results:
        qid = int(result.task_id)
        assert result.error is None
        assert result.answer == SOLUTIONS[qid]["answer"], (qid, result.vote_table)
    assert policy.stats().calls == len(steps)  # one model call per driver step, for all trees together
    assert max(s.requests for s in steps) == 3


def test_solution_notebook_validates_and_reruns_to_the_same_answer(dabench_tasks, sandbox):
    task = dabench_tasks[5]
    result = run_search(task, policy_for(5), sandbox, SearchConfig(mode=Mode.COLLECT, iterations=20), seed=1)
    notebook = path_notebook(result.tree, result.chosen_tag)
    nbformat.validate(notebook)
    text = nbformat.writes(notebook)
    reread = nbformat.reads(text, as_version=4)
    code_cells = [c for c in reread.cells if c.cell_type == "code"]
    assert len(code_cells) == 2
    recorded = "".join(o.get("text", "") for o in code_cells[-1].outputs)
    fresh = sandbox.open_root(input_files=list(task.files))
    for cell in code_cells:
        execution = fresh.run(cell.source, timeout=60)
    assert execution.stdout == recorded
    printed = execution.stdout.split()[-1]
    assert float(printed) == float(extract_answers(result.answer)["correlation_coefficient"])
    assert reread.metadata["jupiter"]["answer"] == result.answer


def test_react_and_vote_baselines_on_the_real_sandbox(dabench_tasks, sandbox):
    task = dabench_tasks[9]
    react = run_search(task, policy_for(9), sandbox, react_config(cell_timeout=60))
    assert react.answer == SOLUTIONS[9]["answer"]  # the replay's first reply at each step is the right one
    assert [n.depth for n in react.tree.nodes] == [0, 1, 2, 3]
    vote = run_search(task, policy_for(9), sandbox, vote_config(runs=3, cell_timeout=60))
    assert len(vote.tree.root.children) == 3
    assert vote.stats.model_calls <= vote.stats.iterations


def test_notebook_from_a_saved_tree_keeps_the_outputs(dabench_tasks, sandbox, tmp_path):
    from search.tree_io import load_tree, save_tree

    result = run_search(dabench_tasks[0], policy_for(0), sandbox, SearchConfig(mode=Mode.COLLECT, iterations=20))
    loaded = load_tree(save_tree(result.tree, tmp_path / "tree.json"))
    notebook = path_notebook(loaded, result.chosen_tag)
    nbformat.validate(notebook)
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert any("RESULT-0 34.65" in o.get("text", "") for o in outputs)


def test_bundled_example_matches_dabench(dabench_dir):
    import json
    from pathlib import Path

    from jupiter.task import load_task_file

    example = Path(__file__).resolve().parents[2] / "jupiter" / "examples" / "titanic_mean_fare.json"
    task = load_task_file(example)
    labels = [json.loads(line) for line in (dabench_dir / "da-dev-labels.jsonl").read_text().splitlines()]
    assert task.label == "@" + labels[0]["common_answers"][0][0] + "[" + labels[0]["common_answers"][0][1] + "]"
    assert task.files[0].read_bytes() == (dabench_dir / "tables" / "test_ave.csv").read_bytes()


def test_trees_one_after_another_reuse_one_warm_sandbox(dabench_tasks):
    """The driver resets a finished tree's sandbox for the next tree: one zygote for two trees, each tree on a
    clean root, and the sandbox closed at the end."""
    from sandbox import Sandbox, SandboxClosedError, SandboxConfig

    made: list[Sandbox] = []

    def factory() -> Sandbox:
        made.append(Sandbox(SandboxConfig(timeout_s=60)))
        return made[-1]

    config = SearchConfig(mode=Mode.COLLECT, iterations=20, expansions=3, max_trees_in_flight=1)
    results = list(solve_many([dabench_tasks[q] for q in (0, 5)], policy_for(0, 5), factory, config, seed=0))
    assert [r.answer for r in results] == [SOLUTIONS[q]["answer"] for q in (0, 5)]
    assert len(made) == 1 and made[0].stats().zygote_restarts == 0
    with pytest.raises(SandboxClosedError):
        made[0].open_root()

