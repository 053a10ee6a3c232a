"""Issue 12's fixes, each pinned by a test that failed before it: the search turns what it finds into the
right decision, with the paper's settings by default. Fakes only (the quality benchmark runs the real parts)."""

from __future__ import annotations

import math

import pytest

from jupiter.task import Task
from search import Mode, SearchConfig, run_search, solve_many
from search.decide import decide
from search.driver import TreeUpdate
from search.profiles import describe_profile, resolve_profile
from search.tree import NodeStatus, TerminalReason, Tree

from search_fakes import FakePolicy, FakeSandbox, answer, code

TASK = Task(id="sum", question="What is 1 + 2?", format="@x[value]", label="@x[3]")
GOOD = code("add", "x = 1 + 2\nprint(x)")
CHAT = "Thought: I think I will just chat."


def _answers(tree: Tree, texts: list[tuple[str, int]]) -> list:
    nodes = []
    for text, multiplicity in texts:
        node = tree.add_child(tree.root, final_answer=text, status=NodeStatus.ANSWER,
                              terminal=TerminalReason.ANSWER, multiplicity=multiplicity)
        nodes.append(node)
    return nodes


def test_plurality_of_sampled_answers_wins_even_when_folded_into_one_node():
    # item 3: "b" was sampled three times (one node, multiplicity 3), "a" twice as two nodes
    tree = Tree(TASK)
    nodes = _answers(tree, [("@x[1]", 1), ("@x[2]", 3), ("@x[1]", 1)])
    verdict = decide(nodes)
    assert verdict.vote.answer == "@x[2]" and verdict.vote_table[0].count == 3
    assert [e.count for e in verdict.vote_table] == [3, 2]


def test_vote_reports_the_most_frequent_raw_spelling():
    # item 6: the group key is case-insensitive, the official scorer is not
    tree = Tree(TASK)
    nodes = _answers(tree, [("@city[paris]", 1), ("@city[Paris]", 1), ("@city[Paris]", 1)])
    verdict = decide(nodes)
    assert verdict.vote_table[0].answer == "@city[Paris]" and verdict.vote.answer == "@city[Paris]"
    assert verdict.vote.tag == nodes[1].tag  # the earliest node with that spelling (its path is the notebook)


def test_paper_profile_is_the_default_and_says_where_each_setting_comes_from():
    # items 1, 2
    infer, collect = resolve_profile("paper", "infer"), resolve_profile("paper", "collect")
    assert (infer.c_puct, infer.decision.value, infer.iterations, infer.expansions) == (0.0, "vote", 40, 3)
    assert (collect.c_puct, collect.temperature, collect.top_p, collect.iterations) == (1.25, 1.0, 0.95, 50)
    assert SearchConfig() == infer and SearchConfig(mode="collect").c_puct == 1.25
    sources = {s.source for s in describe_profile("paper", "infer").values()}
    assert sources <= {"paper", "reference code", "ours"} and "paper" in sources
    old = resolve_profile("v0.1", "infer")
    assert (old.c_puct, old.prior_rule.value, old.backup_rule.value, old.decision.value) == (
        1.25, "softmax", "per-child", "auto")


class _NanValue:
    def evaluate(self, histories):
        return [math.nan] * len(histories)


def test_nan_value_estimates_never_become_plus_one():
    # item 5: max(-1, min(1, nan)) is 1.0; a NaN must be "no estimate"
    config = SearchConfig(iterations=3, expansions=2)
    result = run_search(TASK, FakePolicy([("Task:", [GOOD, CHAT]), ("Observation:", [answer("@x[3]")])]),
                        FakeSandbox(), config, value=_NanValue())
    assert result.stats.invalid_values >= 1
    assert all(n.value <= 0.0 for n in result.tree.nodes)
    assert all(n.evaluation is None or not math.isnan(n.evaluation) for n in result.tree.nodes)


def test_malformed_reply_is_minus_one_but_expandable_in_inference_only():
    # item 8: the reference code scores a malformed reply -1 and keeps it expandable at inference
    policy = FakePolicy([("Task:", [CHAT]), ("Observation:", [answer("@x[3]")])])
    infer = run_search(TASK, policy, FakeSandbox(), SearchConfig(iterations=3, expansions=1, c_puct=0.0))
    chat = infer.tree["0.1"]
    assert chat.status is NodeStatus.NO_CODE and chat.evaluation == -1.0 and not chat.is_terminal
    assert chat.expanded and chat.children  # its children resample from the root's notebook state
    assert infer.stats.model_failures >= 1
    collect = run_search(TASK, policy, FakeSandbox(), SearchConfig(mode="collect", iterations=3, expansions=1))
    assert collect.tree["0.1"].terminal is TerminalReason.NO_CODE
    strict = run_search(TASK, policy, FakeSandbox(), SearchConfig(iterations=3, expansions=1,
                                                                 malformed_terminal=True))
    assert strict.tree["0.1"].terminal is TerminalReason.NO_CODE


def test_a_run_of_malformed_replies_ends_as_too_many_errors():
    policy = FakePolicy([("Task:", [CHAT])])
    result = run_search(TASK, policy, FakeSandbox(), SearchConfig(iterations=10, expansions=1,
                                                                   max_consecutive_errors=2))
    assert any(n.terminal is TerminalReason.TOO_MANY_ERRORS for n in result.tree.nodes)
    assert result.tree.root.exhausted


def test_on_update_sees_every_node_once_with_final_values():
    updates: list[TreeUpdate] = []
    policy = FakePolicy([("Task:", [GOOD, CHAT]), ("Observation:", [answer("@x[3]")])])
    result = run_search(TASK, policy, FakeSandbox(), SearchConfig(iterations=4, expansions=2),
                        on_update=updates.append)
    seen = [n.tag for u in updates for n in u.new_nodes]
    assert seen == [n.tag for n in result.tree.nodes]  # root first, each node once, in creation order
    assert all(u.task_id == TASK.id for u in updates)


def test_stop_ends_the_tree_at_the_next_step_and_keeps_what_it_has():
    asked = []

    def stop(task_id: str) -> bool:
        asked.append(task_id)
        return len(asked) > 2

    policy = FakePolicy([("Task:", [GOOD]), ("Observation:", [GOOD])])
    result = run_search(TASK, policy, FakeSandbox(), SearchConfig(iterations=20, expansions=1), stop=stop)
    assert result.interrupted and result.error is None
    assert 1 <= result.stats.iterations < 20 and len(result.tree.nodes) >= 2
    assert result.to_dict()["interrupted"] is True and any("stopped early" in n for n in result.notes)


def test_a_queued_tree_that_is_stopped_never_opens_a_sandbox():
    opened = []

    def factory():
        opened.append(1)
        return FakeSandbox()

    tasks = [TASK.replace(id=f"t{i}") for i in range(3)]
    config = SearchConfig(iterations=2, expansions=1, max_trees_in_flight=1)
    results = list(solve_many(tasks, FakePolicy([("Task:", [GOOD])]), factory, config,
                              stop=lambda task_id: task_id == "t1"))
    by_id = {r.task_id: r for r in results}
    assert by_id["t1"].interrupted and len(by_id["t1"].tree.nodes) == 1
    assert not by_id["t0"].interrupted and len(opened) == 2


class _InterruptingPolicy(FakePolicy):
    def __init__(self, *args, interrupt_on_call: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.interrupt_on_call = interrupt_on_call

    def generate(self, histories, params):
        if len(self.calls) + 1 == self.interrupt_on_call:
            self.calls.append((len(histories), params.n))
            raise KeyboardInterrupt
        return super().generate(histories, params)


def test_ctrl_c_inside_a_step_returns_every_tree_interrupted_with_finished_nodes_only():
    policy = _InterruptingPolicy([("Task:", [GOOD, CHAT]), ("Observation:", [GOOD])], interrupt_on_call=3)
    tasks = [TASK.replace(id=f"t{i}") for i in range(2)]
    results = list(solve_many(tasks, policy, FakeSandbox, SearchConfig(iterations=10, expansions=2)))
    assert sorted(r.task_id for r in results) == ["t0", "t1"]
    for result in results:
        assert result.interrupted
        tree = result.tree
        assert len(tree.nodes) >= 3
        for node in tree.nodes[1:]:  # nothing half-built: every kept node ran or was classified
            assert node.status is not NodeStatus.ROOT
            assert node.parent.expanded
        assert sum(1 for n in tree.nodes if n.expanded) == 2  # two finished steps, the third dropped


@pytest.mark.parametrize("rule, root_visits", [("expansion", 1), ("per-child", 2)])
def test_backup_rules_on_one_expansion(rule, root_visits):
    # item 8: the reference code backs up ONE zero per expansion, not one per new live child
    policy = FakePolicy([("Task:", [GOOD, code("other", "x = 3\nprint(x)")])])
    config = SearchConfig(iterations=1, expansions=2, backup_rule=rule)
    tree = run_search(TASK, policy, FakeSandbox(), config).tree
    assert len(tree.nodes) == 3 and tree.root.visit_count == root_visits


def test_benchmark_curves_and_aime_vote_count_folded_duplicates():
    from benchmarks.aime import aime_vote
    from benchmarks.curves import vote_pick
    from benchmarks.records import CandidateRecord

    records = [CandidateRecord("0.1", "@answer[7]", "7", 0.0, 1),
               CandidateRecord("0.2", "@answer[9]", "9", 0.0, 1, multiplicity=3),
               CandidateRecord("0.3", "@answer[7]", "7", 0.0, 2)]
    assert vote_pick(records).answer == "@answer[9]" and aime_vote(records) == 9
    assert CandidateRecord.from_dict(records[1].to_dict()).multiplicity == 3
