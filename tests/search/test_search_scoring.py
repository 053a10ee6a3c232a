"""How the search scores nodes and backs them up: no NaN estimate becomes +1, a malformed reply scores -1 (and
stays expandable at inference, as in the reference code), and one expansion backs up one value."""

from __future__ import annotations

import math

import pytest
from search_fakes import FakePolicy, FakeSandbox, answer, code

from jupiter.task import Task
from search import SearchConfig, run_search
from search.tree import NodeStatus, TerminalReason

TASK = Task(id="sum", question="What is 1 + 2?", format="@x[value]", label="@x[3]")
GOOD = code("add", "x = 1 + 2\nprint(x)")
CHAT = "Thought: I think I will just chat."


class _NanValue:
    def evaluate(self, histories):
        return [math.nan] * len(histories)


def test_nan_value_estimates_never_become_plus_one():
    # max(-1, min(1, nan)) is 1.0; a NaN must be "no estimate"
    config = SearchConfig(iterations=3, expansions=2)
    result = run_search(TASK, FakePolicy([("Task:", [GOOD, CHAT]), ("Observation:", [answer("@x[3]")])]),
                        FakeSandbox(), config, value=_NanValue())
    assert result.stats.invalid_values >= 1
    assert all(n.value <= 0.0 for n in result.tree.nodes)
    assert all(n.evaluation is None or not math.isnan(n.evaluation) for n in result.tree.nodes)


def test_malformed_reply_is_minus_one_but_expandable_in_inference_only():
    # the reference code scores a malformed reply -1 and keeps it expandable at inference
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


@pytest.mark.parametrize("rule, root_visits", [("expansion", 1), ("per-child", 2)])
def test_backup_rules_on_one_expansion(rule, root_visits):
    # the reference code backs up ONE zero per expansion, not one per new live child
    policy = FakePolicy([("Task:", [GOOD, code("other", "x = 3\nprint(x)")])])
    config = SearchConfig(iterations=1, expansions=2, backup_rule=rule)
    tree = run_search(TASK, policy, FakeSandbox(), config).tree
    assert len(tree.nodes) == 3 and tree.root.visit_count == root_visits
