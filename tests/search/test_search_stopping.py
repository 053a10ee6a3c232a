"""Watching and stopping a search: every node is reported once, a stop ends the tree at the next step and
keeps what it has, a stopped queued tree never opens a sandbox, and Ctrl-C inside a step keeps finished nodes only."""

from __future__ import annotations

from search_fakes import FakePolicy, FakeSandbox, answer, code

from jupiter.task import Task
from search import SearchConfig, run_search, solve_many
from search.driver import TreeUpdate
from search.tree import NodeStatus

TASK = Task(id="sum", question="What is 1 + 2?", format="@x[value]", label="@x[3]")
GOOD = code("add", "x = 1 + 2\nprint(x)")
CHAT = "Thought: I think I will just chat."


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
