"""Config validation, expansion helpers, evaluation rules and the decision."""

from __future__ import annotations

import math

import pytest
from search_fakes import FakeCompletion, FakeExecution, FakeStatus, answer, code

from jupiter.task import Task
from search import ConfigError, Mode, SearchConfig
from search.baselines import config_for_mode, react_config, vote_config
from search.decide import decide
from search.evaluate import fixed_value, needs_value_model
from search.expand import (
    apply_execution,
    check_limits,
    classify_reply,
    draft_children,
    estimate_tokens,
    repeats_failed_cell,
)
from search.tree import Node, NodeStatus, TerminalReason, Tree


@pytest.mark.parametrize("field, value", [
    ("iterations", 0), ("expansions", -1), ("c_puct", -0.1), ("temperature", float("nan")), ("top_p", 0.0),
    ("max_depth", 0), ("max_consecutive_errors", -1), ("cell_timeout", 0), ("mode", "explore"),
    ("decision", "best"), ("max_tokens", 20000), ("iterations", True),
])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"SearchConfig.{field}"):
        SearchConfig(**{field: value})


def test_config_roundtrip_and_modes():
    config = SearchConfig(mode="collect", iterations=7)
    assert config.mode is Mode.COLLECT
    assert SearchConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="unknown"):
        config.replace(nonsense=1)
    react = react_config()
    assert (react.mode, react.temperature, react.iterations, react.max_depth) == (Mode.REACT, 0.2, 25, 25)
    vote = vote_config()
    assert (vote.mode, vote.temperature, vote.vote_runs) == (Mode.VOTE, 0.7, 5)
    assert config_for_mode("react", temperature=None, iterations=3).iterations == 3
    assert not react.wants_logprobs and SearchConfig(c_puct=1.25).wants_logprobs
    assert not SearchConfig().wants_logprobs  # the paper's inference: c_puct 0, priors unused, not asked for


def test_duplicates_are_dropped_and_counted():
    completions = [FakeCompletion("a", mean_logprob=-1.0), FakeCompletion("a", mean_logprob=-1.0),
                   FakeCompletion("b", mean_logprob=-3.0)]
    drafts, dups = draft_children(completions, drop_duplicates=True)
    assert [d.text for d in drafts] == ["a", "b"] and dups == 1
    # the duplicate is folded, not lost: it still counts as a vote and in the prior
    assert [d.multiplicity for d in drafts] == [2, 1]
    assert drafts[0].prior == pytest.approx(2 * math.exp(-1.0)) and drafts[1].prior == pytest.approx(math.exp(-3.0))
    drafts, dups = draft_children(completions, drop_duplicates=True, prior_rule="softmax")
    assert sum(d.prior for d in drafts) == pytest.approx(1) and drafts[0].prior > drafts[1].prior
    drafts, dups = draft_children(completions, drop_duplicates=False)
    assert len(drafts) == 3 and dups == 0 and all(d.multiplicity == 1 for d in drafts)


def test_classify_reply():
    def one(text, reason="stop"):
        drafts, _ = draft_children([FakeCompletion(text, reason)], True)
        return classify_reply(drafts[0])

    assert one(answer("@x[1]")) == (NodeStatus.ANSWER, TerminalReason.ANSWER)
    assert one(answer("@x[1]"), "length") == (NodeStatus.TRUNCATED_REPLY, TerminalReason.TRUNCATED_REPLY)
    assert one(code("t", "print(1)")) is None
    assert one("") == (NodeStatus.UNPARSABLE, TerminalReason.UNPARSABLE)
    assert one("Thought: hmm, let me think") == (NodeStatus.NO_CODE, TerminalReason.NO_CODE)
    assert one("Thought: x\nAction:\n```python\n\n```") == (NodeStatus.EMPTY_CODE, TerminalReason.EMPTY_CODE)


def test_consecutive_errors_end_the_branch_after_the_limit():
    config = SearchConfig(max_consecutive_errors=2)
    tree = Tree(task=None)
    parent = tree.root
    for expected_errors, terminal in [(1, False), (2, False), (3, True)]:
        child = tree.add_child(parent, code="1/0")
        apply_execution(child, parent, FakeExecution(FakeStatus.ERROR, "ZeroDivisionError"), config)
        assert child.consecutive_errors == expected_errors
        assert child.is_terminal is terminal
        parent = child
    ok = tree.add_child(tree["0.1.1"], code="1")
    apply_execution(ok, tree["0.1.1"], FakeExecution(FakeStatus.OK, "1"), config)
    assert ok.consecutive_errors == 0 and ok.status is NodeStatus.CODE_OK


def test_infrastructure_status_is_recorded_as_such():
    tree = Tree(task=None)
    child = tree.add_child(tree.root, code="x")
    apply_execution(child, tree.root, FakeExecution(FakeStatus.TIMEOUT, "timeout"), SearchConfig())
    assert child.is_infrastructure_failure and child.status is NodeStatus.INFRASTRUCTURE
    task = Task(id="t", question="q", label="@x[1]")
    assert fixed_value(child, task, SearchConfig(mode=Mode.COLLECT)) is None
    assert not needs_value_model(child, SearchConfig())


def test_depth_and_context_limits():
    tree = Tree(task=None)
    config = SearchConfig(max_depth=1, max_tokens=100, context_limit=200)
    child = tree.add_child(tree.root, code="x", status=NodeStatus.CODE_OK)
    check_limits(child, lambda: [], config, None)
    assert not child.is_terminal  # the reference code's rule: terminal only when depth > max_depth
    grandchild = tree.add_child(child, code="x", status=NodeStatus.CODE_OK)
    check_limits(grandchild, lambda: [], config, None)
    assert grandchild.terminal is TerminalReason.MAX_DEPTH
    config = SearchConfig(max_depth=5, max_tokens=100, context_limit=200)
    child = tree.add_child(tree.root, code="x", status=NodeStatus.CODE_OK)
    check_limits(child, lambda: [{"role": "user", "content": "x" * 700}], config, None)
    assert child.terminal is TerminalReason.CONTEXT_LIMIT
    child = tree.add_child(tree.root, code="x", status=NodeStatus.CODE_OK)
    check_limits(child, lambda: [{"role": "user", "content": "x" * 700}], config, lambda messages: 10)
    assert not child.is_terminal
    assert estimate_tokens([{"role": "user", "content": "x" * 35}], 3.5) == 14


def test_collect_rewards_and_partial_credit():
    task = Task(id="t", question="q", label="@a[1] @b[2]")
    tree = Tree(task=task)
    node = tree.add_child(tree.root, status=NodeStatus.ANSWER, terminal=TerminalReason.ANSWER,
                          final_answer="@a[1] @b[3]")
    assert fixed_value(node, task, SearchConfig(mode=Mode.COLLECT)) == -1.0
    assert fixed_value(node, task, SearchConfig(mode=Mode.COLLECT, partial_credit=True)) == 0.0
    node.final_answer = "@a[1.0] @b[2]"
    assert fixed_value(node, task, SearchConfig(mode=Mode.COLLECT)) == 1.0
    assert fixed_value(node, task, SearchConfig(mode=Mode.INFER)) is None
    assert needs_value_model(node, SearchConfig(mode=Mode.INFER))
    assert not needs_value_model(node, SearchConfig(mode=Mode.COLLECT))
    with pytest.raises(ValueError, match="label"):
        fixed_value(node, task.replace(label=None), SearchConfig(mode=Mode.COLLECT))


def _answers(*items):
    nodes = []
    for index, (text, value) in enumerate(items):
        node = Node(tag=f"0.{index + 1}", depth=1, final_answer=text, terminal=TerminalReason.ANSWER,
                    visit_count=1, value_sum=value, order=index + 1)
        nodes.append(node)
    return nodes


def test_majority_vote_over_canonical_answers():
    verdict = decide(_answers(("@m[34.650]", 0.0), ("@m[1]", 0.9), ("@m[ 34.65 ]", 0.0)))
    assert verdict.vote.tag == "0.1" and verdict.vote_table[0].count == 2
    assert verdict.by_value.tag == "0.2"


def test_vote_ties_go_to_higher_mean_value_then_earliest():
    verdict = decide(_answers(("@m[1]", 0.1), ("@m[2]", 0.5)))
    assert verdict.vote.answer == "@m[2]"
    verdict = decide(_answers(("@m[1]", 0.5), ("@m[2]", 0.5)))
    assert verdict.vote.answer == "@m[1]"
    assert decide(_answers(("@m[1]", 0.5), ("@m[2]", 0.5))).by_value.answer == "@m[1]"
    empty = decide([])
    assert empty.vote is None and empty.by_value is None and empty.vote_table == ()


def test_a_repeat_of_a_failed_cell_is_the_same_lines_after_an_error():
    failed = Node(tag="0.1", depth=1, code="x = df['a']\n\nprint(x)  ",
                  status=NodeStatus.CODE_ERROR)
    assert repeats_failed_cell(failed, code("again", "x = df['a']\nprint(x)"))
    assert not repeats_failed_cell(failed, code("fixed", "x = df['A']\nprint(x)"))
    assert not repeats_failed_cell(failed, answer("@x[1]"))
    ran = Node(tag="0.2", depth=1, code="x = df['a']\nprint(x)", status=NodeStatus.CODE_OK)
    assert not repeats_failed_cell(ran, code("again", "x = df['a']\nprint(x)"))
