"""The decision over a tree's answers: the plurality of the sampled answers wins, duplicates folded into one
node count as often as they were sampled, and the vote reports the spelling most samples used."""

from __future__ import annotations

from jupiter.task import Task
from search.decide import decide
from search.tree import NodeStatus, TerminalReason, Tree

TASK = Task(id="sum", question="What is 1 + 2?", format="@x[value]", label="@x[3]")


def _answers(tree: Tree, texts: list[tuple[str, int]]) -> list:
    nodes = []
    for text, multiplicity in texts:
        node = tree.add_child(tree.root, final_answer=text, status=NodeStatus.ANSWER,
                              terminal=TerminalReason.ANSWER, multiplicity=multiplicity)
        nodes.append(node)
    return nodes


def test_plurality_of_sampled_answers_wins_even_when_folded_into_one_node():
    # "b" was sampled three times (one node, multiplicity 3), "a" twice as two nodes
    tree = Tree(TASK)
    nodes = _answers(tree, [("@x[1]", 1), ("@x[2]", 3), ("@x[1]", 1)])
    verdict = decide(nodes)
    assert verdict.vote.answer == "@x[2]" and verdict.vote_table[0].count == 3
    assert [e.count for e in verdict.vote_table] == [3, 2]


def test_vote_reports_the_most_frequent_raw_spelling():
    # the group key is case-insensitive, the official scorer is not
    tree = Tree(TASK)
    nodes = _answers(tree, [("@city[paris]", 1), ("@city[Paris]", 1), ("@city[Paris]", 1)])
    verdict = decide(nodes)
    assert verdict.vote_table[0].answer == "@city[Paris]" and verdict.vote.answer == "@city[Paris]"
    assert verdict.vote.tag == nodes[1].tag  # the earliest node with that spelling (its path is the notebook)


def test_benchmark_curves_and_aime_vote_count_folded_duplicates():
    from benchmarks.aime import aime_vote
    from benchmarks.curves import vote_pick
    from benchmarks.records import CandidateRecord

    records = [CandidateRecord("0.1", "@answer[7]", "7", 0.0, 1),
               CandidateRecord("0.2", "@answer[9]", "9", 0.0, 1, multiplicity=3),
               CandidateRecord("0.3", "@answer[7]", "7", 0.0, 2)]
    assert vote_pick(records).answer == "@answer[9]" and aime_vote(records) == 9
    assert CandidateRecord.from_dict(records[1].to_dict()).multiplicity == 3


FARE = Task(id="fare", question="Mean fare?", label="@mean_fare[34.65]",
            format='@mean_fare[mean_fare] where "mean_fare" is a float number rounded to two decimal places.')


def test_the_format_vote_counts_answers_equal_at_the_formats_precision_as_one():
    """The README demo's tree: 34.6459... and 34.65 are one answer for "two decimal places" (4 votes to 2)."""
    from search.config import VoteKey
    from search.decide import vote_key_rule

    tree = Tree(FARE)
    nodes = _answers(tree, [("@mean_fare[7.92]", 1), ("@mean_fare[34.6459020979021]", 1), ("@mean_fare[34.65]", 1),
                            ("@mean_fare[7.92]", 1), ("@mean_fare[34.65]", 1), ("@mean_fare[34.6459020979021]", 1)])
    exact = decide(nodes, vote_key_rule(VoteKey.EXACT, FARE.format))
    assert [e.count for e in exact.vote_table] == [2, 2, 2] and exact.vote.answer == "@mean_fare[7.92]"
    merged = decide(nodes, vote_key_rule(VoteKey.FORMAT, FARE.format))
    assert [e.count for e in merged.vote_table] == [4, 2]
    assert merged.vote.answer == "@mean_fare[34.65]"  # the group's spelling at the format's precision


def test_the_format_vote_gives_copies_of_the_placeholder_no_vote():
    from search.config import VoteKey
    from search.decide import vote_key_rule

    tree = Tree(FARE)
    nodes = _answers(tree, [("@mean_fare[mean_fare]", 3), ("@mean_fare[34.65]", 1)])
    assert decide(nodes).vote.answer == "@mean_fare[mean_fare]"  # the paper's vote
    verdict = decide(nodes, vote_key_rule(VoteKey.FORMAT, FARE.format))
    assert verdict.vote.answer == "@mean_fare[34.65]" and len(verdict.candidates) == 1


def test_a_search_config_carries_the_vote_key_into_the_result():
    from search import SearchConfig, VoteKey
    from search.result import SearchStats, result_from_tree

    tree = Tree(FARE)
    _answers(tree, [("@mean_fare[mean_fare]", 2), ("@mean_fare[34.65]", 1)])
    config = SearchConfig(vote_key=VoteKey.FORMAT)
    assert result_from_tree("fare", tree, config, SearchStats(), value_given=False).answer == "@mean_fare[34.65]"
    assert SearchConfig().vote_key is VoteKey.EXACT  # the default follows the paper's plain vote
